#!/usr/bin/env bash
# Regenerate docs/img/report.png: the first screen of the bundled example's report.html, in headless Chromium
# (apt-get install -y chromium fonts-dejavu-core). Usage: bash scripts/report_screenshot.sh [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-gradian-out}"
[ -s "$out/report.html" ] || .venv/bin/gradian demo --out "$out"
profile="$(mktemp -d)"
trap 'rm -rf "$profile"' EXIT
"${GRADIAN_CHROMIUM:-chromium}" --headless --no-sandbox --disable-gpu --no-first-run --disable-extensions \
    --hide-scrollbars --user-data-dir="$profile" --window-size=1280,900 \
    --screenshot="$PWD/docs/img/report.png" "file://$(realpath "$out/report.html")"
