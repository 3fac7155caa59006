#!/usr/bin/env bash
# arch-check.sh: checks what GPUs a built libatomk.so serves, without a GPU:
#   bash hipkernels/src/arch-check.sh CUOBJDUMP LIBATOMK.so
# The library that ships must hold sm_90a machine code (Hopper: H100, H200) and compute_90 PTX
# for every kernel file (the driver compiles the PTX for newer GPUs), nothing for other
# architectures, and a run-time search path to the nvidia-cublas wheel's libraries.
set -euo pipefail
CUOBJDUMP=${1:?usage: arch-check.sh CUOBJDUMP LIBATOMK.so}
LIB=$(realpath "${2:?usage: arch-check.sh CUOBJDUMP LIBATOMK.so}")
elf=$({ "$CUOBJDUMP" --list-elf "$LIB" 2>/dev/null || true; } | { grep -oE 'sm_[0-9]+[a-z]?' || true; } | sort | uniq -c)
ptx=$({ "$CUOBJDUMP" --list-ptx "$LIB" 2>/dev/null || true; } | { grep -oE 'sm_[0-9]+[a-z]?' || true; } | sort | uniq -c)
rc=0
n_elf=$(awk '$2 == "sm_90a" { print $1 }' <<<"$elf")
n_ptx=$(awk '$2 == "sm_90" { print $1 }' <<<"$ptx")
[ -n "$n_elf" ] && [ "$n_elf" -gt 0 ] || { echo "arch-check: no sm_90a machine code in $LIB"; rc=1; }
[ -n "$n_ptx" ] && [ "$n_ptx" = "$n_elf" ] || { echo "arch-check: $LIB holds ${n_ptx:-no} compute_90 PTX for ${n_elf:-no} sm_90a files"; rc=1; }
# Machine code for another architecture is refused where it holds kernels: the CUDA runtime
# linked in adds an empty sm_75 module (no .text section), which is not code that ships.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
others=$(awk 'NF == 2 && $2 != "sm_90" { print $2 }' <<<"$ptx" | sort -u | tr '\n' ' ')
for cubin in $("$CUOBJDUMP" --list-elf "$LIB" | awk '{ print $NF }' | grep -v '\.sm_90a\.cubin$' || true); do
	(cd "$tmp" && "$CUOBJDUMP" -xelf "$cubin" "$LIB" >/dev/null)
	if readelf -SW "$tmp/$cubin" | grep -q ' \.text\.'; then
		others+="$cubin "
	fi
done
[ -z "$others" ] || { echo "arch-check: code for other architectures in $LIB: $others"; rc=1; }
runpath=$(readelf -d "$LIB" | sed -n 's/.*(RUNPATH).*\[\(.*\)\]/\1/p')
[ "$runpath" = '$ORIGIN/../../nvidia/cu13/lib' ] || { echo "arch-check: run-time search path '$runpath', want \$ORIGIN/../../nvidia/cu13/lib"; rc=1; }
[ $rc -eq 0 ] && echo "arch-check: $LIB: $n_elf files of sm_90a machine code and compute_90 PTX, runpath $runpath"
exit $rc
