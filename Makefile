# atom-go: `make run` sets up and runs the main job; `make test` runs the whole test suite.
SHELL := /bin/bash
GO ?= go
export CGO_ENABLED := 0
BIN := bin/atom-plugin

.PHONY: run build test go-test fuzz lint fetch-testdata references kernels kernels-check clean proto bench-cpu

# The main job: build, install the default model (SmolLM2-135M-Instruct from PyPI), serve it
# and stream a chat answer to the terminal.
run:
	bash examples/quickstart.sh

build:
	$(GO) build -o $(BIN) ./plugin/cmd/atom-plugin

# Everything CI checks.
test: fetch-testdata lint go-test fuzz python-unit kernels-check dist-check python-test python-sglang-test

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
	$(GO) vet -tags gpu ./...

# The cpu backend against llama.cpp (llama-cpp-python from PyPI, compiled into its own venv the
# first time) on the packaged model, 2 threads: docs/performance.md. A benchmark, not in CI.
bench-cpu:
	bash examples/bench/cpu-llamacpp.sh --threads 2

# Regenerate the random-weight checkpoints and their transformers references (needs torch).
references:
	python3 testdata/make_reference.py --out testdata/models

clean:
	rm -rf bin

# Regenerate the gRPC Go code (bridge/pb) and the Python stubs (python_shim/atom_go/_proto).
proto:
	bash bridge/generate.sh

# ---------------------------------------------------------------------------------------------
# The GPU kernels library (hipkernels/build/libatomk.so; `make -C hipkernels/src hip` for AMD).
# With no nvcc on PATH, nvcc 13.0 and the CUDA headers and libraries come from NVIDIA's PyPI
# wheels in a private venv (CUDA_VENV, made once by hipkernels/src/cuda-wheels.sh: about 530 MB
# to download). docs/kernels.md says more.
NVCC ?= nvcc
CUDA_VENV ?= $(HOME)/.cache/atom-go/venv-cuda-13.0
JOBS ?= $(shell nproc 2>/dev/null || echo 2)

kernels:
	@if command -v $(NVCC) >/dev/null 2>&1; then \
		$(MAKE) -C hipkernels/src -j$(JOBS) NVCC=$(NVCC); \
	else \
		{ read -r root; read -r link; } < <(bash hipkernels/src/cuda-wheels.sh "$(CUDA_VENV)") && \
		PATH="$$root/bin:$$PATH" $(MAKE) -C hipkernels/src -j$(JOBS) NVCC="$$root/bin/nvcc" LDFLAGS="-L$$link -L$$root/lib"; \
	fi

# What CI runs for the kernels (no GPU): the release libatomk.so compiled and linked with the
# wheels' nvcc, its exports checked against the Go bindings and atomk.h (abi-check.sh), and, where hipcc is
# installed (Debian: apt-get install hipcc libamdhip64-dev rocm-device-libs), every source
# compile-checked with hipcc (hip-check.sh). A kernel or C-ABI change that does not build fails.
# The library that ships (the wheel, `make dist`) is that build: sm_90a machine code plus
# compute_90 PTX that the driver compiles for newer GPUs (arch-check.sh checks both), the CUDA
# runtime linked in statically, and a run-time search path to the nvidia-cublas wheel's
# libcublasLt.so.13 beside the package (site-packages/nvidia/cu13/lib: `pip install atom-go[cuda]`),
# searched after LD_LIBRARY_PATH and before the system's libraries.
KERNELS_RELEASE_BUILD := $(CURDIR)/hipkernels/build/release
KERNELS_RELEASE := $(KERNELS_RELEASE_BUILD)/libatomk.so
kernels-check:
	@{ read -r root; read -r link; } < <(bash hipkernels/src/cuda-wheels.sh "$(CUDA_VENV)") && \
		PATH="$$root/bin:$$PATH" $(MAKE) -C hipkernels/src -j$(JOBS) BUILD=$(KERNELS_RELEASE_BUILD) NVCC="$$root/bin/nvcc" \
			LDFLAGS="-L$$link -L$$root/lib" RPATH='$$$$ORIGIN/../../nvidia/cu13/lib' && \
		bash hipkernels/src/arch-check.sh "$$root/bin/cuobjdump" $(KERNELS_RELEASE)
	bash hipkernels/src/abi-check.sh $(KERNELS_RELEASE)
	@if command -v hipcc >/dev/null 2>&1; then bash hipkernels/src/hip-check.sh; \
	else echo "kernels-check: no hipcc on this machine: the HIP compile check (hip-check.sh) is skipped"; fi

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

# A release archive: atom-plugin and libatomk.so side by side, with the README and the licence.
DIST_NAME := atom-go-$(shell sed -n 's/^version = "\(.*\)"/\1/p' python_shim/pyproject.toml)-$(shell $(GO) env GOOS)-$(shell $(GO) env GOARCH)
dist: kernels-check
	rm -rf dist/$(DIST_NAME) && mkdir -p dist/$(DIST_NAME)
	CGO_ENABLED=0 $(GO) build -trimpath -o dist/$(DIST_NAME)/atom-plugin ./plugin/cmd/atom-plugin
	cp $(KERNELS_RELEASE) README.md dist/$(DIST_NAME)/
	[ ! -f LICENSE ] || cp LICENSE dist/$(DIST_NAME)/
	tar -C dist -czf dist/$(DIST_NAME).tar.gz $(DIST_NAME)
	@echo "dist/$(DIST_NAME).tar.gz"

