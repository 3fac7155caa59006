#!/usr/bin/env bash
# device-ab.sh: same-call A/B of runner steps on the GPU machine, from the repository root, with
# bin/ built as device-run.sh describes. Each variant is a name and the environment it runs
# under (space-separated VAR=value: ATOM_GO_KERNELS=bin/other.so for a library built at another
# commit or from a variant, or BENCH=bin/other-bench for a bench binary built at another commit); the
# variants run in turn, REPS times over, so that drift between runs hits them all alike
# (run-to-run spread of the batch-1 step is about ±0.1 ms: compare within one call only).
#
#   bash examples/bench/device-ab.sh OUTDIR 'base:' 'other:ATOM_GO_KERNELS=bin/other/libatomk.so' ...
#
# CONC (default 1) picks the decode batches, REPS (default 2) the repeats. Prints one line per
# run (graph and eager ms per batch) and the per-variant means; OUTDIR gets ab.txt. With
# ENGINE=1 each run is bench (a) through the engine as well (batch 1: TPOT, the median token
# gap, the replay, the copy rate and the % of roofline), and the means are of the TPOT:
#
#   ENGINE=1 REPS=3 bash examples/bench/device-ab.sh OUT 'new:' 'old:BENCH=bin/old/bench ATOM_GO_KERNELS=bin/old/libatomk.so'
#
# A failed run prints its log's last lines.
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
		mode=(--concurrency "${CONC:-1}" --skip-engine)
		[ "${ENGINE:-0}" = 1 ] && mode=(--concurrency 1 --ttft-reps 1)
		if ! env "${envs[@]}" bash -c 'exec timeout 120 "${BENCH:-bin/bench}" "$@"' _ --model "$MODEL" \
			"${mode[@]}" --out "$TMP/r.json" >"$TMP/r.log" 2>&1; then
			echo "$name rep $rep: bench failed: $(tail -4 "$TMP/r.log" | tr '\n' ' ')" | tee -a "$OUT/ab.txt"
			continue
		fi
		python3 - "$TMP/r.json" "$name" "$rep" <<'EOF' | tee -a "$OUT/ab.txt"
import json, sys
d = json.load(open(sys.argv[1]))
rows = " ".join("b%d graph %.3f replay %.3f chain %.3f eager %.3f" % (r["batch"], r["graph_ms"], r.get("replay_ms", 0), r.get("chain_ms", 0), r["eager_ms"]) for r in d["runner"]["decode"])
a = d.get("decode_batch1") or {}
if a.get("tpot_ms"):
    rows = "tpot %.3f gap %.3f copy %.3f %.2f%%  %s" % (a["tpot_ms"], a.get("median_gap_ms", 0),
        d["ceilings"]["copy_bytes_per_s"] / 1e12, a["pct_of_roofline"], rows)
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
        t = re.search(r"tpot ([\d.]+)", m.group(2))
        if t:
            runs[(m.group(1), "tpot")].append(float(t.group(1)))
        for b, g in re.findall(r"b(\d+) graph ([\d.]+)", m.group(2)):
            runs[(m.group(1), "batch %d graph" % int(b))].append(float(g))
for (name, what), v in sorted(runs.items(), key=lambda kv: (kv[0][1], sum(kv[1]) / len(kv[1]))):
    print("mean %-24s %-14s %.3f ms over %d runs" % (name, what, sum(v) / len(v), len(v)))
EOF
echo "total $(($(date +%s) - T0)) s"
rm -rf "$TMP"
