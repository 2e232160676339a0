"""One send a second through the example DAG with different ``min_event_interval`` values, alternated on one
deployment (issue 29): which event spacing gives the lowest send -> DAG run start, and what each costs in runs and CPU.

Runs only when ``SQLQUEUE_LATENCY_LEVERS`` lists the values to compare (seconds, comma-separated, e.g. ``2,1,0.5``):
each becomes a copy of ``example_asset_watcher.py`` with its own DAG id, queue and ``min_event_interval``, all in one
deployment. The phases (``SQLQUEUE_LATENCY_LEVER_ROUNDS`` rounds, default 2, of 30 sends a second to each copy in
turn, each phase waiting until its messages are in successful runs and the deployment is quiet) alternate, so the
copies share the machine's load. ``SQLQUEUE_LATENCY_LEVER_BACKENDS`` picks ``postgresql``, ``sqlite`` or both
(default). Figures are printed, never asserted; every message must end in a successful run.
"""

from __future__ import annotations

import json
import os
import statistics
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from airflow_sqlqueue.transport import SqlQueueTransport
from tests.deployment.harness import PG_URL, Deployment, percentile, wait_for
from tests.deployment.test_event_latency_deployment import EXAMPLE, outcome, runs_breakdown, send

LEVERS = [float(v) for v in os.environ.get("SQLQUEUE_LATENCY_LEVERS", "").split(",") if v.strip()]
ROUNDS = int(os.environ.get("SQLQUEUE_LATENCY_LEVER_ROUNDS", "2"))
BACKENDS = [b for b in os.environ.get("SQLQUEUE_LATENCY_LEVER_BACKENDS", "postgresql,sqlite").split(",") if b]

pytestmark = [pytest.mark.deployment, pytest.mark.timeout(3000),
              pytest.mark.skipif(not LEVERS, reason="set SQLQUEUE_LATENCY_LEVERS (e.g. 2,1,0.5) to compare")]


def variant_file(root: Path, value: float) -> tuple[Path, str, str]:
    """A copy of the example with its own DAG id and queue and ``min_event_interval=value``."""
    label = f"{value:g}".replace(".", "_")
    dag_id, queue = f"latency_lever_{label}", f"events_{label}"
    text = EXAMPLE.read_text()
    replacements = {'"example_sqlqueue_asset_watcher"': f'"{dag_id}"',
                    'QUEUE = os.environ.get("SQLQUEUE_EXAMPLE_EVENTS_QUEUE", "events")':
                        f'QUEUE = os.environ["SQLQUEUE_LEVER_SCHEMA"] + "{queue}"',
                    "queue_name=QUEUE,": f"queue_name=QUEUE, min_event_interval={value!r},"}
    for old, new in replacements.items():
        assert text.count(old) == 1, f"the example changed: {old!r}"
        text = text.replace(old, new)
    path = root / f"latency_lever_{label}.py"
    path.write_text(text)
    return path, dag_id, queue


@pytest.fixture(scope="module", params=BACKENDS)
def levers(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    root = tmp_path_factory.mktemp("levers")
    schema = "v_" + uuid.uuid4().hex[:10]
    if request.param == "postgresql":
        prefix, url, connection = f'"{schema}".', PG_URL, PG_URL
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA "{schema}"')
    else:
        path = root / "queues.db"
        prefix, url = "", f"sqlite:///{path}"
        connection = json.dumps({"conn_type": "sqlite", "host": str(path)})
    (root / "src").mkdir()
    variants = [variant_file(root / "src", v) for v in LEVERS]
    deployment = Deployment(root, [p for p, _, _ in variants],
                            env={"SQLQUEUE_EXAMPLE_CONN_ID": "sqlqueue_default", "SQLQUEUE_LEVER_SCHEMA": prefix},
                            connections={"sqlqueue_default": connection})
    deployment.queue_url = url  # type: ignore[attr-defined]
    deployment.variants = [(v, dag_id, prefix + q) for v, (_, dag_id, q) in zip(LEVERS, variants, strict=True)]  # type: ignore
    deployment.backend = request.param  # type: ignore[attr-defined]
    try:
        with SqlQueueTransport.from_url(url) as transport:
            transport.create_queues([prefix + q for _, _, q in variants], notify=request.param == "postgresql")
            if not transport.exists("error"):
                transport.create_queues(["error"])
        with deployment:
            dag_ids = [d for _, d, _ in variants]
            deployment.wait_parsed(dag_ids)
            for dag_id in dag_ids:
                deployment.set_paused(dag_id, False)
            wait_for("every copy's watcher to start",
                     lambda: deployment.log_text("triggerer").count("this trigger is") >= len(dag_ids), 240,
                     interval=0.5, hint=deployment.where_logs())
            yield deployment
    finally:
        if request.param == "postgresql":
            with psycopg.connect(PG_URL, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


def test_one_send_a_second_alternated(levers: Deployment) -> None:
    results: dict[float, dict[str, Any]] = {v: {"run": [], "event": [], "runs": 0, "cpu": 0.0, "phases": []}
                                            for v in LEVERS}
    for round_ in range(ROUNDS):
        order = LEVERS if round_ % 2 == 0 else list(reversed(LEVERS))
        for value in order:
            _, dag_id, queue = next(x for x in levers.variants if x[0] == value)  # type: ignore[attr-defined]
            levers.queue = queue  # type: ignore[attr-defined]
            tag, sent = f"lv{uuid.uuid4().hex[:6]}", {}
            time.sleep(10)
            cpu = levers.cpu_seconds()
            start = time.time()
            for i in range(30):
                time.sleep(max(0.0, start + i - time.time()))
                sent[f"{tag}-{i}"] = send(levers, [f"{tag}-{i}"])
            wait_for(f"the 30 messages of min_event_interval {value:g} in successful runs",
                     lambda sent=sent: outcome(levers, sent)["done"] >= set(sent), 240, interval=2,
                     hint=levers.where_logs())
            got = outcome(levers, sent)
            breakdown = runs_breakdown(levers, sent)
            used = sum(levers.cpu_seconds().values()) - sum(cpu.values())
            r = results[value]
            r["run"] += [got["run_at"][b] - sent[b] for b in sent]
            r["event"] += [got["event_at"][b] - sent[b] for b in sent]
            r["runs"] += breakdown.get("runs", 0)
            r["cpu"] += used
            r["phases"].append(breakdown)
            print(f"\n{levers.backend} min_event_interval {value:g} round {round_ + 1}: "  # type: ignore[attr-defined]
                  f"run p50 {statistics.median(r['run'][-30:]):.2f} s, CPU {used:.0f} s, {breakdown}")
    lines = [f"\n{levers.backend}: one send a second, {ROUNDS} x 30 messages per value, alternated",  # type: ignore
             "| min_event_interval | send -> event p50 / p95 | send -> run start p50 / p95 | runs | CPU s / run |",
             "|---:|---:|---:|---:|---:|"]
    for value, r in results.items():
        lines.append(f"| {value:g} s | {statistics.median(r['event']):.2f} / {percentile(r['event'], 95):.2f} s | "
                     f"{statistics.median(r['run']):.2f} / {percentile(r['run'], 95):.2f} s | {r['runs']} | "
                     f"{r['cpu'] / max(1, r['runs']):.2f} |")
    print("\n".join(lines))