# The archive as a user unpacks it: atom-plugin finds libatomk.so beside itself and, with no GPU
# here, --device auto serves on the cpu.
dist-check: dist
	rm -rf dist/check && mkdir -p dist/check && tar -C dist/check -xzf dist/$(DIST_NAME).tar.gz
	out=$$(ATOM_GO_KERNELS= dist/check/$(DIST_NAME)/atom-plugin --handshake --model testdata/models/qwen2-bf16 2>&1) || { echo "$$out"; exit 1; }; \
		grep -q '^ok   load .* on cpu,' <<<"$$out" && grep -q "found no usable GPU: load GPU kernels $(CURDIR)/dist/check/$(DIST_NAME)/libatomk.so" <<<"$$out" \
		|| { echo "dist-check: the archive's atom-plugin did not look for its libatomk.so:"; echo "$$out"; exit 1; }
	rm -rf dist/check

# Everything the wheel must be: bin/atom-plugin and libatomk.so inside, the library's
# architectures, and a fresh venv's `atom-plugin --handshake` (python_shim/wheel-check.sh).
wheel-check: python-wheel
	bash python_shim/wheel-check.sh python_shim/dist/atom_go-*.whl testdata/models/qwen2-bf16 "$(CUDA_VENV)"

.PHONY: dist dist-check wheel-check python-plugin python-venv python-wheel python-lint python-test python-unit-venv python-unit

# The binary and the kernels library (built by kernels-check) go into the package side by side:
# atom-plugin finds libatomk.so next to itself.
python-plugin: kernels-check
	$(GO) build -trimpath -o $(PY_SHIM_BIN) ./plugin/cmd/atom-plugin
	cp $(KERNELS_RELEASE) $(dir $(PY_SHIM_BIN))libatomk.so

$(PY_VENV)/.atom-go-vllm-$(VLLM_VERSION):
	$(PYTHON) -m venv $(PY_VENV)
	$(PY_BIN)/pip install --quiet --upgrade pip
	$(PY_BIN)/pip install --quiet "vllm==$(VLLM_VERSION)" "pytest>=8" "openai>=1.40" "ruff==0.17.6" "build>=1.2" "setuptools>=70.1"
	touch $@

python-venv: $(PY_VENV)/.atom-go-vllm-$(VLLM_VERSION)

python-wheel: python-plugin python-venv
	rm -rf python_shim/dist python_shim/build
	$(PY_BIN)/python -m build --wheel --no-isolation --outdir python_shim/dist python_shim

# The shim's fast loop: a small venv (PY_UNIT_VENV: grpcio, protobuf, msgpack, cryptography,
# pytest, ruff and the pinned type checker with its stubs; seconds once made) and the tests that
# need neither vLLM nor SGLang, against the real bin/atom-plugin. python-lint runs ruff and mypy
# from the same venv.
PY_UNIT_VENV ?= $(HOME)/.cache/atom-go/venv-python-unit
PY_UNIT_BIN = $(PY_UNIT_VENV)/bin
PY_UNIT_PKGS := "grpcio>=1.74" "protobuf>=6.31.1" "msgpack>=1.0" "cryptography>=42" "pytest>=8" "ruff==0.17.6" \
	"mypy==2.4.1" "types-protobuf==7.35.1.20260906" "types-grpcio==1.85.0.20261028" "msgpack-types==0.8.0"
PY_UNIT_STAMP := $(PY_UNIT_VENV)/.atom-go-unit-$(shell echo '$(PY_UNIT_PKGS)' | md5sum | cut -c1-12)
PY_UNIT_TESTS := tests/test_cli.py tests/test_socket_hygiene.py tests/test_plugin.py tests/test_handshake.py tests/test_wire.py tests/test_restart.py \
	tests/test_versions.py tests/test_devices.py tests/sglang/test_sglang_mapping.py

$(PY_UNIT_STAMP):
	rm -rf $(PY_UNIT_VENV)
	$(PYTHON) -m venv $(PY_UNIT_VENV)
	$(PY_UNIT_BIN)/pip install --quiet --disable-pip-version-check $(PY_UNIT_PKGS)
	touch $@

python-unit-venv: $(PY_UNIT_STAMP)

python-unit: build python-unit-venv
	cd python_shim && ATOM_GO_PLUGIN=$(CURDIR)/$(BIN) PYTHONPATH=$(CURDIR)/python_shim \
		$(PY_UNIT_BIN)/pytest -q -p no:cacheprovider $(PY_UNIT_TESTS)

python-lint: python-unit-venv
	cd python_shim && $(PY_UNIT_BIN)/ruff check . && $(PY_UNIT_BIN)/ruff format --check . && $(PY_UNIT_BIN)/mypy

python-test: wheel-check python-lint
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

# The shim is installed from this checkout on every run (not editable): a venv shared by several
# checkouts then never runs another checkout's sources.
python-sglang-venv: $(PY_SGLANG_VENV)/.atom-go-sglang-$(SGLANG_VERSION)
	$(PY_SGLANG_BIN)/pip install --quiet --no-deps --force-reinstall ./python_shim

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
