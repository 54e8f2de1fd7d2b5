#!/usr/bin/env bash
# The libraries at both ends of every version window a rule rests on (tests/test_version_ends.py), each installed
# with `pip install --no-deps --target` into its own folder under DIR (default ~/.cache/gradian-tests/libs), to sit
# first on PYTHONPATH in front of the venv's torch and transformers. The TRL ends import with the venv's
# transformers; the transformers ends carry the tokenizers, huggingface_hub and datasets they need. A folder already
# there is kept. Usage: scripts/version_libs.sh [DIR]
set -euo pipefail
DIR="${1:-${XDG_CACHE_HOME:-$HOME/.cache}/gradian-tests/libs}"
PY="${PYTHON:-python3}"
OLD_HF="tokenizers==0.20.3 huggingface_hub==0.34.4 datasets==4.0.0"
while read -r name specs; do
    [ -d "$DIR/$name" ] && continue
    rm -rf "$DIR/$name.part"
    # shellcheck disable=SC2086
    "$PY" -m pip install -q --disable-pip-version-check --no-deps --target "$DIR/$name.part" $specs
    mv "$DIR/$name.part" "$DIR/$name"
done <<LIBS
trl-0.15.2 trl==0.15.2
trl-0.16.0 trl==0.16.0
trl-0.16.1 trl==0.16.1
trl-0.19.1 trl==0.19.1
trl-0.20.0 trl==0.20.0
trl-1.0.0 trl==1.0.0
trl-1.1.0 trl==1.1.0
transformers-4.45.2 transformers==4.45.2 $OLD_HF
transformers-4.46.0 transformers==4.46.0 $OLD_HF
transformers-4.57.6 transformers==4.57.6 tokenizers==0.22.1 huggingface_hub==0.34.4 datasets==4.0.0
transformers-5.0.0 transformers==5.0.0 tokenizers==0.22.1 huggingface_hub==1.3.0 datasets==4.5.0 httpx==0.29.0 httpcore==1.0.9 h11==0.16.0 anyio==4.16.0 sniffio==1.3.1
LIBS
echo "$DIR"
