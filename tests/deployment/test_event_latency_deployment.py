"""Send -> DAG run start on a real deployment with the shipped example DAG's own settings (issue 29).

``example_asset_watcher.py`` as shipped (``poll_interval`` 2 s, the trigger's defaults: back-off to 8 s,
``event_interval`` 5 s, ``min_event_interval`` 0.5 s), its queue on PostgreSQL with the wake-up trigger and on
SQLite (file wake-ups), LocalExecutor, metadata on PostgreSQL. Each backend waits for the watcher to start (the DAG
processor's next parse after the unpause) before it measures. First a minute with nothing sent (metadata
transactions a minute and CPU seconds at rest); then send patterns: isolated sends after quiet spells, one send a
second, bursts of 20; then a pause and an unpause. Latency counts from just before the send call. Every message must
end in a successful run (counted per message from the asset events and their runs); the latencies are printed as a
table, never asserted (timing is read, not tested). Each pattern also prints where its runs' time went
(``breakdown``) and the CPU seconds per run. One pattern and backend while iterating (about 5 min): ``-k "one_send
and postgresql"``; Airflow settings to try: ``airflow_settings``.
"""

from __future__ import annotations

import json
import os
import random
import re
import statistics
import time
import uuid
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest

from airflow_sqlqueue.transport import OutgoingMessage, SqlQueueTransport
from tests.deployment.harness import PG_URL, Deployment, percentile, wait_for

pytestmark = [pytest.mark.deployment, pytest.mark.timeout(1500)]

EXAMPLE = Path(__file__).resolve().parents[2] / "airflow_sqlqueue" / "example_dags" / "example_asset_watcher.py"
DAG_ID = "example_sqlqueue_asset_watcher"
ROWS: list[dict[str, Any]] = []


def airflow_settings() -> dict[str, str]:
    """Airflow settings to try beside the defaults: ``SQLQUEUE_LATENCY_AIRFLOW__SECTION__KEY=value`` in the test's
    environment becomes ``AIRFLOW__SECTION__KEY=value`` for every component (none by default: the figures are for
    Airflow's defaults)."""
    prefix = "SQLQUEUE_LATENCY_AIRFLOW__"
    return {"AIRFLOW__" + k[len(prefix):]: v for k, v in os.environ.items() if k.startswith(prefix)}


