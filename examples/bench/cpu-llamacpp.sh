#!/usr/bin/env bash
# atom-go's cpu backend against llama.cpp on the packaged model (SmolLM2-135M-Instruct Q4_1),
# same GGUF, same thread count: prefill and decode tok/s, interleaved, plus the serving
# throughput of 1 and 8 streams through `atom-plugin serve` and through llama.cpp's own server
# (llama_cpp.server) (examples/bench/cpu_llamacpp.py; docs/performance.md).
#
#   bash examples/bench/cpu-llamacpp.sh [extra cpu_llamacpp.py flags]    # or: make bench-cpu
#
# llama.cpp comes from PyPI (llama-cpp-python, compiled on install: several minutes the first
# time) into LLAMACPP_VENV. LLAMACPP_CMAKE_ARGS picks its build; the default is native, and
# where the machine's AMX (or another native feature) faults, build without it, e.g.
# LLAMACPP_CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=ON".
# Not part of CI.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
version="${LLAMACPP_VERSION:-0.3.36}"
venv="${LLAMACPP_VENV:-$HOME/.cache/atom-go/venv-llamacpp-$version}"
model="${MODEL:-testdata/external/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf}"
if [[ ! -x "$venv/bin/python" ]] || ! "$venv/bin/python" -c "import llama_cpp.server.app" 2>/dev/null; then
	[[ -x "$venv/bin/python" ]] || python3 -m venv "$venv"
	"$venv/bin/pip" install --quiet --upgrade pip
	CMAKE_ARGS="${LLAMACPP_CMAKE_ARGS:--DGGML_NATIVE=ON}" "$venv/bin/pip" install --quiet "llama-cpp-python[server]==$version"
fi
[[ -s "$model" ]] || bash testdata/gguf/fetch.sh
go build -o bin/atom-plugin ./plugin/cmd/atom-plugin
"$venv/bin/python" -c "import llama_cpp; print('llama.cpp:', llama_cpp.llama_print_system_info().decode())"
exec "$venv/bin/python" examples/bench/cpu_llamacpp.py --model "$model" --plugin bin/atom-plugin "$@"
