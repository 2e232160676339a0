#!/usr/bin/env bash
# Set up .venv and run the demo on a SQLite file in ./demo-output/ (extra arguments go to `sqlqueue demo`,
# e.g. --messages 2000 or --json). Needs Python 3.10+ and Java 17+ (Spark).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v java >/dev/null 2>&1 && [ -z "${JAVA_HOME:-}" ]; then
    echo "demo.sh: the demo runs Spark, which needs Java 17 or later (e.g. apt-get install openjdk-17-jre-headless)" >&2
    exit 2
fi
bash scripts/bootstrap.sh test
exec .venv/bin/python -m airflow_sqlqueue.cli demo "$@"
