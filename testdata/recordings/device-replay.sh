#!/usr/bin/env bash
# device-replay.sh: replays every recording of testdata/recordings on the GPU, from the
# repository root of the GPU machine (docs/recording.md, docs/testing.md). The machine needs no
# Go: build the binary beforehand and the kernel library there:
#
#   CGO_ENABLED=0 go build -ldflags=-s\ -w -o bin/atom-plugin ./plugin/cmd/atom-plugin   # here
#   make kernels                                                   # there: hipkernels/build/libatomk.so
#
#   bash testdata/recordings/device-replay.sh OUTDIR
#
# Each recording is replayed in float32 three ways: CUDA graphs (the default), eager
# (--enforce-eager), and graphs with host sampling (ATOM_GO_HOST_SAMPLING=1: the sampled rows
# are compared too). The cpu computed the recording in float32 from the 16-bit weights, so
# these must reproduce it. A fourth run in the checkpoint's own 16-bit dtype is reported but
# does not fail the script: bfloat16 activations flip near-equal greedy choices of a tiny
# random-weight model, and a request that asked for no logprobs leaves no evidence that a flip
# was a near-tie. The JSON reports go to OUTDIR; a summary is printed last. Exit status 1 if a
# float32 replay failed.
set -u
OUT=${1:-/tmp/device-replay}
DEVICE=${DEVICE:-gpu} # DEVICE=cpu checks the script itself on any machine
mkdir -p "$OUT"
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
	[ -d "$d" ] && export LD_LIBRARY_PATH=$d:${LD_LIBRARY_PATH:-}
done
if [ -z "${ATOM_GO_KERNELS:-}" ]; then
	export ATOM_GO_KERNELS=$PWD/hipkernels/build/libatomk.so
	[ -f "$ATOM_GO_KERNELS" ] || export ATOM_GO_KERNELS=$PWD/bin/libatomk.so
fi
SUM=$OUT/summary.txt
: >"$SUM"
say() { echo "$*" | tee -a "$SUM"; }
say "$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1) $(date -u +%FT%TZ)"
status=0
for rec in testdata/recordings/*.rec; do
	name=$(basename "$rec" .rec)
	recorded=$(bin/atom-plugin replay --info "$rec" | sed -n 's/^    "path": "\(.*\)",$/\1/p' | head -1)
	model=testdata/models/$(basename "$recorded")
	for mode in graphs eager host-sampling native-16bit; do
		args=(--dtype float32)
		envs=(ATOM_GO_HOST_SAMPLING=)
		case $mode in
		eager) args+=(--engine-arg=--enforce-eager) ;;
		host-sampling) envs=(ATOM_GO_HOST_SAMPLING=1) ;;
		native-16bit) args=() ;;
		esac
		log=$OUT/$name-$mode
		env "${envs[@]}" timeout 170 bin/atom-plugin replay --device "$DEVICE" --model "$model" "${args[@]}" "$rec" >"$log.txt" 2>"$log.err"
		rc=$?
		env "${envs[@]}" timeout 170 bin/atom-plugin replay --device "$DEVICE" --model "$model" "${args[@]}" --json "$rec" >"$log.json" 2>>"$log.err"
		[ $rc -eq 0 ] || [ $mode = native-16bit ] || status=1
		say "== $name $mode rc=$rc"
		grep -E "^(replay of|[0-9]+ calls|workload|tolerance|OK|MISMATCH|[0-9]+ near-ties|  call)" "$log.txt" | head -12 | tee -a "$SUM"
		[ $rc -eq 0 ] || tail -5 "$log.err" | tee -a "$SUM"
	done
done
exit $status
