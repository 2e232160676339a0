#!/usr/bin/env bash
# Build the wheel and sdist, then install the BUILT WHEEL (not the checkout) into fresh virtual environments, as
# a user would, and check each install works:
#   0. the distributions: `twine check --strict`, the sdist holds no tests/bench/CI, the wheel holds py.typed,
#      the DAG files, the .sql files, the licence, and no developer extras;
#   1. wheel + psycopg[binary] only: `sqlqueue --help`, create/send/receive on SQLite and PostgreSQL through the
#      CLI, `import airflow_sqlqueue.transport`, and the optional parts naming the extra they need;
#   2. wheel[airflow,postgres] with constraints.txt (no pyarrow, no PySpark): `airflow providers list` shows the
#      provider, every DAG in the installed example_dags parses, every module imports (the Spark job's modules
#      excepted, which must name the spark extra), the SQL Queues page and its API answer through Airflow's own
#      API-server app;
#   3. wheel[airflow,spark,parquet]: a real drain to Parquet, then the Spark job through `spark-submit` on
#      local[*] (needs Java 17+); SQLQUEUE_MATRIX_PYSPARK=<version> (e.g. '3.5.*') takes that PySpark instead.
# Optional (slow: a second Airflow), when SQLQUEUE_MATRIX_AIRFLOW=<version> (e.g. 3.3.0, the lowest supported):
#   4. wheel[airflow,postgres,parquet] on that Airflow, running the Airflow-layer tests of this checkout
#      (SQLQUEUE_MATRIX_TESTS, default below) against it.
# Uses uv (its cache makes each environment a matter of seconds). Fails loudly at the first broken check.
# PostgreSQL: SQLQUEUE_TEST_PG_URL (default postgresql://postgres@127.0.0.1:5432/test); a queue with a random
# name is created there and dropped.
# Usage: bash scripts/check-install-matrix.sh
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
PY="${PYTHON:-python3.11}"
command -v "$PY" >/dev/null 2>&1 || PY=python3
command -v uv >/dev/null 2>&1 || { echo "check-install-matrix: needs uv (pip install uv)" >&2; exit 2; }
PG_URL="${SQLQUEUE_TEST_PG_URL:-postgresql://postgres@127.0.0.1:5432/test}"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/sqlqueue-matrix.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
export AIRFLOW__CORE__LOAD_EXAMPLES=False
unset AIRFLOW__CORE__DAGS_FOLDER
START=$SECONDS

step() { printf '\n== %s (%ss)\n' "$*" "$((SECONDS - START))"; }
ok() { printf '   ok: %s\n' "$*"; }
fail() { printf '\nINSTALL MATRIX FAILED: %s\n' "$*" >&2; exit 1; }
# venv NAME SPEC...: a fresh environment holding exactly what the specs ask for (pinned by constraints.txt)
venv() {
    local name="$1"; shift
    uv venv -q "$WORK/$name" --python "$PY"
    uv pip install -q --python "$WORK/$name/bin/python" "$@" || fail "$name: uv pip install $*"
}
absent() {  # absent ENV DIST...: none of these distributions is installed in ENV
    local env="$1"; shift
    for dist in "$@"; do
        if uv pip show -q --python "$WORK/$env/bin/python" "$dist" >/dev/null 2>&1; then
            fail "$env: $dist is installed, but nothing in this install asks for it"
        fi
    done
    ok "$env: not installed: $*"
}
# expect_error TEXT CMD...: CMD fails and its stderr says TEXT
expect_error() {
    local text="$1"; shift
    local err
    if err="$("$@" 2>&1 >/dev/null)"; then fail "expected '$*' to fail with '$text'"; fi
    grep -qF -- "$text" <<<"$err" || fail "'$*' failed without saying '$text': ${err: -600}"
    ok "'${*: -1}' fails saying $text"
}

