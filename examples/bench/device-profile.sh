#!/usr/bin/env bash
# device-profile.sh: times every kernel of one batch-1 decode graph replay with Nsight Compute,
# on the GPU machine, from the repository root, with bin/ built as device-run.sh describes.
#
#   bash examples/bench/device-profile.sh OUTDIR [LAUNCH]
#
# The library brackets graph launch LAUNCH (default 30) with cudaProfilerStart/Stop
# (ATOM_GO_PROFILE_GRAPH_LAUNCH); bench runs with --skip-forward --concurrency 1, so every graph
# launch is a batch-1 decode step. ncu profiles each graph node on its own (serialised, caches not
# flushed), so the per-kernel times add up to the step without launch overlap: compare the sum
# with the graph step the bench measures to see what the gaps cost. PROMPT (default 1024) is the
# prompt length, so the profiled step's context is about PROMPT + LAUNCH (PROMPT=1 against the
# default splits the attention part's cost by context at the same graph bound). Writes
# OUTDIR/ncu.csv and a per-kernel summary (OUTDIR/kernels.txt, printed).
set -u
OUT=${1:-/tmp/device-profile}
LAUNCH=${2:-30}
mkdir -p "$OUT"
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
	[ -d "$d" ] && export LD_LIBRARY_PATH=$d:${LD_LIBRARY_PATH:-}
done
export ATOM_GO_KERNELS=$PWD/bin/libatomk.so
MODEL=${MODEL:-/dev/shm/llama3-8b}
if [ ! -f "$MODEL/config.json" ]; then
	bin/randmodel --shape llama3-8b --out "$MODEL" >"$OUT/randmodel.log" 2>&1 || { cat "$OUT/randmodel.log"; exit 1; }
fi
cat "$MODEL"/*.safetensors >/dev/null
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
ATOM_GO_PROFILE_GRAPH_LAUNCH=$LAUNCH timeout ${NCU_TIMEOUT:-300} "$NCU" --profile-from-start off \
	--clock-control none --cache-control none --graph-profiling node --print-units base \
	--metrics gpu__time_duration.sum,dram__bytes_read.sum,launch__grid_size,launch__registers_per_thread \
	--csv --log-file "$OUT/ncu.csv" bin/bench --model "$MODEL" --skip-forward --concurrency 1 \
	--ttft-reps 1 --prompt-len "${PROMPT:-1024}" --output-len 64 --out "$OUT/bench.json" >"$OUT/bench.log" 2>"$OUT/bench.err"
echo "ncu rc=$?"
tail -3 "$OUT/bench.err"
python3 examples/bench/ncu_summary.py "$OUT/ncu.csv" | tee "$OUT/kernels.txt"