@pytest.fixture(scope="module", params=["postgresql", "sqlite"])
def example(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    root = tmp_path_factory.mktemp("latency")
    schema = "l_" + uuid.uuid4().hex[:10]
    if request.param == "postgresql":
        queue, url, connection = f'"{schema}"."events"', PG_URL, PG_URL
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA "{schema}"')
    else:
        path = root / "queues.db"
        queue, url = "events", f"sqlite:///{path}"
        connection = json.dumps({"conn_type": "sqlite", "host": str(path)})
    deployment = Deployment(root, [EXAMPLE],
                            env={"SQLQUEUE_EXAMPLE_CONN_ID": "sqlqueue_default",
                                 "SQLQUEUE_EXAMPLE_EVENTS_QUEUE": queue, **airflow_settings()},
                            connections={"sqlqueue_default": connection})
    deployment.queue, deployment.queue_url = queue, url  # type: ignore[attr-defined]
    deployment.backend = "PostgreSQL (push)" if request.param == "postgresql" else "SQLite"  # type: ignore[attr-defined]
    try:
        with SqlQueueTransport.from_url(url) as transport:
            transport.create_queues([queue], notify=request.param == "postgresql")  # docs: with --notify
            if not transport.exists("error"):
                transport.create_queues(["error"])
        with deployment:
            if airflow_settings():
                print(f"\nAirflow settings beside the defaults: {airflow_settings()}")
            deployment.wait_parsed([DAG_ID])
            deployment.set_paused(DAG_ID, False)
            unpaused = time.time()
            wait_for("the watcher to start (the DAG processor's next parse of the file)",
                     lambda: "this trigger is" in deployment.log_text("triggerer"), 180, interval=0.5,
                     hint=deployment.where_logs())
            print(f"\n{deployment.backend}: watcher started {time.time() - unpaused:.0f} s after the unpause")
            yield deployment
    finally:
        print("\n" + table(ROWS))
        if request.param == "postgresql":
            with psycopg.connect(PG_URL, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


def send(deployment: Deployment, bodies: list[str]) -> float:
    """Send in one transaction; the time just before the send call (the sender's view)."""
    with SqlQueueTransport.from_url(deployment.queue_url) as transport:
        started = time.time()
        transport.send_many(deployment.queue, [OutgoingMessage(body=b.encode()) for b in bodies])
    return started


EMITTED = re.compile(r"^(\S+Z) .*queue (.+?): one event for \d+ messages \(seq (\d+)\.\.", re.MULTILINE)


def emitted_at(deployment: Deployment) -> dict[tuple[str, int], float]:
    """When the trigger emitted each event (its "one event for N messages" log line), by (queue, first seq)."""
    return {(queue, int(seq)): datetime.fromisoformat(at.replace("Z", "+00:00")).timestamp()
            for at, queue, seq in EMITTED.findall(deployment.log_text("triggerer"))}


def outcome(deployment: Deployment, sent: dict[str, float]) -> dict[str, Any]:
    """Per message: when its asset event was emitted and stored, when the first run that consumed it started, and
    whether a run that consumed it succeeded."""
    tags = sorted({body.rsplit("-", 1)[0] for body in sent})
    rows = deployment.query(
        "SELECT e.timestamp, e.extra, r.start_date, r.state, r.queued_at FROM asset_event e "
        "LEFT JOIN dagrun_asset_event d ON d.event_id = e.id LEFT JOIN dag_run r ON r.id = d.dag_run_id "
        "WHERE e.extra::text LIKE ANY(%s)", ([f"%{t}-%" for t in tags],))
    event_at: dict[str, float] = {}
    run_at: dict[str, float] = {}
    done: set[str] = set()
    queued_at: dict[str, float] = {}
    emitted, emitted_log = {}, emitted_at(deployment)
    for stored, extra, started, state, queued in rows:
        payload = (extra or {}).get("payload", {})
        for message in payload.get("messages", []):
            body = message.get("body")
            if body not in sent:
                continue
            event_at[body] = min(event_at.get(body, float("inf")), stored.timestamp())
            if (payload.get("queue"), payload.get("first_seq")) in emitted_log:
                emitted[body] = emitted_log[payload["queue"], payload["first_seq"]]
            if started is not None:
                run_at[body] = min(run_at.get(body, float("inf")), started.timestamp())
            if queued is not None:
                queued_at[body] = min(queued_at.get(body, float("inf")), queued.timestamp())
            if state == "success":
                done.add(body)
    return {"event_at": event_at, "run_at": run_at, "queued_at": queued_at, "done": done, "emitted": emitted}


def runs_breakdown(deployment: Deployment, sent: dict[str, float]) -> dict[str, Any]:
    """Where the scheduler's part goes, per DAG run that consumed the phase's messages: its newest event stored ->
    run created (``queued_at``) -> run started -> its task started; the task's length; events per run; runs active
    when each was created."""
    tags = sorted({body.rsplit("-", 1)[0] for body in sent})
    rows = deployment.query(
        "SELECT r.id, r.queued_at, r.start_date, min(e.timestamp), max(e.timestamp), count(DISTINCT e.id), "
        "min(t.start_date), max(t.end_date), r.run_after FROM dag_run r "
        "JOIN dagrun_asset_event d ON d.dag_run_id = r.id JOIN asset_event e ON e.id = d.event_id "
        "LEFT JOIN task_instance t ON t.dag_id = r.dag_id AND t.run_id = r.run_id "
        "WHERE r.id IN (SELECT d2.dag_run_id FROM dagrun_asset_event d2 JOIN asset_event e2 ON e2.id = d2.event_id "
        "WHERE e2.extra::text LIKE ANY(%s)) GROUP BY r.id", ([f"%{t}-%" for t in tags],))
    runs = [r for r in rows if None not in (r[1], r[2], r[6], r[7])]
    if not runs:
        return {}

    def med(values: list[float]) -> float:
        return statistics.median(values)

    created = [r[1].timestamp() for r in runs]
    spans = [(r[6].timestamp(), r[7].timestamp()) for r in runs]
    return {"runs": len(runs),
            "events/run max": max(r[5] for r in runs),
            "runs of >1 event": sum(1 for r in runs if r[5] > 1),
            # the run's queue row (asset_dag_run_queue.created_at, kept as the run's run_after) is written with
            # the event that queued the DAG; the scheduler's loop then creates the run
            "queue row->created p50": med([(r[1] - r[8]).total_seconds() for r in runs]),
            "newest event->created p50": med([(r[1] - r[4]).total_seconds() for r in runs]),
            "newest event->created max": max((r[1] - r[4]).total_seconds() for r in runs),
            "created->start p50": med([(r[2] - r[1]).total_seconds() for r in runs]),
            "start->task start p50": med([(r[6] - r[2]).total_seconds() for r in runs]),
            "task p50": med([(r[7] - r[6]).total_seconds() for r in runs]),
            "tasks running at creation p50": med([sum(1 for a, b in spans if a <= c < b) for c in created])}


def metadata_xacts(deployment: Deployment) -> tuple[float, int]:
    """The time and the transactions the metadata database counted so far (``pg_stat_database``; every Airflow
    component's statements run in one, so their rate is what a setting such as the scheduler's idle sleep costs)."""
    row = deployment.query("SELECT xact_commit + xact_rollback FROM pg_stat_database "
                           "WHERE datname = current_database()")
    return time.time(), int(row[0][0])


def test_idle_minute(example: Deployment) -> None:
    """Nothing sent for 60 s: what the deployment costs at rest (metadata transactions a minute, CPU seconds)."""
    cpu, start = example.cpu_seconds(), metadata_xacts(example)
    time.sleep(60)
    end, now = metadata_xacts(example), example.cpu_seconds()
    row = {"backend": example.backend, "pattern": "idle 60 s",
           "metadata xacts/min": round((end[1] - start[1] - 1) * 60 / (end[0] - start[0])),
           "cpu s": {name: round(now[name] - cpu.get(name, 0.0), 2) for name in now}}
    print(row)


def finish(deployment: Deployment, name: str, sent: dict[str, float], timeout: float = 180,
           cpu: dict[str, float] | None = None) -> dict[str, Any]:
    """Wait until every message of the phase is in a successful run; its latencies, the scheduler's part per run
    and, given the components' CPU seconds at the phase's start (``cpu``), what the phase cost in CPU."""
    wait_for(f"the {len(sent)} messages of {name} in successful runs",
             lambda: outcome(deployment, sent)["done"] >= set(sent), timeout, interval=2, hint=deployment.where_logs())
    got = outcome(deployment, sent)
    to_event = [got["event_at"][b] - sent[b] for b in sent]
    to_run = [got["run_at"][b] - sent[b] for b in sent if b in got["run_at"]]
    row = {"backend": deployment.backend, "pattern": name, "messages": len(sent),
           "waiting": len(set(sent) - got["done"]),
           "event p50": statistics.median(to_event), "event p95": percentile(to_event, 95),
           "run p50": statistics.median(to_run), "run p95": percentile(to_run, 95),
           # the watcher's part: send -> event emitted (claimed, in the trigger's log) -> stored by the triggerer
           "send->emitted p50": statistics.median([got["emitted"][b] - sent[b] for b in got["emitted"]] or [-1]),
           "emitted->stored p50": statistics.median([got["event_at"][b] - got["emitted"][b]
                                                     for b in got["emitted"]] or [-1]),
           # where the scheduler's part goes: asset event stored -> run queued (created), queued -> started
           "event->queued p50": statistics.median([got["queued_at"][b] - got["event_at"][b] for b in got["run_at"]]),
           "queued->start p50": statistics.median([got["run_at"][b] - got["queued_at"][b] for b in got["run_at"]])}
    row["breakdown"] = runs_breakdown(deployment, sent)
    if cpu is not None:
        now = deployment.cpu_seconds()
        used = {name: round(now[name] - cpu.get(name, 0.0), 1) for name in now}
        row["cpu s"] = used
        row["cpu s/run"] = round(sum(used.values()) / max(1, row["breakdown"].get("runs", 0)), 2)
    ROWS.append(row)
    print(row)
    return row


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| backend | pattern | messages | send -> asset event p50 | p95 | send -> run start p50 | p95 | waiting |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['backend']} | {r['pattern']} | {r['messages']} | {r['event p50']:.1f} s | "
                     f"{r['event p95']:.1f} s | "
                     f"{r['run p50']:.1f} s | {r['run p95']:.1f} s | {r['waiting']} |")
    return "\n".join(lines)


