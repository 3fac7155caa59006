#!/usr/bin/env bash
# device-restart.sh: the GPU check of a crashed engine's restart (TestServeGPURecovers,
# docs/testing.md) on the 8B shape, from the repository root of the GPU machine. It needs no Go
# there; build beforehand on any machine:
#
#   CGO_ENABLED=0 go build -o bin/atom-plugin ./plugin/cmd/atom-plugin
#   CGO_ENABLED=0 go build -o bin/randmodel ./examples/randmodel
#   CGO_ENABLED=0 go test -c -tags gpu -o bin/serve_gpu.test ./plugin/cmd/atom-plugin/
#   CGO_ENABLED=0 go test -c -tags gpu -o bin/gpu_ops.test ./ops/gpu/
#   cp hipkernels/build/libatomk.so bin/        # make kernels (docs/kernels.md)
#
#   bash plugin/cmd/atom-plugin/device-restart.sh OUTDIR
#
# MODEL (default /dev/shm/llama3-8b, /tmp/llama3-8b where /dev/shm is small; written by randmodel when missing), DTYPE (float32) and
# FAULT_AT (320: the first engine's 320th output message) reach the test. The checkpoint is read
# once before, so that every engine start finds the page cache warm. TestDeviceFaultIsSticky
# (ops/gpu) runs first; the logs, with the recovery times, go to OUTDIR/sticky.log and
# OUTDIR/restart.log.
set -u
OUT=${1:-/tmp/device-restart}
mkdir -p "$OUT"
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
	[ -d "$d" ] && export LD_LIBRARY_PATH=$d:${LD_LIBRARY_PATH:-}
done
export ATOM_GO_KERNELS=$PWD/bin/libatomk.so
if [ -z "${MODEL:-}" ]; then
	MODEL=/dev/shm/llama3-8b
	if [ "$(df -B1 --output=avail /dev/shm 2>/dev/null | tail -1)" -lt 20000000000 ] 2>/dev/null; then MODEL=/tmp/llama3-8b; fi
fi
if [ ! -f "$MODEL/config.json" ]; then
	T0=$(date +%s)
	bin/randmodel --shape llama3-8b --out "$MODEL" >"$OUT/randmodel.log" 2>&1 || { cat "$OUT/randmodel.log"; exit 1; }
	echo "randmodel: $(($(date +%s) - T0)) s"
fi
cat "$MODEL"/*.safetensors >/dev/null
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null
timeout 60 bin/gpu_ops.test -test.run '^TestDeviceFaultIsSticky$' -test.v 2>&1 | tee "$OUT/sticky.log" | grep -E '^(--- |ok|FAIL|PASS)|device lost|read back'
ATOM_GO_PLUGIN=$PWD/bin/atom-plugin ATOM_GO_GPU_MODEL=$MODEL ATOM_GO_GPU_DTYPE=${DTYPE:-float32} FAULT_AT=${FAULT_AT:-320} \
	timeout 420 bin/serve_gpu.test -test.run '^TestServeGPURecovers$' -test.v -test.timeout 400s 2>&1 | tee "$OUT/restart.log"
exit "${PIPESTATUS[0]}"
