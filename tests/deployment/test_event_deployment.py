"""Event-driven DAG runs on a real Airflow deployment (issue 17): every message sent with the CLI is in a
finished DAG run, whatever the burst shape, across a triggerer SIGKILL.

One deployment (LocalExecutor, metadata on a fresh PostgreSQL database) serves every scenario in turn; each
scenario counts its own messages by identity (a unique body per message) from the metadata database and the
table the DAG's task writes, and adds a row to the figures table printed at the end.
"""

from __future__ import annotations

import json
import signal
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from airflow_sqlqueue.transport import SqlQueueTransport
from airflow_sqlqueue.transport.wire.headers import TIME_SENT, parse_wire_time
from tests.deployment.harness import AIRFLOW_FALSE_ALARMS, BIN, PG_URL, Deployment, figures_table, percentile, wait_for

pytestmark = [pytest.mark.deployment, pytest.mark.timeout(900)]

DAGS = Path(__file__).resolve().parent / "dags"
DAG_ID = "deploy_events"
FIGURES: list[dict[str, Any]] = []
_TAGS: list[str] = []  # every scenario's body prefix, to look for bodies in the logs
#: ERROR lines the scenarios cause on purpose (``check_logs``), each with its cause.
EVENT_ALLOWED_ERRORS = [*AIRFLOW_FALSE_ALARMS]
#: How long a scenario may take to have every message handled (a few event intervals, on 2 busy cores).
HANDLE_TIMEOUT = 120


@pytest.fixture(scope="module")
def events_deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    schema = "d_" + uuid.uuid4().hex[:10]
    queue, handled = f'"{schema}"."events"', f'"{schema}"."handled"'
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
        conn.execute(f"CREATE TABLE {handled} (id uuid, body text, run_id text, at timestamptz DEFAULT now())")
    deployment = Deployment(tmp_path_factory.mktemp("deploy"), [DAGS / "deploy_events.py"],
                            env={"SQLQUEUE_DEPLOY_QUEUE": queue, "SQLQUEUE_DEPLOY_HANDLED": handled},
                            connections={"sqlqueue_default": PG_URL})
    deployment.queue, deployment.handled = queue, handled  # type: ignore[attr-defined]
    try:
        with deployment:
            with SqlQueueTransport.from_url(PG_URL) as transport:
                transport.create_queues([queue, f'"{schema}"."error"'])
            deployment.wait_parsed([DAG_ID])
            deployment.set_paused(DAG_ID, False)
            yield deployment
    finally:
        print("\n" + figures_table(FIGURES))
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


def sqlqueue(deployment: Deployment, *args: str, input: str | None = None,
             conn_id: str = "sqlqueue_default") -> dict[str, Any]:
    """Run the ``sqlqueue`` CLI on a connection stored in the metadata database (``--conn-id``)."""
    command, rest = args[0], args[1:]
    result = deployment.run([str(BIN / "sqlqueue"), "--json", command, "--conn-id", conn_id,
                             *rest], input=input)
    return json.loads(result.stdout.strip().splitlines()[-1]) if result.stdout.strip() else {}


class Scenario:
    """Messages of one scenario: a unique body each, the time each send returned."""

    def __init__(self, deployment: Deployment, name: str) -> None:
        self.deployment = deployment
        self.name = name
        self.tag = f"{name}-{uuid.uuid4().hex[:6]}"
        _TAGS.append(self.tag)
        self.sent_at: dict[str, float] = {}

    def send(self, n: int) -> None:
        bodies = [f"{self.tag}-{len(self.sent_at) + i}" for i in range(n)]
        out = sqlqueue(self.deployment, "send", self.deployment.queue, input="\n".join(bodies) + "\n")
        assert out["sent"] == n
        now = time.time()
        self.sent_at.update((body, now) for body in bodies)

    def handled(self) -> list[tuple[str, str, str, str]]:
        """(id, body, run_id, run state) of this scenario's messages handled by a run."""
        with psycopg.connect(PG_URL) as conn:
            rows = conn.execute(f"SELECT id::text, body, run_id FROM {self.deployment.handled} "  # noqa: S608
                                "WHERE body LIKE %s", (self.tag + "-%",)).fetchall()
        states = dict(self.deployment.query("SELECT run_id, state FROM dag_run WHERE dag_id = %s", (DAG_ID,)))
        return [(i, b, r, states.get(r, "")) for i, b, r in rows]

    def all_handled(self) -> bool:
        done = {body for _, body, _, state in self.handled() if state == "success"}
        return done >= set(self.sent_at)

    def wait(self, timeout: float = HANDLE_TIMEOUT) -> dict[str, Any]:
        try:
            wait_for(f"the {len(self.sent_at)} messages of {self.name} to be handled by finished runs",
                     self.all_handled, timeout, interval=1, hint=self.deployment.where_logs())
        finally:
            row = self.figures()
            FIGURES.append(row)
            print(row)
        return row

    def figures(self) -> dict[str, Any]:
        handled = self.handled()
        ids_by_body: dict[str, set[str]] = {}
        for message_id, body, _, _ in handled:
            ids_by_body.setdefault(body, set()).add(message_id)
        assert all(len(ids) == 1 for ids in ids_by_body.values()), "a duplicate carried another Id"
        events = self.deployment.query(
            "SELECT e.id, e.extra FROM asset_event e WHERE e.extra::text LIKE %s", (f"%{self.tag}-%",))
        event_ids = [e[0] for e in events]
        runs = self.deployment.query(
            "SELECT DISTINCT r.run_id, r.start_date FROM dagrun_asset_event d JOIN dag_run r ON r.id = d.dag_run_id "
            "WHERE d.event_id = ANY(%s)", (event_ids,))
        started = {run_id: start.timestamp() for run_id, start in runs if start is not None}
        sent_at = dict(self.sent_at)  # upper bounds; the TimeSent header the CLI wrote is exact
        for _, extra in events:
            for message in (extra or {}).get("payload", {}).get("messages", []):
                stamp = (message.get("headers") or {}).get(TIME_SENT)
                if stamp and message.get("body") in sent_at:
                    sent_at[message["body"]] = parse_wire_time(stamp).timestamp()
        first_run: dict[str, float] = {}
        for _, body, run_id, _ in handled:
            if run_id in started:
                first_run[body] = min(first_run.get(body, float("inf")), started[run_id])
        latency = sorted(first_run[b] - sent_at[b] for b in first_run if b in sent_at)
        done = {body for _, body, _, state in handled if state == "success"}
        counts = Counter(body for _, body, _, _ in handled)
        return {"scenario": self.name, "sent": len(self.sent_at), "asset events": len(events), "DAG runs": len(runs),
                "handled": len(done & set(self.sent_at)), "waiting": len(set(self.sent_at) - done),
                "duplicates": sum(c - 1 for c in counts.values()),
                "send->run start p50 s": percentile(latency, 50) or 0.0,
                "p95 s": percentile(latency, 95) or 0.0}


