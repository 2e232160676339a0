"""The task of the ``sqlqueue_error_queue_batch_retry`` DAG: retry failed messages in controlled batches on a
connection the deployment configures, with progress and audit rows the "SQL Queues" page reads back.

The run's params choose only values: the connection (one the deployment's configuration names), a group filter
or a selection of positions, the batch size, ramp, rate limit and redirects. The queues written to are the
configured queues of that connection (never the error queue); a redirect must name two of them. Anything else
fails the task at once with the reason, having changed nothing. A cancel request (a ``cancel`` row, written by the
page) stops the run before its next batch; the task then fails with "cancelled", so the DAG run shows it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from airflow.sdk.exceptions import AirflowFailException

from airflow_sqlqueue import metrics
from airflow_sqlqueue.transport import SqlQueueTransport
from airflow_sqlqueue.transport.errorqueue.batches import BatchPlan, BatchRecord
from airflow_sqlqueue.transport.errorqueue.previews import FailedFilter, Position

from . import retry_progress
from .config import ConnectionConfig, resolve_queues, retry_targets
from .tasks import BadConfigurationError, _allowed, configuration, transport_for

log = logging.getLogger(__name__)
DAG_ID = "sqlqueue_error_queue_batch_retry"
MAX_POSITIONS = 100_000
PLAN_KEYS = ("batch_size", "ramp_start", "rate_per_second", "max_messages")
FILTER_KEYS = ("failed_q", "exception_type", "message_type")


class RetryCancelledError(AirflowFailException):
    """A user cancelled the run (it stopped between two batches)."""


def plan_of(params: dict[str, Any]) -> BatchPlan:
    """The batch plan from the params; BadConfigurationError names the wrong one."""
    try:
        return BatchPlan(**{k: params[k] for k in PLAN_KEYS if params.get(k) is not None})
    except (TypeError, ValueError) as exc:
        raise BadConfigurationError(f"param {exc}") from None


def where_of(params: dict[str, Any]) -> FailedFilter:
    """The group filter from the params (``failed_q``, ``exception_type``, ``message_type``, and ``missing``: the
    fields a message must not have); BadConfigurationError names the wrong one."""
    missing = params.get("missing") or []
    if not isinstance(missing, list) or not all(isinstance(m, str) for m in missing):
        raise BadConfigurationError(f"param missing must be a list of field names ({', '.join(FILTER_KEYS)})")
    try:
        return FailedFilter(*(params.get(k) or None for k in FILTER_KEYS), missing=frozenset(missing))
    except ValueError as exc:
        raise BadConfigurationError(f"param {exc}") from None


def positions_of(params: dict[str, Any]) -> list[Position] | None:
    """The ``positions`` param (``[{"seq", "id"}]``) as positions; None when not given."""
    raw = params.get("positions")
    if not raw:
        return None
    if not isinstance(raw, list) or len(raw) > MAX_POSITIONS:
        raise BadConfigurationError(f"param positions must be a list of at most {MAX_POSITIONS:,} "
                                    '{"seq": n, "id": "..."} objects')
    out = []
    for item in raw:
        seq = item.get("seq") if isinstance(item, dict) else None
        ident = item.get("id") if isinstance(item, dict) else None
        if isinstance(seq, bool) or not isinstance(seq, int) or seq < 1 or not isinstance(ident, str) or not ident:
            raise BadConfigurationError(f'param positions: each item must be {{"seq": n >= 1, "id": "..."}}, got '
                                        f"{str(item)[:100]!r}")
        out.append(Position(seq, ident))
    return out


def targets_of(conn: ConnectionConfig, transport: SqlQueueTransport,
               redirects: Any) -> tuple[str, list[str], dict[str, str]]:
    """(error queue, the queues a retry may write to, redirects in canonical names); a redirect outside the
    configured queues is refused naming it."""
    error_queue, targets = retry_targets(conn, transport)
    queues = resolve_queues(conn, transport)
    if redirects in (None, {}):
        return error_queue, targets, {}
    if not isinstance(redirects, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                   for k, v in redirects.items()):
        raise BadConfigurationError('param redirects must be an object {"from queue": "to queue"}')
    same = transport.dialect.same_queue
    canonical = {}
    for source, destination in redirects.items():  # any spelling of a configured queue names it
        try:
            source_address, destination_address = transport.address(source), transport.address(destination)
        except ValueError as exc:
            raise BadConfigurationError(f"param redirects: {exc}") from None
        source_name = next((q for q in queues if same(transport.address(q), source_address)), None)
        destination_name = next((q for q in targets if same(transport.address(q), destination_address)), None)
        if source_name is None:
            raise BadConfigurationError(f"param redirects: {source!r} is not a queue of connection "
                                        f"{conn.conn_id!r} (configured: {', '.join(queues)})")
        if destination_name is None:
            raise BadConfigurationError(f"param redirects: {destination!r} is not a queue a retry may write to on "
                                        f"connection {conn.conn_id!r} (allowed: {', '.join(targets)})")
        canonical[source_name] = destination_name
    return error_queue, targets, canonical


def to_do(transport: SqlQueueTransport, error_queue: str, where: FailedFilter, positions: list[Position] | None,
          plan: BatchPlan) -> int:
    """How many messages the run will look at: the selection, or the matching groups' counts."""
    if positions is not None:
        total = len(set(positions))
    else:
        spellings = transport.errors(error_queue).failed_q_spellings(where.failed_q) if where.failed_q else []
        rest = replace(where, failed_q=None)  # FailedQ in any spelling of the queue
        try:  # the error groups summary, read as the page reads it: a few rows, not a pass over the error queue
            groups, _ = transport.errors(error_queue).summary_groups(complete=True)  # every row, not a page's read
        except Exception:  # noqa: BLE001 - no right to write the summary tables: count from the queue
            log.warning("error groups summary of %s cannot be used; counting from the queue", error_queue)
            groups = transport.failed_groups(error_queue)
        total = sum(g["count"] for g in groups
                    if rest.matches(g) and (not spellings or g.get("failed_q") in spellings))
    return total if plan.max_messages is None else min(total, plan.max_messages)


