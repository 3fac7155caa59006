package plugin

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/atom-go/atom/bridge"
	"github.com/atom-go/atom/bridge/pb"
	"github.com/atom-go/atom/engine"
	"github.com/atom-go/atom/ops"
)

// Server implements the AtomEngine service on at most one loaded engine.
type Server struct {
	pb.UnimplementedAtomEngineServer
	version string
	log     hclog.Logger

	// loadMu serialises the calls that replace state: LoadModel and InitKVCache.
	loadMu sync.Mutex

	mu      sync.Mutex
	eng     *engine.Engine
	host    *engine.HostSession       // non-nil in host mode
	streams map[string]*engine.Stream // running Generate requests

	fault *fault // injected crash (FaultEnv), nil in normal use
}

// NewServer returns a Server with no model loaded.
func NewServer(version string, log hclog.Logger) *Server {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	return &Server{version: version, log: log, streams: map[string]*engine.Stream{}, fault: faultFromEnv(log)}
}

// Close closes the loaded engine, if any.
func (s *Server) Close() {
	s.loadMu.Lock()
	defer s.loadMu.Unlock()
	s.unload()
}

// unload closes the engine and forgets it; the caller holds loadMu.
func (s *Server) unload() {
	s.mu.Lock()
	e := s.eng
	s.eng, s.host = nil, nil
	s.mu.Unlock()
	if e != nil {
		e.Close()
	}
}

// state returns the engine and host session; FailedPrecondition when no model is loaded.
func (s *Server) state() (*engine.Engine, *engine.HostSession, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.eng == nil {
		return nil, nil, status.Error(codes.FailedPrecondition, "no model is loaded: call LoadModel first")
	}
	return s.eng, s.host, nil
}

func checkWire(v uint32) error {
	if v != bridge.WireVersion {
		return status.Errorf(codes.FailedPrecondition, "wire_version %d: this plugin speaks wire version %d (send it in the request)", v, bridge.WireVersion)
	}
	return nil
}

// Describe reports versions and the loaded model.
func (s *Server) Describe(_ context.Context, req *pb.DescribeRequest) (*pb.ModelInfo, error) {
	if err := checkWire(req.GetWireVersion()); err != nil {
		return nil, err
	}
	return s.info(), nil
}

func (s *Server) info() *pb.ModelInfo {
	s.mu.Lock()
	e, h, running := s.eng, s.host, len(s.streams)
	s.mu.Unlock()
	info := &pb.ModelInfo{WireVersion: bridge.WireVersion, ProtocolVersion: bridge.ProtocolVersion, EngineVersion: s.version}
	if e == nil {
		return info
	}
	cfg, mc := e.Config(), e.ModelConfig()
	info.Loaded = true
	info.ModelPath, info.Architecture, info.Dtype, info.Device = cfg.Model, mc.Architecture, mc.DType.String(), cfg.Device
	if dt, err := ops.ParseDType(cfg.DType); err == nil && cfg.Device == "gpu" {
		info.Dtype = dt.String() // the GPU computes in --dtype; the cpu in float32 whatever the weights
	}
	info.VocabSize, info.MaxModelLen = int32(mc.VocabSize), int32(e.MaxModelLen())
	info.BlockSize, info.NumKvBlocks = int32(cfg.BlockSize), int32(e.NumKVBlocks())
	info.NumLayers, info.NumHeads, info.NumKvHeads = int32(mc.NumLayers), int32(mc.NumHeads), int32(mc.NumKVHeads)
	info.HeadDim, info.HiddenSize = int32(mc.HeadDim), int32(mc.HiddenSize)
	for _, c := range cfg.CudagraphCaptureSizes {
		info.CaptureSizes = append(info.CaptureSizes, int32(c))
	}
	info.HasTokenizer = e.Tokenizer() != nil
	info.EosTokenIds = mc.StopTokenIDs()
	info.MaxNumSeqs, info.MaxNumBatchedTokens = int32(cfg.MaxNumSeqs), int32(cfg.MaxNumBatchedTokens)
	info.RunningRequests = int32(running)
	info.TensorParallelSize = int32(cfg.TensorParallelSize)
	if h != nil {
		info.HostMode = true
		info.BlockSize, info.NumKvBlocks = int32(h.BlockSize()), int32(h.NumBlocks())
		info.RunningRequests = int32(h.NumRequests())
	}
	info.KvBlockBytes = e.KVBlockBytes(int(info.BlockSize))
	return info
}

