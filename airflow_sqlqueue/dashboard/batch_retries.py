"""Batched retries from the page: start a run of the ``sqlqueue_error_queue_batch_retry`` DAG, list the runs of a
connection with their progress, and cancel one between two batches.

The page sends values only (a group filter or positions, batch size, ramp, rate, redirects); the connection is
one of the configuration and the queues a retry may write to (redirect targets too) are its configured queues,
checked here before the run is created and again by the task. The run is created through Airflow's own
``trigger_dag`` with the page's user as the triggering user; progress comes from the progress rows the task writes
(:mod:`airflow_sqlqueue.maintenance.retry_progress`) and the DAG run's state from Airflow's metadata database.
"""

from __future__ import annotations

from typing import Any

from airflow_sqlqueue.maintenance import retry_progress
from airflow_sqlqueue.maintenance.config import ConnectionConfig, MaintenanceConfig
from airflow_sqlqueue.maintenance.retry_batches import (
    DAG_ID,
    FILTER_KEYS,
    PLAN_KEYS,
    plan_of,
    positions_of,
    targets_of,
    where_of,
)
from airflow_sqlqueue.maintenance.tasks import BadConfigurationError
from airflow_sqlqueue.transport import SqlQueueTransport

from .queues import canonical

#: States of a run that will do nothing more.
FINISHED = {"done", "cancelled", "failed"}
RECENT = 20


class RunNotFoundError(LookupError):
    """No batched-retry run with that id on that connection."""


class RunFinishedError(ValueError):
    """The run already ended: there is nothing to cancel."""


def retry_targets(conn: ConnectionConfig, transport: SqlQueueTransport) -> dict[str, Any]:
    """What the form may offer: the error queue, the configured queues (redirect sources) and those a retry
    may write to (redirect targets)."""
    error_queue, targets, _ = targets_of(conn, transport, None)
    return {"error_queue": canonical(transport, error_queue), "queues": [canonical(transport, q) for q in targets]}


def checked_conf(conn: ConnectionConfig, transport: SqlQueueTransport, request: dict[str, Any]) -> dict[str, Any]:
    """The DAG run's conf from the page's request, refused (ValueError with the reason) unless every value is
    valid and every queue is one of the configuration."""
    try:
        plan = plan_of(request)
        _, _, redirects = targets_of(conn, transport, request.get("redirects") or {})
        positions = positions_of(request)
        where = where_of(request)
    except BadConfigurationError as exc:
        raise ValueError(str(exc)) from None
    conf: dict[str, Any] = {"conn_id": conn.conn_id, "redirects": redirects,
                            **{k: getattr(plan, k) for k in PLAN_KEYS}}
    if positions:
        conf["positions"] = [{"seq": p.seq, "id": p.id} for p in positions]
    else:
        conf.update({k: request.get(k) or None for k in FILTER_KEYS})
        conf["missing"] = sorted(where.missing)
    return conf


def run_path(run_id: str) -> str:
    """Where the Airflow UI shows a run of the batched-retry DAG, relative to the UI's base URL."""
    from urllib.parse import quote

    return f"dags/{DAG_ID}/runs/{quote(run_id, safe='')}"


def dag_paused() -> bool | None:
    """Whether the batched-retry DAG is paused (Airflow pauses a DAG it sees for the first time); None when the
    DAG is not in the metadata database."""
    from airflow.models.dag import DagModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        return session.scalars(select(DagModel.is_paused).where(DagModel.dag_id == DAG_ID)).one_or_none()


def unpause() -> None:
    """Unpause the batched-retry DAG (the caller checked the user may change it)."""
    from airflow.models.dag import DagModel
    from airflow.utils.session import create_session
    from sqlalchemy import update

    with create_session() as session:
        session.execute(update(DagModel).where(DagModel.dag_id == DAG_ID).values(is_paused=False))


PAUSED_HINT = (f"the DAG {DAG_ID} is paused (Airflow pauses a DAG it has just found), so this run waits: "
               "unpause the DAG in Airflow (or ask someone who may) and the run starts")