def run(params: dict[str, Any] | None, run_id: str, started_by: str | None) -> dict[str, Any]:
    """Retry as the params say; each batch recorded as a progress row; the summary (XCom) as the operator's."""
    params = params or {}
    conn_id = params.get("conn_id")
    if not isinstance(conn_id, str) or not conn_id:
        raise BadConfigurationError("param conn_id: name the connection (one of the maintenance configuration)")
    _allowed(conn_id, "param conn_id")
    config = configuration({})  # the deployment's configuration: a run's conf may not replace it here
    conn = config.connection(conn_id)
    plan = plan_of(params)
    positions = positions_of(params)
    where = where_of(params)
    with transport_for(conn_id, conn.error_queue) as transport, \
            transport_for(config.samples_conn_id(conn_id)) as store:
        error_queue, targets, redirects = targets_of(conn, transport, params.get("redirects"))
        errors = transport.errors(error_queue, allowed=targets, redirects=redirects)

        def note(kind: str, **fields: Any) -> None:
            retry_progress.record(store, run_id, conn_id, error_queue, kind, **fields)

        earlier = retry_progress.run_rows(store, run_id)  # a retry of the task goes on numbering the batches
        first_batch = max((r["batch"] for r in earlier if r["kind"] == "batch"), default=0)
        if not any(r["kind"] == "start" for r in earlier):
            note("start", user_name=started_by, detail={
                "plan": {k: getattr(plan, k) for k in PLAN_KEYS},
                "selection": {"positions": len(positions)} if positions is not None else
                {**{k: v for k, v in zip(FILTER_KEYS, (where.failed_q, where.exception_type, where.message_type),
                                         strict=True) if v},
                 **({"missing": sorted(where.missing)} if where.missing else {})},
                "redirects": redirects, "allowed": targets,
                "to_do": to_do(transport, error_queue, where, positions, plan)})
        log.info("retrying from %s on %s to %s (redirects %s), plan %s", error_queue, conn_id, targets, redirects,
                 plan)
        stop: Callable[[], bool] = lambda: retry_progress.cancel_requested(store, run_id)  # noqa: E731
        done = [0]
        began = time.time()  # no later than the rate limit's own origin

        def on_batch(record: BatchRecord) -> None:
            done[0] += record.total_returned
            for queue, count in record.returned.items():
                metrics.incr("retried", conn_id, queue, count)
            note("batch", batch=first_batch + record.batch, looked_at=record.looked_at, returned=record.returned,
                 left=record.left, detail={"run_started_at": began, "started_at": record.started_at,
                                                    "finished_at": record.finished_at},
                 user_name=started_by, message_ids=record.returned_ids)
            log.info("batch %d: %d of %d returned (%s), %d left; %d returned so far", first_batch + record.batch,
                     record.total_returned, record.looked_at, record.returned, len(record.left), done[0])

        try:
            summary = errors.retry_in_batches(plan, where=where, on_batch=on_batch, should_stop=stop,
                                              positions=positions)
        except Exception as exc:
            note("end", detail={"state": "failed", "error": type(exc).__name__})
            raise
        note("end", detail={"state": "cancelled" if summary.cancelled else "done"})
    result = summary.as_dict()
    log.info("returned %d messages from %s in %d batches%s: %s", result["total_returned"], error_queue,
             len(result["batches"]), " (cancelled)" if result["cancelled"] else "", result["returned"])
    if summary.cancelled:
        raise RetryCancelledError(f"cancelled from the SQL Queues page after {len(result['batches'])} batches "
                                  f"({result['total_returned']} messages returned); the rest stay in {error_queue}")
    return result