// LoadModel loads a checkpoint, replacing any loaded one (see atom.proto).
func (s *Server) LoadModel(req *pb.LoadModelRequest, stream pb.AtomEngine_LoadModelServer) error {
	if err := checkWire(req.GetWireVersion()); err != nil {
		return err
	}
	cfg, err := configFromRequest(req)
	if err != nil {
		return status.Errorf(codes.InvalidArgument, "LoadModel: %v", err)
	}
	ctx := stream.Context()
	s.loadMu.Lock()
	defer s.loadMu.Unlock()
	progress := func(stage string, frac float32, msg string) error {
		return stream.Send(&pb.LoadProgress{Stage: stage, Fraction: frac, Message: msg})
	}
	if err := progress("config", 0, fmt.Sprintf("loading %s on %s", cfg.Model, cfg.Device)); err != nil {
		return err
	}
	s.unload()
	start := time.Now()
	type result struct {
		e   *engine.Engine
		err error
	}
	done := make(chan result, 1)
	go func() {
		e, err := engine.New(cfg, SlogFromHCLog(s.log))
		done <- result{e, err}
	}()
	// Progress of the weights is not reported by the engine yet: a heartbeat, whose interval
	// doubles from 1 s up to 30 s so that a host printing each message (--handshake) shows a
	// handful of lines for a long load rather than one a second.
	wait := time.Second
	timer := time.NewTimer(wait)
	defer timer.Stop()
	var res result
	for waiting := true; waiting; {
		select {
		case res = <-done:
			waiting = false
		case <-timer.C:
			_ = progress("weights", 0.1, fmt.Sprintf("loading weights (%s)", time.Since(start).Round(time.Second)))
			wait = nextHeartbeat(wait)
			timer.Reset(wait)
		}
	}
	if res.err != nil {
		code := codes.InvalidArgument
		if errors.Is(res.err, fs.ErrNotExist) {
			code = codes.NotFound
		}
		return status.Errorf(code, "LoadModel %s: %v", cfg.Model, res.err)
	}
	if ctx.Err() != nil {
		res.e.Close()
		return status.FromContextError(ctx.Err()).Err()
	}
	if hook := s.fault.stallHook(); hook != nil {
		res.e.SetLayerHook(hook)
	}
	res.e.OnDeviceLost(exitOnDeviceLost(s.log))
	s.mu.Lock()
	s.eng = res.e
	s.mu.Unlock()
	s.log.Info("model loaded", "model", cfg.Model, "seconds", time.Since(start).Seconds())
	return stream.Send(&pb.LoadProgress{Stage: "ready", Fraction: 1, Done: true, Info: s.info(),
		Message: fmt.Sprintf("loaded in %s; backend %s", time.Since(start).Round(time.Millisecond), res.e.Backend())})
}

// nextHeartbeat is the wait after a LoadModel heartbeat that followed a wait of d: doubled, at
// most 30 s.
func nextHeartbeat(d time.Duration) time.Duration { return min(2*d, 30*time.Second) }

// configFromRequest turns a LoadModelRequest into engine settings: the defaults, then the
// request's non-zero fields, then its extra_args, all through the engine's flag set.
func configFromRequest(req *pb.LoadModelRequest) (engine.Config, error) {
	var args []string
	add := func(name, v string) { args = append(args, "--"+name+"="+v) }
	str := func(name, v string) {
		if v != "" {
			add(name, v)
		}
	}
	num := func(name string, v int64) {
		if v != 0 {
			add(name, strconv.FormatInt(v, 10))
		}
	}
	if req.GetModelPath() == "" {
		return engine.Config{}, errors.New("model_path is required")
	}
	str("model", req.GetModelPath())
	str("device", req.GetDevice())
	str("dtype", req.GetDtype())
	str("tokenizer", req.GetTokenizer())
	num("kv-cache-memory", req.GetKvCacheMemoryBytes())
	num("num-kv-blocks", int64(req.GetNumKvBlocks()))
	num("block-size", int64(req.GetBlockSize()))
	num("max-model-len", int64(req.GetMaxModelLen()))
	num("max-num-seqs", int64(req.GetMaxNumSeqs()))
	num("max-num-batched-tokens", int64(req.GetMaxNumBatchedTokens()))
	if req.EnablePrefixCaching != nil {
		add("no-enable-prefix-caching", strconv.FormatBool(!req.GetEnablePrefixCaching()))
	}
	args = append(args, req.GetExtraArgs()...)
	cfg := engine.DefaultConfig()
	fs := flag.NewFlagSet("LoadModel", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cfg.Register(fs)
	if err := fs.Parse(args); err != nil {
		return cfg, fmt.Errorf("engine flags: %w", err)
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("extra_args: %q is not a flag", fs.Arg(0))
	}
	if err := cfg.Validate(); err != nil {
		return cfg, err
	}
	return cfg, nil
}

// toStatus maps engine and bridge errors onto gRPC codes.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	code := codes.Internal
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return status.FromContextError(err).Err()
	case errors.Is(err, engine.ErrInvalidParams), errors.Is(err, engine.ErrInvalidRequest), errors.Is(err, bridge.ErrInvalidPayload):
		code = codes.InvalidArgument
	case errors.Is(err, engine.ErrUnknownRequest):
		code = codes.NotFound
	case errors.Is(err, engine.ErrRequestExists):
		code = codes.AlreadyExists
	case errors.Is(err, engine.ErrBusy), errors.Is(err, engine.ErrHostMode):
		code = codes.FailedPrecondition
	case errors.Is(err, engine.ErrClosed):
		code = codes.Unavailable
	}
	return status.Error(code, err.Error())
}