def test_isolated_sends(example: Deployment) -> None:
    tag, sent = "iso" + uuid.uuid4().hex[:6], {}
    cpu = example.cpu_seconds()
    for i in range(6):
        time.sleep(random.uniform(15, 20))
        sent[f"{tag}-{i}"] = send(example, [f"{tag}-{i}"])
    assert finish(example, "isolated (after 15-20 s quiet)", sent, cpu=cpu)["waiting"] == 0


def test_one_send_a_second(example: Deployment) -> None:
    tag, sent = "sec" + uuid.uuid4().hex[:6], {}
    time.sleep(15)
    cpu = example.cpu_seconds()
    start = time.time()
    for i in range(60):
        time.sleep(max(0.0, start + i - time.time()))
        sent[f"{tag}-{i}"] = send(example, [f"{tag}-{i}"])
    assert finish(example, "1/s for 60 s", sent, cpu=cpu)["waiting"] == 0


def test_bursts_of_20(example: Deployment) -> None:
    tag, sent = "bur" + uuid.uuid4().hex[:6], {}
    cpu = example.cpu_seconds()
    for b in range(4):
        time.sleep(random.uniform(15, 20))
        bodies = [f"{tag}-{b * 20 + i}" for i in range(20)]
        at = send(example, bodies)
        sent.update(dict.fromkeys(bodies, at))
    assert finish(example, "bursts of 20 (after 15-20 s quiet)", sent, cpu=cpu)["waiting"] == 0


