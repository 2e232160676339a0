#!/usr/bin/env bash
# Create .venv and install the project with the given extras (default: test), pinned by constraints.txt.
# Usage: bash scripts/bootstrap.sh [extras]
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-test}"
python="${PYTHON:-python3.11}"
command -v "$python" >/dev/null 2>&1 || python=python3
if ! command -v uv >/dev/null 2>&1; then
    "$python" -m pip install -q --disable-pip-version-check uv >/dev/null 2>&1 || true
fi
if command -v uv >/dev/null 2>&1; then
    [ -x .venv/bin/python ] || uv venv -q .venv --python "$python"
    uv pip install -q --python .venv/bin/python -c constraints.txt -e ".[$extras]"
else
    [ -x .venv/bin/python ] || "$python" -m venv .venv
    .venv/bin/python -m pip install -q --disable-pip-version-check -c constraints.txt -e ".[$extras]"
fi