def start(conn: ConnectionConfig, transport: SqlQueueTransport, request: dict[str, Any], user_name: str) -> str:
    """Create the DAG run (queued for the scheduler); its run id."""
    from airflow.api.common.trigger_dag import trigger_dag
    from airflow.utils.types import DagRunTriggeredByType

    conf = checked_conf(conn, transport, request)
    run = trigger_dag(DAG_ID, triggered_by=DagRunTriggeredByType.UI, triggering_user_name=user_name, conf=conf,
                      replace_microseconds=False)
    if run is None:
        raise ValueError(f"Airflow did not create a run of {DAG_ID}")
    return str(run.run_id)


def _dag_runs(conn_id: str) -> dict[str, dict[str, Any]]:
    """The latest DAG runs of the batched-retry DAG on ``conn_id`` (from Airflow's metadata database)."""
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        rows = session.scalars(select(DagRun).where(DagRun.dag_id == DAG_ID).order_by(DagRun.id.desc())
                               .limit(RECENT * 5)).all()
        return {r.run_id: {"run_id": r.run_id, "dag_run_state": str(r.state.value if hasattr(r.state, "value")
                                                                     else r.state),
                           "triggered_by": r.triggering_user_name, "queued_at": r.queued_at.isoformat()
                           if r.queued_at else None, "conf": r.conf or {}}
                for r in rows if isinstance(r.conf, dict) and r.conf.get("conn_id") == conn_id}


def runs(config: MaintenanceConfig, conn_id: str, store: SqlQueueTransport) -> list[dict[str, Any]]:
    """The recent runs on ``conn_id``, newest first, each with its progress (see ``retry_progress.summarize``)."""
    dag_runs = _dag_runs(conn_id)
    paused = bool(dag_paused())
    ids = list(dict.fromkeys([*dag_runs, *retry_progress.recent_runs(store, conn_id, RECENT)]))[:RECENT]
    out = []
    for run_id in ids:
        progress = retry_progress.summarize(retry_progress.run_rows(store, run_id))
        dag_run = dag_runs.get(run_id, {})
        if progress["state"] == "queued" and dag_run.get("dag_run_state") in ("failed", "success"):
            progress["state"] = "failed"  # ended before the task recorded anything
        waiting = progress["state"] == "queued" and dag_run.get("dag_run_state") == "queued"
        out.append({"run_id": run_id, "dag_run_state": dag_run.get("dag_run_state"),
                    "triggered_by": dag_run.get("triggered_by") or progress["started_by"],
                    "queued_at": dag_run.get("queued_at"), "run_path": run_path(run_id),
                    "hint": PAUSED_HINT if waiting and paused else None, **progress})
    return out


def cancel(config: MaintenanceConfig, conn_id: str, error_queue: str, store: SqlQueueTransport, run_id: str,
           user_name: str) -> dict[str, Any]:
    """Ask run ``run_id`` to stop before its next batch (a ``cancel`` row); a run not started yet is also failed
    in Airflow, so the scheduler never starts it. RunNotFoundError, RunFinishedError as the case may be."""
    dag_runs = _dag_runs(conn_id)
    rows = retry_progress.run_rows(store, run_id)
    if run_id not in dag_runs and not rows:
        raise RunNotFoundError(f"no batched retry {run_id!r} on connection {conn_id!r}")
    state = retry_progress.summarize(rows)["state"]
    if state in FINISHED:
        raise RunFinishedError(f"run {run_id!r} already ended ({state}): there is nothing to cancel")
    retry_progress.record(store, run_id, conn_id, error_queue, "cancel", user_name=user_name)
    if state == "queued" and _fail_queued(run_id):
        retry_progress.record(store, run_id, conn_id, error_queue, "end", detail={"state": "cancelled"})
    return {"run_id": run_id, "cancel_requested_by": user_name, "state_before": state}


def _fail_queued(run_id: str) -> bool:
    """A run still queued is marked failed in Airflow's metadata database (the scheduler will not start it);
    one that started meanwhile stops at its next batch on the cancel row. Whether it was still queued."""
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from airflow.utils.state import DagRunState
    from sqlalchemy import select

    with create_session() as session:
        run = session.scalars(select(DagRun).where(DagRun.dag_id == DAG_ID, DagRun.run_id == run_id)).one_or_none()
        if run is not None and run.state == DagRunState.QUEUED:
            run.set_state(DagRunState.FAILED)
            return True
        return False
