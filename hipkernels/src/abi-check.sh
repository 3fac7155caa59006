#!/usr/bin/env bash
# abi-check.sh: checks a built libatomk.so against the Go bindings, without a GPU:
#   bash hipkernels/src/abi-check.sh LIBATOMK.so
# every symbol the bindings resolve (hipkernels/bindings.go) and every function atomk.h declares
# must be exported by the library, and the header's ATOMK_ABI_VERSION must be the bindings'
# ABIVersion (hipkernels/lib.go). The argument types are the bindings' own business: the gpu
# tests call every entry point.
set -euo pipefail
LIB=${1:?usage: abi-check.sh LIBATOMK.so}
cd "$(dirname "$0")/../.."
exported=$(nm -D --defined-only "$LIB" | awk '{print $3}' | grep '^atomk_' | sort -u)
bound=$(grep -oE '"atomk_[a-z0-9_]+"' hipkernels/bindings.go | tr -d '"' | sort -u)
declared=$(grep -oE '^int atomk_[a-z0-9_]+\(|^const char\* atomk_[a-z0-9_]+\(' hipkernels/src/atomk.h |
	grep -oE 'atomk_[a-z0-9_]+' | sort -u)
rc=0
for s in $bound; do
	grep -qx "$s" <<<"$exported" || { echo "abi-check: the bindings resolve $s, which $LIB does not export"; rc=1; }
done
for s in $declared; do
	grep -qx "$s" <<<"$exported" || { echo "abi-check: atomk.h declares $s, which $LIB does not export"; rc=1; }
done
h=$(grep -oE '#define ATOMK_ABI_VERSION [0-9]+' hipkernels/src/atomk.h | awk '{print $3}')
g=$(grep -oE '^const ABIVersion = [0-9]+' hipkernels/lib.go | awk '{print $4}')
[ "$h" = "$g" ] || { echo "abi-check: atomk.h has ATOMK_ABI_VERSION $h, hipkernels/lib.go ABIVersion $g"; rc=1; }
[ $rc -eq 0 ] && echo "abi-check: $(wc -w <<<"$bound") bound and $(wc -w <<<"$declared") declared entry points exported, ABI version $h"
exit $rc
