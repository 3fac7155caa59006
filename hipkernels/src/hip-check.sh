#!/usr/bin/env bash
# hip-check.sh: compile-checks every kernel source with hipcc (HIP/ROCm), without linking, on a
# machine that has hipcc but maybe no AMD GPU and an older ROCm than the release build needs:
#   bash hipkernels/src/hip-check.sh [ARCH]        (ARCH default: gfx942 if hipcc knows it, else gfx90a)
# ROCm < 6 has no hip/hip_bf16.h: compat/rocm5/ maps its names onto hip_bfloat16 for this check
# only. Sources whose vendor headers are missing (hipBLASLt) are reported and skipped. Exits
# non-zero on any compile error or warning.
set -u
cd "$(dirname "$0")"
ARCH=${1:-}
if [ -z "$ARCH" ]; then
	ARCH=gfx90a
	echo 'int main(){}' | hipcc --offload-arch=gfx942 -x hip -c -o /dev/null - 2>/dev/null && ARCH=gfx942
fi
INC=()
echo '#include <hip/hip_bf16.h>' | hipcc -x hip -E -o /dev/null - 2>/dev/null || INC=(-Icompat/rocm5)
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
rc=0
for f in *.cu; do
	if [ "$f" = blas.cu ] && ! echo '#include <hipblaslt/hipblaslt.h>' | hipcc -x hip -E -o /dev/null - 2>/dev/null; then
		echo "skip $f: no hipblaslt/hipblaslt.h"
		continue
	fi
	log=$OUT/${f%.cu}.log
	if hipcc "${INC[@]}" -O3 -std=c++17 --offload-arch="$ARCH" -fPIC -Wall -Wno-pass-failed -x hip -c -o "$OUT/${f%.cu}.o" "$f" >"$log" 2>&1 && ! grep -q "warning:" "$log"; then
		echo "ok   $f ($ARCH)"
	else
		echo "FAIL $f ($ARCH)"; grep -E "error|warning" "$log" | head -10; rc=1
	fi
done
exit $rc
