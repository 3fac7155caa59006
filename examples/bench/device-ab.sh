#!/usr/bin/env bash
# device-ab.sh: same-call A/B of runner steps on the GPU machine, from the repository root, with
# bin/ built as device-run.sh describes. Each variant is a name and the environment it runs
# under (space-separated VAR=value: libatomk knobs, ATOM_GO_KERNELS=bin/other.so, or
# BENCH=bin/other-bench for a bench binary built at another commit); the
# variants run in turn, REPS times over, so that drift between runs hits them all alike
# (run-to-run spread of the batch-1 step is about ±0.1 ms: compare within one call only).
#
#   bash examples/bench/device-ab.sh OUTDIR 'base:' 'norm:ATOM_GO_GEMV_NORM=1' ...
#
# CONC (default 1) picks the decode batches, REPS (default 2) the repeats. Prints one line per
# run (graph and eager ms per batch) and the per-variant means; OUTDIR gets ab.txt.
set -u
OUT=${1:?usage: device-ab.sh OUTDIR name:ENV... }
shift
mkdir -p "$OUT"
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
	[ -d "$d" ] && export LD_LIBRARY_PATH=$d:${LD_LIBRARY_PATH:-}
done
export ATOM_GO_KERNELS=${ATOM_GO_KERNELS:-$PWD/bin/libatomk.so}
MODEL=${MODEL:-/dev/shm/llama3-8b}
SHAPE=${SHAPE:-llama3-8b}  # randmodel --shape when MODEL is not there yet
T0=$(date +%s)
if [ ! -f "$MODEL/config.json" ]; then
	bin/randmodel --shape "$SHAPE" --out "$MODEL" >"$OUT/randmodel.log" 2>&1 || { cat "$OUT/randmodel.log"; exit 1; }
	echo "randmodel: $(($(date +%s) - T0)) s"
fi
cat "$MODEL"/*.safetensors >/dev/null
TMP=$(mktemp -d)
for rep in $(seq 1 "${REPS:-2}"); do
	for v in "$@"; do
		name=${v%%:*}
		read -r -a envs <<<"${v#*:}"
		if ! env "${envs[@]}" bash -c 'exec timeout 90 "${BENCH:-bin/bench}" "$@"' _ --model "$MODEL" \
			--concurrency "${CONC:-1}" --skip-engine --out "$TMP/r.json" >"$TMP/r.log" 2>&1; then
			echo "$name rep $rep: bench failed: $(tail -2 "$TMP/r.log" | tr '\n' ' ')" | tee -a "$OUT/ab.txt"
			continue
		fi
		python3 - "$TMP/r.json" "$name" "$rep" <<'EOF' | tee -a "$OUT/ab.txt"
import json, sys
d = json.load(open(sys.argv[1]))
rows = " ".join("b%d graph %.3f replay %.3f eager %.3f" % (r["batch"], r["graph_ms"], r.get("replay_ms", 0), r["eager_ms"]) for r in d["runner"]["decode"])
print("%-24s rep %s  %s" % (sys.argv[2], sys.argv[3], rows))
EOF
	done
done
python3 - "$OUT/ab.txt" <<'EOF'
import collections, re, sys
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    m = re.match(r"(\S+)\s+rep \d+\s+(.*)", line)
    if m and "failed" not in line:
        for b, g in re.findall(r"b(\d+) graph ([\d.]+)", m.group(2)):
            runs[(m.group(1), int(b))].append(float(g))
for (name, b), v in sorted(runs.items(), key=lambda kv: (kv[0][1], sum(kv[1]) / len(kv[1]))):
    print("mean %-24s batch %-4d graph %.3f ms over %d runs" % (name, b, sum(v) / len(v), len(v)))
EOF
echo "total $(($(date +%s) - T0)) s"
rm -rf "$TMP"
