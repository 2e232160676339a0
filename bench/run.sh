#!/usr/bin/env bash
# Run the benchmarks from a fresh clone: .venv with the bench extra (pinned by constraints.txt), PostgreSQL up,
# then every case on SQLite and PostgreSQL. Options go to `python -m bench` (see --help; --quick for a smoke run).
# Usage: bash bench/run.sh [--quick] [--repeats N] [--out DIR] ...
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh bench
bash scripts/ensure-postgres.sh
exec .venv/bin/python -m bench "$@"