step "0. build the wheel and sdist"
uv build -q --out-dir "$WORK/dist" >/dev/null 2>&1 || { uv build --out-dir "$WORK/dist"; fail "uv build"; }
WHEEL="$(ls "$WORK"/dist/*.whl)"
SDIST="$(ls "$WORK"/dist/*.tar.gz)"
ok "$(basename "$WHEEL"), $(basename "$SDIST")"
if [ -x .venv/bin/twine ]; then twine=(.venv/bin/twine); else twine=(uvx twine); fi
"${twine[@]}" check --strict "$WORK"/dist/* >/dev/null || { "${twine[@]}" check --strict "$WORK"/dist/*; fail "twine check"; }
ok "twine check --strict"
"$PY" - "$WHEEL" "$SDIST" <<'EOF' || fail "the distributions' contents"
import re, sys, tarfile, zipfile
wheel, sdist = sys.argv[1:]
version = re.search(r'__version__ = "([^"]+)"', open("airflow_sqlqueue/__init__.py").read())[1]
names = zipfile.ZipFile(wheel).namelist()
meta = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
problems = []
if f"\nVersion: {version}\n" not in meta:
    problems.append(f"wheel version is not airflow_sqlqueue.__version__ ({version})")
for required in ["airflow_sqlqueue/py.typed", "airflow_sqlqueue/transport/dialects/sql/postgres.sql",
                 "airflow_sqlqueue/example_dags/error_queue_batch_retry.py"]:
    if required not in names:
        problems.append(f"wheel lacks {required}")
if not any(n.endswith(".dist-info/licenses/LICENSE") for n in names):
    problems.append("wheel lacks LICENSE")
dags = [n for n in names if n.startswith("airflow_sqlqueue/example_dags/") and not n.endswith("__init__.py")]
extras = re.findall(r"^Provides-Extra: (\S+)", meta, re.M)
if set(extras) & {"test", "bench", "dev"}:
    problems.append(f"developer extras published: {extras}")
if "License-Expression: Apache-2.0" not in meta:
    problems.append("no SPDX License-Expression")
if re.search(r"\]\((?!https?://|#)[^)]+\)", meta.split("\n\n", 1)[1]):
    problems.append("the index page (README.package.md) has a relative link")
members = tarfile.open(sdist).getnames()
leaked = [m for m in members if re.match(r"[^/]+/(tests|bench|\.ci|scripts)/", m)]
if leaked:
    problems.append(f"sdist holds {len(leaked)} developer files, e.g. {leaked[:3]}")
print(f"   ok: wheel {version}: {len(names)} files, {len(dags)} DAG files, extras {', '.join(extras)}")
print(f"   ok: sdist: {len(members)} entries, no tests/bench/scripts/.ci")
if problems:
    print("\n".join(problems), file=sys.stderr)
    sys.exit(1)
EOF

# From here on, nothing runs in the checkout: a script on stdin or `python -c` puts the working directory first on
# sys.path, which would import the checkout's airflow_sqlqueue instead of the installed wheel's.
CONSTRAINTS="$ROOT/constraints.txt"
cd "$WORK"

step "1. wheel + psycopg[binary]: the core and the CLI, no Airflow"
venv core -c "$CONSTRAINTS" "$WHEEL" "psycopg[binary]"
absent core apache-airflow-core pyarrow pyspark
SQ="$WORK/core/bin/sqlqueue"
"$SQ" --help >/dev/null || fail "sqlqueue --help"
ok "sqlqueue --help"
"$WORK/core/bin/python" -c "import airflow_sqlqueue.transport" || fail "import airflow_sqlqueue.transport"
ok "import airflow_sqlqueue.transport"
QUEUE="matrix_$(date +%s)_$$"
cli_round_trip() {  # cli_round_trip URL: create, send 3, peek, receive 3 as JSON
    local url="$1" what="$2"
    SQLQUEUE_URL="$url" "$SQ" create "$QUEUE" "${QUEUE}_error" >/dev/null || fail "$what: sqlqueue create"
    seq 3 | SQLQUEUE_URL="$url" "$SQ" send "$QUEUE" --header NServiceBus.EnclosedMessageTypes=Matrix.Ping \
        >/dev/null || fail "$what: sqlqueue send"
    local got
    got="$(SQLQUEUE_URL="$url" "$SQ" --json receive "$QUEUE" --max 10)" || fail "$what: sqlqueue receive"
    [ "$(grep -c '"Matrix.Ping"' <<<"$got")" = 3 ] || fail "$what: received $(wc -l <<<"$got") lines, not 3: $got"
    ok "$what: sqlqueue create, send 3, receive 3"
}
cli_round_trip "sqlite:///$WORK/queues.db" "SQLite"
cli_round_trip "$PG_URL" "PostgreSQL"
"$WORK/core/bin/python" - "$PG_URL" "$QUEUE" <<'EOF' || fail "dropping the PostgreSQL test queues"
import sys
import psycopg
with psycopg.connect(sys.argv[1], autocommit=True) as conn:
    for table in (sys.argv[2], sys.argv[2] + "_error"):
        conn.execute(f'DROP TABLE IF EXISTS "{table}"')  # noqa: S608 (our own random name)
EOF
expect_error "airflow-provider-sqlqueue[parquet]" "$SQ" archives list --location "$WORK/archive"
expect_error "airflow-provider-sqlqueue[airflow]" "$WORK/core/bin/python" -c "import airflow_sqlqueue.operators"
expect_error "airflow-provider-sqlqueue[spark]" "$WORK/core/bin/python" -c "import airflow_sqlqueue.spark.job"

step "2. wheel[airflow,postgres] with constraints.txt: the provider in Airflow, no pyarrow, no PySpark"
venv airflow -c "$CONSTRAINTS" "$WHEEL[airflow,postgres]"
absent airflow pyarrow pyspark pyspark-client apache-airflow-providers-openlineage
export AIRFLOW_HOME="$WORK/airflow-home"
mkdir -p "$AIRFLOW_HOME"
"$WORK/airflow/bin/airflow" db migrate >"$WORK/migrate.log" 2>&1 || { tail -20 "$WORK/migrate.log"; fail "airflow db migrate"; }
ok "airflow db migrate (SQLite in \$AIRFLOW_HOME)"
"$WORK/airflow/bin/airflow" providers list --output json >"$WORK/providers.json" 2>"$WORK/providers.err" \
    || { tail -20 "$WORK/providers.err"; fail "airflow providers list"; }
"$WORK/airflow/bin/python" - "$WORK/providers.json" "$WORK/providers.err" <<'EOF' || fail "airflow providers list"
import json, sys
text = open(sys.argv[1]).read()
providers = json.loads(text[text.index("["):])
ours = [p for p in providers if p["package_name"] == "airflow-provider-sqlqueue"]
import airflow_sqlqueue
assert len(ours) == 1 and ours[0]["version"] == airflow_sqlqueue.__version__, ours
err = open(sys.argv[2]).read()
assert "airflow_sqlqueue" not in err and "sqlqueue" not in err.lower(), err[-2000:]
print(f"   ok: airflow providers list: airflow-provider-sqlqueue {ours[0]['version']}, no warning about it")
EOF
AIRFLOW_CONN_SQLQUEUE_DEFAULT="sqlite:///$WORK/queues.db" \
AIRFLOW_VAR_SQLQUEUE_MAINTENANCE="{\"connections\": {\"sqlqueue_default\": {}}, \"archive\": {\"location\": \"$WORK/archive\"}}" \
"$WORK/airflow/bin/python" - <<'EOF' || fail "the provider in Airflow"
import importlib, os, pkgutil, sys, warnings

import airflow_sqlqueue
import airflow_sqlqueue.example_dags as example_dags

# every DAG file in the installed package parses
from airflow.dag_processing.dagbag import DagBag

bag = DagBag(dag_folder=example_dags.__path__[0])
assert not bag.import_errors, bag.import_errors
assert len(bag.dags) >= 12, sorted(bag.dags)
assert "example_sqlqueue_drain_to_spark" in bag.dags and "sqlqueue_error_queue_batch_retry" in bag.dags
assert example_dags.__path__[0].startswith(sys.prefix), example_dags.__path__  # the wheel's, not a checkout's
print(f"   ok: DagBag of {example_dags.__path__[0]}: {len(bag.dags)} DAGs, 0 import errors")

# every module imports; the Spark job's modules (PySpark is not installed) fail naming the spark extra
imported, spark_only = 0, []
for module in pkgutil.walk_packages(airflow_sqlqueue.__path__, "airflow_sqlqueue."):
    if module.name.endswith("__main__") or module.name.startswith("airflow_sqlqueue.example_dags."):
        continue
    try:
        importlib.import_module(module.name)
        imported += 1
    except ModuleNotFoundError as exc:
        assert module.name.startswith("airflow_sqlqueue.spark.") and "airflow-provider-sqlqueue[spark]" in str(exc), (
            module.name, exc)
        spark_only.append(module.name)
operators = [m for m in sys.modules if m.startswith("airflow_sqlqueue.operators.")]
assert len(operators) >= 8, operators
print(f"   ok: {imported} modules import ({len(operators)} operator modules); "
      f"{len(spark_only)} need PySpark and say [spark]: {', '.join(m.rsplit('.', 1)[1] for m in spark_only)}")

# the SQL Queues page and its API, through Airflow's own API-server app (Simple auth manager, a JWT)
os.environ["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS"] = "matrix:admin"
os.environ["AIRFLOW__API_AUTH__JWT_SECRET"] = "sqlqueue-install-matrix-" + "x" * 64
from airflow.api_fastapi.app import create_app, get_auth_manager
from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
from fastapi.testclient import TestClient

from airflow_sqlqueue.transport import OutgoingMessage, SqlQueueTransport

with SqlQueueTransport.from_url(os.environ["AIRFLOW_CONN_SQLQUEUE_DEFAULT"]) as transport:
    transport.create_queues(["orders", "error"])
    transport.send("orders", OutgoingMessage(body=b"{}", headers={"NServiceBus.EnclosedMessageTypes": "Ping"}))
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    app = create_app("all")
    client = TestClient(app, base_url="http://localhost")
token = get_auth_manager().generate_jwt(SimpleAuthManagerUser(username="matrix", role="admin"))
auth = {"Authorization": f"Bearer {token}"}
page = client.get("/sqlqueue/", headers=auth)
assert page.status_code == 200 and "<html" in page.text.lower(), (page.status_code, page.text[:500])
overview = client.get("/sqlqueue/api/overview", headers=auth)
assert overview.status_code == 200, (overview.status_code, overview.text[:1000])
queues = {q["queue"]: q for c in overview.json()["connections"] for q in c.get("queues", [])}
assert queues.get("orders", {}).get("depth") == 1, overview.json()
print("   ok: GET /sqlqueue/ (the page) 200; GET /sqlqueue/api/overview 200: orders depth 1")
archives = client.get("/sqlqueue/api/connections/sqlqueue_default/archives", headers=auth)
assert archives.status_code == 501 and "airflow-provider-sqlqueue[parquet]" in archives.json()["detail"], (
    archives.status_code, archives.text[:1000])
print("   ok: GET /sqlqueue/api/connections/sqlqueue_default/archives without pyarrow: 501 naming [parquet]")
EOF

step "3. wheel[airflow,spark,parquet]: drain to Parquet, then the Spark job on local[*]"
command -v java >/dev/null 2>&1 || [ -n "${JAVA_HOME:-}" ] || fail "Spark needs Java 17+ (java not on PATH, no JAVA_HOME)"
if [ -n "${SQLQUEUE_MATRIX_PYSPARK:-}" ]; then  # another PySpark than constraints.txt's, e.g. 3.5.* (the oldest admitted)
    grep -v '^pyspark==' "$CONSTRAINTS" >"$WORK/spark-constraints.txt"
    venv spark -c "$WORK/spark-constraints.txt" "$WHEEL[airflow,spark,parquet]" "pyspark==$SQLQUEUE_MATRIX_PYSPARK"
else
    venv spark -c "$CONSTRAINTS" "$WHEEL[airflow,spark,parquet]"
fi
absent spark pyspark-client
"$WORK/spark/bin/python" - "$WORK" <<'EOF' || fail "the Spark job"
import json, os, subprocess, sys
from pathlib import Path

import airflow_sqlqueue.spark
import pyspark

assert airflow_sqlqueue.spark.__file__.startswith(sys.prefix), airflow_sqlqueue.spark.__file__
from airflow_sqlqueue.operators.parquet import ParquetBatchWriter
from airflow_sqlqueue.transport import OutgoingMessage, SqlQueueTransport

work = Path(sys.argv[1])
with SqlQueueTransport.from_url(f"sqlite:///{work / 'spark.db'}") as transport:
    transport.create_queues(["audit", "error"])
    transport.send_many("audit", [OutgoingMessage(body=json.dumps({"n": n}).encode(), headers={
        "NServiceBus.EnclosedMessageTypes": "Matrix.Audited" if n % 2 else "Matrix.Other",
        "NServiceBus.ContentType": "application/json"}) for n in range(20)])
    writer = ParquetBatchWriter(str(work / "batches"))
    for part in range(2):
        writer.write(transport.receive("audit", max_messages=10), f"batch-{part}.parquet")
job = Path(airflow_sqlqueue.spark.__file__).with_name("job.py")
proc = subprocess.run([str(Path(sys.executable).with_name("spark-submit")), "--master", "local[*]",
                       "--conf", "spark.ui.enabled=false", str(job),
                       "--input", str(work / "batches"), "--output", str(work / "spark-out")],
                      capture_output=True, text=True, timeout=600,
                      env={**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
                           "PYSPARK_PYTHON": sys.executable})  # as in an activated virtual environment
if proc.returncode != 0:  # Spark's INFO lines hide the error: show the others
    lines = [line for line in proc.stderr.splitlines() if " INFO " not in line and " WARN " not in line]
    sys.exit(f"spark-submit exited {proc.returncode}:\n" + "\n".join(lines[-60:]) + "\n" + proc.stdout[-2000:])
summary = json.loads(proc.stdout.strip().splitlines()[-1])
assert summary["messages"] == 20 and summary["input_rows"] == 20, summary
print(f"   ok: 20 messages drained to 2 Parquet files; spark-submit job.py on local[*] (PySpark "
      f"{pyspark.__version__}): {summary['messages']} messages, {summary.get('duplicates_removed')} duplicates removed")
EOF

if [ -n "${SQLQUEUE_MATRIX_AIRFLOW:-}" ]; then
    step "4. Airflow $SQLQUEUE_MATRIX_AIRFLOW: wheel[airflow,postgres,parquet] and the Airflow-layer tests"
    tests="${SQLQUEUE_MATRIX_TESTS:-tests/test_provider.py tests/test_example_dags.py tests/test_sensor.py tests/test_triggers.py tests/test_operators.py}"
    # constraints.txt pins Airflow 3.3.2 and what it needs: this environment resolves the given Airflow freely, and
    # pins only the test tools to constraints.txt's versions
    grep -E '^(pytest|pytest-timeout|pluggy|iniconfig|hypothesis|sqlglot)==' "$CONSTRAINTS" >"$WORK/floor-constraints.txt"
    (cd "$ROOT" && venv floor -c "$WORK/floor-constraints.txt" "$WHEEL[airflow,postgres,parquet]" \
        "apache-airflow==$SQLQUEUE_MATRIX_AIRFLOW" "apache-airflow-core==$SQLQUEUE_MATRIX_AIRFLOW" \
        --group pyproject.toml:test)
    "$WORK/floor/bin/python" -c "import airflow; print('   ok: Airflow', airflow.__version__)"
    # run from a copy of the tests only, so that the installed wheel (not the checkout) is imported
    mkdir -p "$WORK/floor-tests"
    cp -r "$ROOT/tests" "$ROOT/docs" "$ROOT/pyproject.toml" "$WORK/floor-tests/"  # docs: tests check the tables
    sed -i 's/^pythonpath = \["."\]/pythonpath = []/' "$WORK/floor-tests/pyproject.toml"
    (cd "$WORK/floor-tests" && PYTHONPATH="$WORK/floor-tests" AIRFLOW_HOME="$WORK/floor-home" \
        "$WORK/floor/bin/python" -m pytest -q -p no:cacheprovider --tb=line -rfE $tests) || fail "Airflow-layer tests on $SQLQUEUE_MATRIX_AIRFLOW"
fi

printf '\ninstall matrix: every check passed in %ss\n' "$((SECONDS - START))"