def test_pause_and_unpause(example: Deployment) -> None:
    """How long the watcher keeps claiming after a pause, and starts after an unpause (printed); every message
    sent meanwhile waits in the queue and ends in a successful run after the unpause."""
    tag, sent = "pau" + uuid.uuid4().hex[:6], {}
    cancelled = example.log_text("triggerer").count("Trigger cancelled")
    paused_at = time.time()
    example.set_paused(DAG_ID, True)
    wait_for("the triggerer to cancel the paused DAG's watcher",
             lambda: example.log_text("triggerer").count("Trigger cancelled") > cancelled, 180, interval=0.5)
    stop_after = time.time() - paused_at
    for i in range(5):
        sent[f"{tag}-{i}"] = send(example, [f"{tag}-{i}"])
    time.sleep(5)
    with SqlQueueTransport.from_url(example.queue_url) as transport:
        assert transport.peek(example.queue) == 5, "messages were taken while the DAG was paused"
    unpaused_at = time.time()
    example.set_paused(DAG_ID, False)
    wait_for("the unpaused DAG's watcher to emit the waiting messages",
             lambda: len(outcome(example, sent)["event_at"]) == 5, 180, interval=0.5)
    start_after = max(outcome(example, sent)["event_at"].values()) - unpaused_at
    name = (f"5 sent while paused (watcher cancelled {stop_after:.0f} s after the pause, their event "
            f"{start_after:.0f} s after the unpause)")
    assert finish(example, name, sent, timeout=240)["waiting"] == 0
