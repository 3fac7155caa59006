"""Generated gRPC stubs of bridge/atom.proto (regenerate with bridge/generate.sh; do not edit)."""
