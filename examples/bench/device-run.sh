#!/usr/bin/env bash
# device-run.sh: one call on the GPU machine that checks and measures everything, from the
# repository root. Binaries are built beforehand on any machine (the GPU machine needs no Go):
#
#   CGO_ENABLED=0 go build -ldflags=-s\ -w -o bin/atom-plugin ./plugin/cmd/atom-plugin
#   CGO_ENABLED=0 go build -ldflags=-s\ -w -o bin/bench ./examples/bench
#   CGO_ENABLED=0 go build -ldflags=-s\ -w -o bin/randmodel ./examples/randmodel
#   CGO_ENABLED=0 go test -c -tags gpu -ldflags=-s\ -w -o bin/gpu_ops.test ./ops/gpu/
#   CGO_ENABLED=0 go test -c -tags gpu -ldflags=-s\ -w -o bin/engine_gpu.test ./engine/
#   cp hipkernels/build/libatomk.so bin/        # make kernels (docs/kernels.md)
#
#   bash examples/bench/device-run.sh OUTDIR [COMMIT] [STEPS]
#
# STEPS (default "tests plugin bench hf") picks what runs ("chain" also builds and runs
# hipkernels/bench/chain_gemv.cu with the machine's nvcc); BENCH_TIMEOUT (400 s), HF_TIMEOUT
# (170 s), HF_BUDGET (140 s) and HF_CONC (1,16,64,256) bound the two measurements (the whole
# default run takes about 9 minutes on an H200: keep the device call's limit at 600 s). A random-weight llama3-8b is written
# in the background while the tests run. Full logs go to OUTDIR; a summary is printed last.
set -u
OUT=${1:-/tmp/device-run}
COMMIT=${2:-unknown}
STEPS=${3:-tests plugin bench hf}
mkdir -p "$OUT"
ROOT=$(pwd)
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
	[ -d "$d" ] && export LD_LIBRARY_PATH=$d:${LD_LIBRARY_PATH:-}
done
export ATOM_GO_KERNELS=$ROOT/bin/libatomk.so
has() { [[ " $STEPS " == *" $1 "* ]]; }
SUM=$OUT/summary.txt
: >"$SUM"
say() { echo "$*" | tee -a "$SUM"; }
T0=$(date +%s)
el() { echo "$(($(date +%s) - T0))s"; }

say "$(nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv,noheader)"
MODEL=/dev/shm/llama3-8b
if [ "$(df -B1 --output=avail /dev/shm 2>/dev/null | tail -1)" -lt 20000000000 ] 2>/dev/null; then MODEL=/tmp/llama3-8b; fi
if has bench || has hf; then
	(t=$(date +%s); bin/randmodel --shape llama3-8b --out "$MODEL" >"$OUT/randmodel.log" 2>&1
		echo "randmodel rc=$? in $(($(date +%s) - t)) s" >>"$OUT/randmodel.log") &
	RAND_PID=$!
fi

if has tests; then
	(cd ops/gpu && timeout 150 ../../bin/gpu_ops.test -test.v -test.timeout 140s >"$OUT/gpu_ops.log" 2>&1)
	rc=$?
	say "[$(el)] ops/gpu tests rc=$rc"
	grep -E "^--- FAIL|panic:|Error:|_test.go:[0-9]+: " "$OUT/gpu_ops.log" | cut -c1-240 | head -10 | tee -a "$SUM"
	sed -n '/^SUMMARY/,$p' "$OUT/gpu_ops.log" | grep -E "Attention|Graph|graph|model |model-batch|FAIL|^ok" | cut -c1-160 | tee -a "$SUM"
	(cd engine && timeout 90 ../bin/engine_gpu.test -test.v -test.run 'Graph|DeviceSampling|AsyncScheduling' -test.timeout 85s >"$OUT/engine_gpu.log" 2>&1)
	rc=$?
	say "[$(el)] engine graph tests rc=$rc"
	grep -E "^(--- |ok|FAIL)|graph-vs-eager|engine graphs|panic:|Error:|_test.go:[0-9]+: " "$OUT/engine_gpu.log" | cut -c1-240 | head -24 | tee -a "$SUM"
fi

if has chain; then
	NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
	"$NVCC" -O3 -std=c++17 -arch=sm_90a -o "$OUT/chain_gemv" hipkernels/bench/chain_gemv.cu >"$OUT/chain.log" 2>&1
	rc=$?
	[ $rc -eq 0 ] && { timeout 120 "$OUT/chain_gemv" >>"$OUT/chain.log" 2>&1; rc=$?; }
	say "[$(el)] chain_gemv (build and run) rc=$rc"
	tail -5 "$OUT/chain.log" | cut -c1-200 | tee -a "$SUM"
	rm -f "$OUT/chain_gemv"
fi

if has plugin; then
	M=testdata/models/qwen3-bf16
	timeout 60 bin/atom-plugin generate --device gpu --model $M --prompt "The capital of France is" --max-tokens 12 \
		--temperature 0 >"$OUT/generate.log" 2>&1
	rc=$?
	say "[$(el)] generate --device gpu rc=$rc: $(tail -c 300 "$OUT/generate.log" | tr '\n' ' ')"
	timeout 60 bin/atom-plugin generate --device gpu --enforce-eager --model $M --prompt "The capital of France is" \
		--max-tokens 12 --temperature 0 >"$OUT/generate-eager.log" 2>&1
	rc=$?
	say "[$(el)] generate --enforce-eager rc=$rc: $(tail -c 200 "$OUT/generate-eager.log" | tr '\n' ' ')"
	timeout 90 bin/atom-plugin --handshake --device gpu --model $M >"$OUT/handshake.log" 2>&1
	rc=$?
	say "[$(el)] --handshake --device gpu rc=$rc"
	grep -E "^(ok|FAIL) " "$OUT/handshake.log" | cut -c1-200 | tee -a "$SUM"
fi

if has bench || has hf; then
	wait $RAND_PID
	say "[$(el)] $(tail -1 "$OUT/randmodel.log") -> $MODEL ($(du -sh "$MODEL" | cut -f1))"
	cat "$MODEL"/*.safetensors >/dev/null # page cache
fi
if has bench; then
	timeout ${BENCH_TIMEOUT:-400} bin/bench --model "$MODEL" --out "$OUT/bench.json" --commit "$COMMIT" >"$OUT/bench.log" 2>"$OUT/bench.err"
	rc=$?
	say "[$(el)] bench rc=$rc"
	grep -E "bench:|panic|Error|error" "$OUT/bench.err" | tail -12 | cut -c1-240 | tee -a "$SUM"
fi
if has hf; then
	PYTHONUNBUFFERED=1 timeout ${HF_TIMEOUT:-170} python3 examples/bench/hf_reference.py --model "$MODEL" --out "$OUT/hf.json" \
		--concurrency "${HF_CONC:-1,16,64,256}" --budget-s ${HF_BUDGET:-140} >"$OUT/hf.log" 2>&1
	rc=$?
	say "[$(el)] hf_reference rc=$rc"
	grep -vE "^\s*$" "$OUT/hf.log" | tail -6 | cut -c1-240 | tee -a "$SUM"
fi
if [ -f "$OUT/bench.json" ]; then
	bin/bench --report --out "$OUT/bench.json" --hf-json "$OUT/hf.json" --md "$OUT/bench.md" >"$OUT/table.txt" 2>&1
	cat "$OUT/table.txt"
fi
echo "== summary"
cat "$SUM"
