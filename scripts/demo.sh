#!/usr/bin/env bash
# Set up .venv and run the demo on a SQLite file in ./demo-output/.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh test
exec .venv/bin/python -m airflow_sqlqueue.cli demo "$@"
