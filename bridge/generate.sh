#!/usr/bin/env bash
# Regenerates the code generated from bridge/atom.proto:
#   bridge/pb/atom.pb.go, bridge/pb/atom_grpc.pb.go             (Go, protoc-gen-go + protoc-gen-go-grpc)
#   python_shim/atom_go/_proto/atom_pb2{,_grpc}.py, atom_pb2.pyi (Python, grpcio-tools)
# The generated files are committed; run this after editing atom.proto (from any directory).
#
# Tool versions are pinned so the output is reproducible:
#   protoc (bundled in grpcio-tools 1.74.0: libprotoc 31.1, Python gencode 6.31.1, which runs on
#   protobuf >= 6.31.1 including 7.x, with grpcio >= 1.74), protoc-gen-go v1.36.12 (the module's
#   google.golang.org/protobuf), protoc-gen-go-grpc v1.6.2.
# grpcio-tools goes into a private virtual environment (ATOM_GO_PROTOC_VENV, default
# ~/.cache/atom-go/protoc-venv); the Go plugins into GOPATH/bin.
set -euo pipefail

GRPCIO_TOOLS_VERSION=1.74.0
PROTOC_GEN_GO_VERSION=v1.36.12
PROTOC_GEN_GO_GRPC_VERSION=v1.6.2

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

venv="${ATOM_GO_PROTOC_VENV:-${HOME}/.cache/atom-go/protoc-venv}"
if ! "$venv/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('grpcio-tools') != '$GRPCIO_TOOLS_VERSION')" 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet "grpcio-tools==$GRPCIO_TOOLS_VERSION"
fi

gobin="$(go env GOPATH)/bin"
have_version() { # binary, wanted version: true when the installed binary reports it
  [ -x "$gobin/$1" ] && "$gobin/$1" --version 2>/dev/null | grep -q -- "${2#v}"
}
if ! have_version protoc-gen-go "$PROTOC_GEN_GO_VERSION"; then
  GOFLAGS=-mod=mod go install "google.golang.org/protobuf/cmd/protoc-gen-go@$PROTOC_GEN_GO_VERSION"
fi
if ! have_version protoc-gen-go-grpc "$PROTOC_GEN_GO_GRPC_VERSION"; then
  (cd / && go install "google.golang.org/grpc/cmd/protoc-gen-go-grpc@$PROTOC_GEN_GO_GRPC_VERSION")
fi

protoc=("$venv/bin/python" -m grpc_tools.protoc -I bridge)

mkdir -p bridge/pb
rm -f bridge/pb/*.pb.go
"${protoc[@]}" \
  --plugin=protoc-gen-go="$gobin/protoc-gen-go" \
  --plugin=protoc-gen-go-grpc="$gobin/protoc-gen-go-grpc" \
  --go_out=bridge/pb --go_opt=paths=source_relative \
  --go-grpc_out=bridge/pb --go-grpc_opt=paths=source_relative \
  bridge/atom.proto

py=python_shim/atom_go/_proto
mkdir -p "$py"
rm -f "$py"/atom_pb2*.py "$py"/atom_pb2*.pyi
"${protoc[@]}" --python_out="$py" --pyi_out="$py" --grpc_python_out="$py" bridge/atom.proto
# grpc_tools writes an absolute import of the sibling module; the stubs live in a package.
sed -i 's/^import atom_pb2 as atom__pb2$/from . import atom_pb2 as atom__pb2/' "$py/atom_pb2_grpc.py"
cat >"$py/__init__.py" <<'EOF'
"""Generated gRPC stubs of bridge/atom.proto (regenerate with bridge/generate.sh; do not edit)."""
EOF

gofmt -l bridge/pb
echo "generated bridge/pb and $py"
