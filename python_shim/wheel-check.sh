#!/usr/bin/env bash
# wheel-check.sh: the atom-go wheel as a user meets it, on a machine without a GPU:
#   bash python_shim/wheel-check.sh WHEEL MODEL_DIR [CUDA_VENV]
# 1. The wheel is tagged for this platform and ships atom_go/bin/atom-plugin and libatomk.so.
# 2. Its libatomk.so holds sm_90a machine code and compute_90 PTX, and finds cuBLASLt in the
#    nvidia-cublas wheel (hipkernels/src/arch-check.sh, with the CUDA wheels' cuobjdump).
# 3. `pip install WHEEL` into a fresh venv puts `atom-plugin` on PATH, and
#    `atom-plugin --handshake --model MODEL_DIR` passes and picks the cpu backend by itself,
#    both where the kernels cannot load (no cuBLASLt on the machine) and where they load but
#    find no GPU (cuBLASLt from the CUDA wheels on LD_LIBRARY_PATH).
set -euo pipefail
WHEEL=$(realpath "${1:?usage: wheel-check.sh WHEEL MODEL_DIR [CUDA_VENV]}")
MODEL=$(realpath "${2:?usage: wheel-check.sh WHEEL MODEL_DIR [CUDA_VENV]}")
here=$(cd "$(dirname "$0")" && pwd)
{ read -r cuda_root; read -r _; } < <(bash "$here/../hipkernels/src/cuda-wheels.sh" ${3:+"$3"})
PYTHON=${PYTHON:-python3}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "wheel-check: $*" >&2; exit 1; }

arch=$(uname -m)
case "$(basename "$WHEEL")" in
*-py3-none-*linux*_"$arch".whl) ;;
*) fail "$(basename "$WHEEL") is not a py3-none-linux_$arch wheel" ;;
esac
"$PYTHON" -m zipfile -e "$WHEEL" "$tmp/unpacked"
bin=$(cd "$tmp/unpacked" && find . -path '*/atom_go/bin' -type d | head -1) # top level or *.data/platlib
for f in atom-plugin libatomk.so; do
	[ -n "$bin" ] && [ -f "$tmp/unpacked/$bin/$f" ] || fail "the wheel has no atom_go/bin/$f"
done
bash "$here/../hipkernels/src/arch-check.sh" "$cuda_root/bin/cuobjdump" "$tmp/unpacked/$bin/libatomk.so"

"$PYTHON" -m venv "$tmp/venv"
"$tmp/venv/bin/pip" install --quiet --disable-pip-version-check "$WHEEL"
handshake() { # $1: what the case is; the rest: environment
	local what=$1 out
	shift
	out=$(cd "$tmp" && env "$@" PATH="$tmp/venv/bin:$PATH" ATOM_GO_LOG_LEVEL=info atom-plugin --handshake --model "$MODEL" 2>&1) ||
		fail "atom-plugin --handshake ($what) failed:"$'\n'"$out"
	grep -q '^ok   load .* on cpu,' <<<"$out" || fail "atom-plugin --handshake ($what) did not load on the cpu:"$'\n'"$out"
	grep -q 'found no usable GPU' <<<"$out" || fail "atom-plugin --handshake ($what) did not say why it chose the cpu:"$'\n'"$out"
	echo "wheel-check: --handshake ($what): the cpu backend, because$(grep -o 'found no usable GPU[^"]*' <<<"$out" | head -1 | sed 's/^found no usable GPU//')"
}
handshake "no cuBLASLt" LD_LIBRARY_PATH=
handshake "kernels load, no GPU" LD_LIBRARY_PATH="$cuda_root/lib"
echo "wheel-check: $(basename "$WHEEL") ok"
