#!/usr/bin/env bash
# gpu-check.sh: on a GPU machine, build libatomk.so and run the gpu-tagged tests; prints a
# compact summary (full logs in OUTDIR). Run from the repository root:
#   bash hipkernels/src/gpu-check.sh [OUTDIR]
# The Go test binaries are built beforehand, anywhere (the GPU machine needs no Go):
#   CGO_ENABLED=0 go test -c -tags gpu -o bin/hipkernels.test ./hipkernels/
#   CGO_ENABLED=0 go test -c -tags gpu -o bin/gpu_ops.test ./ops/gpu/
# A library already in hipkernels/build/ (built elsewhere) is tested while this machine's own
# build runs; if it does not load here, the fresh build is used. BENCH=1 adds the ops/gpu
# benchmarks (timings; BENCHTIME, default 1s, per case).
set -u
OUT=${1:-/tmp/gpu-check}
mkdir -p "$OUT"
ROOT=$(pwd)
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
	[ -d "$d" ] && export LD_LIBRARY_PATH=$d:${LD_LIBRARY_PATH:-}
done
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv,noheader
nvcc --version | tail -1
(cd hipkernels/src && make -j16 BUILD=/tmp/atomk-build >"$OUT/make.log" 2>&1; echo "make rc=$?" >>"$OUT/make.log") &
MAKE_PID=$!
LIB=$ROOT/hipkernels/build/libatomk.so
if [ ! -f "$LIB" ]; then
	wait $MAKE_PID
	LIB=/tmp/atomk-build/libatomk.so
fi
export ATOM_GO_KERNELS=$LIB
(cd hipkernels && ../bin/hipkernels.test -test.v >"$OUT/hipkernels.log" 2>&1)
rc1=$?
if [ $rc1 -ne 0 ] && grep -q "load GPU kernels" "$OUT/hipkernels.log"; then
	echo "the carried library does not load here: using this machine's build"
	wait $MAKE_PID
	export ATOM_GO_KERNELS=/tmp/atomk-build/libatomk.so
	(cd hipkernels && ../bin/hipkernels.test -test.v >"$OUT/hipkernels.log" 2>&1)
	rc1=$?
fi
echo "library: $ATOM_GO_KERNELS"
ldd "$ATOM_GO_KERNELS" | grep -E "cublas|not found"
grep -E "^(--- |ok|FAIL|PASS)|_test.go" "$OUT/hipkernels.log" | cut -c1-300
# One process per test: a device fault ends only its own test.
: >"$OUT/gpu_ops.log"
rc2=0
for t in $(cd ops/gpu && ../../bin/gpu_ops.test -test.list '.*' | grep '^Test'); do
	(cd ops/gpu && ../../bin/gpu_ops.test -test.v -test.run "^$t\$" -test.timeout 300s >"$OUT/run.log" 2>&1) || rc2=1
	cat "$OUT/run.log" >>"$OUT/gpu_ops.log"
	if grep -qE "^--- FAIL|^FAIL|panic:" "$OUT/run.log"; then echo "== $t: FAIL"; else echo "== $t: ok"; fi
	grep -E "^--- FAIL|panic:|Error:|Messages:|_test.go:[0-9]+: " "$OUT/run.log" | cut -c1-300 | head -12
	sed -n '/^SUMMARY/,$p' "$OUT/run.log" | grep -vE "^(SUMMARY|PASS|FAIL)$"
done
if [ -n "${BENCH:-}" ]; then
	(cd ops/gpu && ../../bin/gpu_ops.test -test.run '^$' -test.bench . -test.benchtime "${BENCHTIME:-1s}" \
		-test.timeout 900s >"$OUT/bench.log" 2>&1) || rc2=1
	grep -E "^Benchmark|^--- FAIL|panic:" "$OUT/bench.log" | cut -c1-200
fi
wait $MAKE_PID
grep -E "error|warning|rc=" "$OUT/make.log" | cut -c1-300 | head -20
cp /tmp/atomk-build/libatomk.so "$OUT/" 2>/dev/null
echo "hipkernels tests rc=$rc1, ops/gpu tests rc=$rc2"
