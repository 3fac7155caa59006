#!/usr/bin/env bash
# cuda-wheels.sh: a CUDA toolchain for building libatomk.so without a CUDA install: nvcc 13.0,
# the runtime and cuBLAS headers and libraries from NVIDIA's PyPI wheels, in a private venv.
#   bash hipkernels/src/cuda-wheels.sh [VENV]      (default ~/.cache/atom-go/venv-cuda-13.0)
# cuobjdump (13.2: the oldest on PyPI; it reads 13.0 fatbins) lists a built library's machine
# code and PTX. Installs once (about 530 MB of wheels, 860 MB installed; a stamp file marks a complete
# install), then prints two lines: the toolkit root (bin/nvcc, include/, lib/) and a folder
# holding the unversioned libcublasLt.so link the linker needs. Build with them:
#   { read -r ROOT; read -r LINK; } < <(bash hipkernels/src/cuda-wheels.sh)
#   PATH=$ROOT/bin:$PATH make -C hipkernels/src LDFLAGS="-L$LINK -L$ROOT/lib"
# The library links cudart statically; at run time it needs libcublasLt.so.13 (a CUDA install's,
# or the wheel's in $ROOT/lib).
set -euo pipefail
VENV=${1:-$HOME/.cache/atom-go/venv-cuda-13.0}
PYTHON=${PYTHON:-python3}
WHEELS=(nvidia-cuda-nvcc==13.0.88 nvidia-cuda-crt==13.0.88 nvidia-nvvm==13.0.88 nvidia-cuda-runtime==13.0.96
	nvidia-cublas==13.0.2.14 nvidia-cuda-cccl==13.0.85 nvidia-cuda-cuobjdump==13.2.51)
STAMP=$VENV/.atom-go-cuda-$(printf '%s\n' "${WHEELS[@]}" | md5sum | cut -c1-12)
if [ ! -f "$STAMP" ]; then
	rm -rf "$VENV"
	"$PYTHON" -m venv "$VENV" >&2
	"$VENV/bin/pip" install --quiet --disable-pip-version-check "${WHEELS[@]}" >&2
	touch "$STAMP"
fi
ROOT=$(echo "$VENV"/lib/python3*/site-packages/nvidia/cu13)
[ -x "$ROOT/bin/nvcc" ] || { echo "cuda-wheels.sh: no nvcc under $ROOT" >&2; exit 1; }
LINK=$VENV/atomk-link
mkdir -p "$LINK"
ln -sf "$ROOT/lib/libcublasLt.so.13" "$LINK/libcublasLt.so"
echo "$ROOT"
echo "$LINK"
