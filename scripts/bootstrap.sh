#!/usr/bin/env bash
# Create .venv and install the project (editable) with every extra a user can install, plus one developer
# dependency group of pyproject.toml (default: test; or bench), pinned by constraints.txt.
# Usage: bash scripts/bootstrap.sh [test|bench]
set -euo pipefail
cd "$(dirname "$0")/.."
group="${1:-test}"
extras="airflow,postgres,mssql,odbc,parquet,spark,openlineage"
python="${PYTHON:-python3.11}"
command -v "$python" >/dev/null 2>&1 || python=python3
if ! command -v uv >/dev/null 2>&1; then
    "$python" -m pip install -q --disable-pip-version-check uv >/dev/null 2>&1 || true
fi
if command -v uv >/dev/null 2>&1; then
    [ -x .venv/bin/python ] || uv venv -q .venv --python "$python"
    # An older .venv held pyspark-client beside pyspark: the two share files, so removing one breaks the other.
    # Remove the client and put pyspark's files back.
    if uv pip show -q --python .venv/bin/python pyspark-client >/dev/null 2>&1; then
        uv pip uninstall -q --python .venv/bin/python pyspark-client
        uv pip install -q --python .venv/bin/python -c constraints.txt --reinstall-package pyspark pyspark
    fi
    uv pip install -q --python .venv/bin/python -c constraints.txt -e ".[$extras]" --group "pyproject.toml:$group"
else
    [ -x .venv/bin/python ] || "$python" -m venv .venv
    .venv/bin/python -m pip install -q --disable-pip-version-check "pip>=25.1"  # --group (PEP 735)
    .venv/bin/python -m pip install -q --disable-pip-version-check -c constraints.txt -e ".[$extras]" \
        --group "pyproject.toml:$group"
fi
