package engine

import (
	"fmt"
	"runtime"

	"github.com/atom-go/atom/models"
	"github.com/atom-go/atom/ops"
	"github.com/atom-go/atom/ops/cpu"
	"github.com/atom-go/atom/ops/gpu"
)

// devices are the backends of the engine's tensor-parallel ranks (one without parallelism)
// and the group that joins them.
type devices struct {
	backends []ops.Backend
	group    ops.Group // nil for one rank
	closers  []func()
}

// resolveDevice turns --device auto into gpu, where the kernel library loads and enough GPUs
// are visible, or cpu. It returns the backend and a line saying what serves and why (with the
// GPU's name), which the engine logs at start and keeps for its hosts (Engine.Backend).
func resolveDevice(cfg Config) (device, choice string) {
	switch cfg.Device {
	case "cpu":
		return "cpu", "cpu (--device cpu)"
	case "gpu":
		desc, err := gpu.Probe(cfg.TensorParallelSize)
		if err != nil {
			desc = "unusable: " + err.Error()
		}
		return "gpu", fmt.Sprintf("gpu: %s (--device gpu)", desc)
	}
	desc, err := gpu.Probe(cfg.TensorParallelSize)
	if err != nil {
		return "cpu", fmt.Sprintf("cpu (--device auto found no usable GPU: %v)", err)
	}
	return "gpu", fmt.Sprintf("gpu: %s (--device auto)", desc)
}

// openDevices makes one backend per rank: cpu backends sharing the cores, or gpu devices
// 0..n-1 joined by NCCL. It runs on the loop's locked thread, which is left bound to device 0.
// cpuOpts are the cpu backends' options (the vector path, a float16 KV cache).
func openDevices(cfg Config, mc *models.Config, cpuOpts cpu.Options) (*devices, error) {
	n := cfg.TensorParallelSize
	d := &devices{}
	if cfg.Device == "cpu" {
		threads := cfg.Threads
		if threads <= 0 {
			threads = runtime.GOMAXPROCS(0)
		}
		for r := 0; r < n; r++ {
			b := cpu.NewWith(max(1, threads/n), cpuOpts)
			d.backends, d.closers = append(d.backends, b), append(d.closers, b.Close)
		}
		if n > 1 {
			d.group = cpu.NewGroup(n)
		}
		return d, nil
	}
	dt := mc.DType
	if cfg.DType != "auto" && cfg.DType != "" {
		v, err := ops.ParseDType(cfg.DType)
		if err != nil {
			return nil, fmt.Errorf("--dtype: %w", err)
		}
		dt = v
	}
	var gbs []*gpu.Backend
	for r := 0; r < n; r++ {
		b, err := gpu.New(r, gpu.Options{DType: dt})
		if err != nil {
			d.close()
			return nil, fmt.Errorf("tensor-parallel rank %d: %w", r, err)
		}
		gbs, d.backends, d.closers = append(gbs, b), append(d.backends, b), append(d.closers, b.Close)
	}
	if err := gbs[0].BindThread(); err != nil {
		d.close()
		return nil, err
	}
	if n > 1 {
		g, err := gpu.NewGroup(gbs)
		if err != nil {
			d.close()
			return nil, err
		}
		d.group = g
		d.closers = append([]func(){g.Close}, d.closers...)
	}
	return d, nil
}

func (d *devices) close() {
	for _, c := range d.closers {
		c()
	}
	d.closers = nil
}

// kvBlocks sizes the KV cache the model declares (spec, one rank's): --num-kv-blocks if
// given; on the gpu, what --gpu-memory-utilization of a device leaves after the weights and
// workspaces already allocated (the model's buffers are sized for the largest step, so that is
// the peak); on the cpu, --kv-cache-memory bytes over all ranks. A draft model's cache (extra)
// has as many blocks as the target's, so a block costs the bytes of both.
func (d *devices) kvBlocks(cfg Config, spec ops.KVCacheSpec, extra ...ops.KVCacheSpec) (int, error) {
	if cfg.NumKVBlocks > 0 {
		return cfg.NumKVBlocks, nil
	}
	perRank := spec.BlockBytes(cfg.BlockSize)
	for _, x := range extra {
		perRank += x.BlockBytes(cfg.BlockSize)
	}
	if perRank <= 0 {
		return 0, fmt.Errorf("size the KV cache: the model declares %d bytes a block", perRank)
	}
	g, ok := d.backends[0].(*gpu.Backend)
	if !ok {
		if c, ok := d.backends[0].(*cpu.Backend); ok {
			perRank = perRank * int64(c.KVValueBytes()) / 4 // the spec counts float32 values
		}
		return int(cfg.KVCacheMemory / (perRank * int64(len(d.backends)))), nil
	}
	free, total, err := g.Lib().MemInfo()
	if err != nil {
		return 0, fmt.Errorf("size the KV cache: %w", err)
	}
	used := int64(total - free)
	budget := int64(float64(total)*cfg.GPUMemoryUtilization) - used
	blocks := budget / perRank
	if blocks <= 0 {
		return 0, fmt.Errorf("no device memory left for the KV cache: %d of %d bytes used and --gpu-memory-utilization %.2f", used, total, cfg.GPUMemoryUtilization)
	}
	return int(blocks), nil
}