def check(row: dict[str, Any], *, duplicates_allowed: bool = False) -> None:
    assert row["waiting"] == 0 and row["handled"] == row["sent"], row
    if not duplicates_allowed:
        assert row["duplicates"] == 0, row


def test_burst_of_1(events_deployment: Deployment) -> None:
    scenario = Scenario(events_deployment, "burst of 1")
    scenario.send(1)
    check(scenario.wait())


@pytest.mark.smoke  # the default run keeps this one test of the suite
def test_burst_of_20(events_deployment: Deployment) -> None:
    scenario = Scenario(events_deployment, "burst of 20")
    scenario.send(20)
    check(scenario.wait())


def test_burst_of_500(events_deployment: Deployment) -> None:
    scenario = Scenario(events_deployment, "burst of 500")
    scenario.send(500)
    check(scenario.wait())


def test_spaced_messages(events_deployment: Deployment) -> None:
    scenario = Scenario(events_deployment, "spaced (6 sends of 1, 1 s apart)")
    for _ in range(6):
        scenario.send(1)
        time.sleep(1)
    check(scenario.wait())


def test_paused_then_unpaused(events_deployment: Deployment) -> None:
    scenario = Scenario(events_deployment, "30 while paused, then unpaused")
    stopped = events_deployment.log_text("triggerer").count("Trigger cancelled")
    events_deployment.set_paused(DAG_ID, True)
    try:  # the triggerer stops the watcher at its next check; messages sent before that are emitted
        wait_for("the triggerer to stop the paused DAG's watcher",
                 lambda: events_deployment.log_text("triggerer").count("Trigger cancelled") > stopped, 120)
        scenario.send(30)
        time.sleep(5)
        with SqlQueueTransport.from_url(PG_URL) as transport:
            assert transport.peek(events_deployment.queue) == 30, "messages were taken while the DAG was paused"
        assert not scenario.handled(), "a paused DAG ran"
    finally:
        events_deployment.set_paused(DAG_ID, False)
    check(scenario.wait())


def test_triggerer_sigkill_mid_burst(events_deployment: Deployment) -> None:
    scenario = Scenario(events_deployment, "triggerer SIGKILL mid-burst (3 x 100)")
    scenario.send(100)
    wait_for("the first event of the burst", lambda: events_deployment.query(
        "SELECT 1 FROM asset_event WHERE extra::text LIKE %s", (f"%{scenario.tag}-%",)), 60, interval=0.2)
    scenario.send(100)
    events_deployment.kill("triggerer", signal.SIGKILL)
    scenario.send(100)
    events_deployment.restart("triggerer")
    check(scenario.wait(), duplicates_allowed=True)


def test_no_message_body_in_the_component_logs(events_deployment: Deployment) -> None:
    """Bodies (personal data, maybe) never reach the logs: ids, counts and sizes only; and no ERROR line that is not
    an error (issue 29). Every log: the components', the task attempts', the DAG processor's."""
    events_deployment.check_logs(_TAGS, allow=EVENT_ALLOWED_ERRORS)


@pytest.mark.xfail(strict=False, reason=(
    "Airflow 3.3.2: the triggerer's supervisor builds its in-process execution API on the first connection lookup "
    "from a trigger (a connection in the metadata database); on a busy machine that takes 30-70 s, during which "
    "the supervisor reads nothing and logs 'event loop appears deadlocked'. The runner may not read the metadata "
    "database itself (Airflow blocks it). Workaround: the connection as AIRFLOW_CONN_<ID> in the triggerer's "
    "environment, or a secrets backend"))
def test_triggerer_starts_clean(events_deployment: Deployment) -> None:
    assert "appears deadlocked" not in events_deployment.log_text("triggerer")
