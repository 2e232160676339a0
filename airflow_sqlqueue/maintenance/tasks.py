"""Task bodies of the maintenance DAGs: each takes the run's params and returns something JSON-serialisable.

The DAG files in ``example_dags/`` only wire these together (dynamic task mapping over ``(conn_id, queue)`` pairs).
"""

from __future__ import annotations

import copy
import importlib
import logging
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from airflow.sdk import BaseNotifier
from airflow.sdk.exceptions import AirflowFailException, AirflowNotFoundException, AirflowSkipException

from airflow_sqlqueue import metrics
from airflow_sqlqueue.cli.output import table
from airflow_sqlqueue.hooks.sqlqueue import SqlQueueHook
from airflow_sqlqueue.transport import SqlQueueTransport
from airflow_sqlqueue.transport.common.errors import InvalidAddressError
from airflow_sqlqueue.transport.errorqueue.groups import FailureGroups, failure_of, failure_selector
from airflow_sqlqueue.transport.wire import headers as h

from . import health, throughput
from .config import (
    MaintenanceConfig,
    MaintenanceConfigError,
    check_connection_allowed,
    load_config,
    resolve_queues,
    thresholds_for,
)
from .config import retry_targets as config_retry_targets

log = logging.getLogger(__name__)
#: Whole-purge attempts after the transport's own deadlock retries are exhausted.
PURGE_DEADLOCK_ATTEMPTS = 3
BROWSE_PAGE = 1000


class QueueHealthError(AirflowFailException):
    """A queue crossed a health threshold."""


class SchemaFindingsError(AirflowFailException):
    """Schema or index findings remain (not retried: a retry would find the same)."""


class BadConfigurationError(AirflowFailException):
    """The maintenance configuration or a param is wrong (not retried: a retry would read the same)."""


def configuration(params: dict[str, Any] | None) -> MaintenanceConfig:
    """The run's configuration; a malformed one fails the task at once, with the message naming the key."""
    try:
        return load_config(params)
    except MaintenanceConfigError as exc:
        raise BadConfigurationError(str(exc)) from None


def _allowed(conn_id: str, what: str) -> None:
    """Fail the task unless the deployment's configuration names ``conn_id`` (a run's conf cannot add one)."""
    try:
        check_connection_allowed(conn_id, what)
    except MaintenanceConfigError as exc:
        raise BadConfigurationError(str(exc)) from None


@contextmanager
def transport_for(conn_id: str, error_queue: str = "error") -> Iterator[SqlQueueTransport]:
    """The transport of an Airflow connection, closed afterwards."""
    hook = SqlQueueHook(conn_id, error_queue=error_queue)
    try:
        try:
            transport = hook.transport
        except AirflowNotFoundException:
            raise BadConfigurationError(
                f"connection {conn_id!r} is not defined in Airflow: add it, or correct the connection ids in the "
                "maintenance configuration or the params") from None
        yield transport
    finally:
        hook.close()


def gathered(results: Sequence[Any]) -> list[Any]:
    """The results of mapped tasks as a list, read in one slice. Iterating Airflow's lazy sequence asks for one
    item past the end, which the task SDK logs as ``[error] XCom not found ... offset=N`` on every run."""
    return list(results[:])


def format_table(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    """Dicts as a plain-text table for the task log (``None`` shown as ``-``), as the CLI prints them."""
    return table(columns, [["-" if row.get(c) is None else row.get(c) for c in columns] for row in rows])


# -- targets -------------------------------------------------------------------------------------------
def find_targets(params: dict[str, Any] | None) -> list[dict[str, Any]]:
    """``[{"conn_id", "queue", "max_depth", "max_age_seconds", "error_queue"}]`` for every configured or
    discovered queue."""
    config = configuration(params)
    targets: list[dict[str, Any]] = []
    for conn in config.connections:
        with transport_for(conn.conn_id, conn.error_queue) as transport:
            try:
                queues = resolve_queues(conn, transport)
                limits = [thresholds_for(config, conn, queue, transport, params) for queue in queues]
            except InvalidAddressError as exc:
                raise BadConfigurationError(f"{config.source}: connection {conn.conn_id!r}: queues: {exc}") from None
            error_queue = transport.name(conn.error_queue)
            targets += [{"conn_id": conn.conn_id, "queue": queue, "max_depth": limit.get("max_depth"),
                         "max_age_seconds": limit.get("max_age_seconds"), "error_queue": error_queue}
                        for queue, limit in zip(queues, limits, strict=True)]
    log.info("configuration from %s: %d queues on %s", config.source, len(targets),
             ", ".join(c.conn_id for c in config.connections))
    if targets:
        log.info("queues:\n%s", format_table(targets, ("conn_id", "queue", "max_depth", "max_age_seconds")))
    else:
        log.warning("no queues found: nothing to do (check 'connections', 'schemas', 'include' and 'exclude')")
    return targets


# -- purge ---------------------------------------------------------------------------------------------
def purge_queue(target: dict[str, Any], params: dict[str, Any] | None) -> dict[str, Any]:
    """Purge expired messages of one queue in batches; deadlocks are logged as warnings and retried."""
    batch_size = (params or {}).get("batch_size") or configuration(params).purge_batch_size
    conn_id, queue = target["conn_id"], target["queue"]
    with transport_for(conn_id) as transport:
        committed: list[int] = []  # rows of batches already committed (kept when a later batch deadlocks)
        for attempt in range(1, PURGE_DEADLOCK_ATTEMPTS + 1):
            try:
                transport.purge_expired(queue, batch_size=int(batch_size), progress=committed.append)
                break
            except Exception as exc:
                if not transport.dialect.is_deadlock(exc) or attempt == PURGE_DEADLOCK_ATTEMPTS:
                    raise
                log.warning("deadlock purging %s on %s after %d rows, retrying (%d/%d): %s", queue, conn_id,
                            sum(committed), attempt, PURGE_DEADLOCK_ATTEMPTS, exc)
                time.sleep(0.5 * attempt)
        total = sum(committed)
    log.info("purged %d expired messages from %s on %s (batches of %d)", total, queue, conn_id, batch_size)
    return {"conn_id": conn_id, "queue": queue, "purged": total}


def purge_inboxes(params: dict[str, Any] | None) -> dict[str, int]:
    """Delete the inbox rows (``handle_once``) older than ``inbox_retention_days`` on every configured connection
    that has an inbox table; ``{conn_id: rows purged}``. ``inbox_retention_days: null`` keeps them."""
    config = configuration(params)
    days = config.inbox_retention_days
    if days is None:
        log.info("inbox_retention_days is null: inbox rows are kept")
        return {}
    batch_size = int((params or {}).get("batch_size") or config.purge_batch_size)
    out: dict[str, int] = {}
    for conn in config.connections:
        with transport_for(conn.conn_id, conn.error_queue) as transport:
            out[conn.conn_id] = transport.purge_inbox(days * 86400, batch_size=batch_size)
    log.info("inbox rows older than %s days purged: %s", days, out)
    return out


def purge_report(results: Sequence[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """The per-queue counts as a table in the log; ``{conn_id: {queue: purged}}``."""
    results = gathered(results)
    log.info("expired messages purged:\n%s", format_table(results, ("conn_id", "queue", "purged")))
    log.info("total purged: %d from %d queues", sum(r["purged"] for r in results), len(results))
    out: dict[str, dict[str, int]] = {}
    for r in results:
        out.setdefault(r["conn_id"], {})[r["queue"]] = r["purged"]
    return out


# -- schema and index check ----------------------------------------------------------------------------
def _finding_rows(conn_id: str, findings: Sequence[Any]) -> list[dict[str, Any]]:
    return [{"conn_id": conn_id, "queue": f.queue, "code": f.code, "repairable": f.repairable,
             "message": f.message, **({"not_checked": True} if f.not_checked else {})} for f in findings]


def check_queue(target: dict[str, Any], params: dict[str, Any] | None) -> dict[str, Any]:
    """Check one queue; with the ``repair`` param, repair what can be and check again.

    Returns ``{"conn_id", "queue", "found": [...], "remaining": [...], "repaired": [codes]}``.
    """
    repair = bool((params or {}).get("repair"))
    conn_id, queue = target["conn_id"], target["queue"]
    with transport_for(conn_id) as transport:
        found = _finding_rows(conn_id, transport.check(queue))
        remaining = found
        if repair and any(f["repairable"] for f in found):
            remaining = _finding_rows(conn_id, transport.check(queue, repair=True))
    left = {f["code"] for f in remaining}
    repaired = sorted({f["code"] for f in found} - left)
    columns = ("queue", "code", "repairable", "message")
    if found:
        log.warning("%s on %s: %d findings:\n%s", queue, conn_id, len(found), format_table(found, columns))
    if repaired:
        log.warning("%s on %s: repaired %s", queue, conn_id, ", ".join(repaired))
    if not remaining:
        log.info("%s on %s: no findings%s", queue, conn_id, " left" if found else "")
    return {"conn_id": conn_id, "queue": queue, "found": found, "remaining": remaining, "repaired": repaired}


def check_report(results: Sequence[dict[str, Any]], params: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Every finding as one table (status ``repaired``, ``open``, or ``not checked`` for what the engine did not let
    the check look at); fail if open ones remain and asked to."""
    results = gathered(results)
    rows = []
    for r in results:
        open_codes = {f["code"] for f in r["remaining"]}
        rows += [{**f, "status": "not checked" if f.get("not_checked") else
                  "open" if f["code"] in open_codes else "repaired"} for f in r["found"]]
        rows += [{**f, "status": "not checked" if f.get("not_checked") else "open"} for f in r["remaining"]
                 if f["code"] not in {x["code"] for x in r["found"]}]
    open_rows = [r for r in rows if r["status"] == "open"]
    if not rows:
        log.info("no findings on %d queues", len(results))
        return rows
    text = format_table(rows, ("conn_id", "queue", "code", "repairable", "status", "message"))
    log.warning("%d findings on %d queues (%d open):\n%s", len(rows), len(results), len(open_rows), text)
    if open_rows and (params or {}).get("fail_on_findings", True):
        hint = "" if (params or {}).get("repair") else "; trigger with repair=true to fix the repairable ones"
        raise SchemaFindingsError(f"{len(open_rows)} schema/index findings open: "
                                  + "; ".join(f"{r['queue']}: {r['code']}" for r in open_rows) + hint)
    return rows


# -- queue health --------------------------------------------------------------------------------------
def sample_queue(target: dict[str, Any]) -> dict[str, Any]:
    """Depth and oldest age of one queue, with its thresholds and what crossed them."""
    with transport_for(target["conn_id"]) as transport:
        measured = health.sample(transport, target["queue"])
        sampled_at = time.time()
        sent_position = measured["newest_seq"]  # read once by health.sample: the samples table and the gauge
        error_queue = target.get("error_queue")
        if error_queue and transport.name(error_queue) == measured["queue"]:
            metrics.gauge("error_queue_size", target["conn_id"], measured["queue"], transport.count(error_queue))
    metrics.gauge("queue_depth", target["conn_id"], measured["queue"], measured["depth"])
    if measured["oldest_age_seconds"] is not None:
        metrics.gauge("oldest_message_age_seconds", target["conn_id"], measured["queue"],
                      measured["oldest_age_seconds"])
    limits = {k: target.get(k) for k in ("max_depth", "max_age_seconds")}
    result = {"conn_id": target["conn_id"], **measured, **limits, "breaches": health.breaches(measured, limits),
              "sent_position": sent_position, "sampled_at": sampled_at}
    log.info("%s on %s: depth %d, oldest %s s%s", result["queue"], result["conn_id"], result["depth"],
             result["oldest_age_seconds"], (" - " + "; ".join(result["breaches"])) if result["breaches"] else "")
    return result


def health_report(samples: Sequence[dict[str, Any]], params: dict[str, Any] | None,
                  context: Any = None) -> list[dict[str, Any]]:
    """Log the samples as a table, record them if configured, alert and fail when a threshold is crossed."""
    config = configuration(params)
    samples = throughput.record_throughput(gathered(samples))
    rows = [{**s, "status": "; ".join(s["breaches"]) or "ok"} for s in samples]
    log.info("queue health:\n%s", format_table(
        rows, ("conn_id", "queue", "depth", "oldest_age_seconds", "max_depth", "max_age_seconds", "status")))
    crossed = [s for s in samples if s["breaches"]]
    if crossed and config.alert_callback:  # first: a failure to record must not hold the alert back
        alert(config.alert_callback, {**dict(context or {}), "sqlqueue_breaches": crossed})
    record(config, samples)
    if not crossed:
        return samples
    text = "; ".join(f"{s['queue']} on {s['conn_id']}: {', '.join(s['breaches'])}" for s in crossed)
    if (params or {}).get("on_breach", "fail") == "warn":
        log.warning("thresholds crossed: %s", text)
        return samples
    raise QueueHealthError(f"thresholds crossed: {text}")


def record(config: MaintenanceConfig, samples: Sequence[dict[str, Any]]) -> None:
    """Append the samples of each connection that records them to its samples table (and apply retention)."""
    stores: dict[str, list[dict[str, Any]]] = {}
    for item in samples:
        if config.records_samples(item["conn_id"]):
            stores.setdefault(config.samples_conn_id(item["conn_id"]), []).append(item)
    for store, items in stores.items():
        with transport_for(store) as transport:
            try:
                done = health.record_samples(transport, items, config.health_samples_table,
                                             retention_days=config.health_samples_retention_days)
            except ValueError as exc:
                raise BadConfigurationError(f"{config.source}: {exc}") from None
        log.info("recorded %d samples into %s on %s (%d older than %s days deleted)", done["recorded"],
                 config.health_samples_table, store, done["deleted"], config.health_samples_retention_days)


def alert(path: str, context: dict[str, Any]) -> None:
    """Call the ``alert_callback`` (a function or an Airflow notifier); its failure is logged, never raised."""
    try:
        module, _, name = path.rpartition(".")
        callback = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError) as exc:
        log.error("alert_callback %r cannot be imported: %s", path, exc)
        return
    if isinstance(callback, BaseNotifier):
        callback = copy.copy(callback)  # rendering its templates mutates it: keep the configured one pristine
    try:
        callback(context)
    except Exception:  # noqa: BLE001 - a broken notifier must not hide the breach itself
        log.exception("alert_callback %s failed", path)


# -- provisioning --------------------------------------------------------------------------------------
def provision(params: dict[str, Any]) -> dict[str, Any]:
    """Create the queues (and delayed tables) named by the params; log the DDL; check what was created."""
    conn_id = params.get("conn_id") or "sqlqueue_default"
    _allowed(conn_id, "param conn_id")
    queues = list(params.get("queues") or [])
    delayed = list(params.get("delayed_queues") or [])
    if not queues and not delayed:
        raise AirflowFailException("nothing to create: give 'queues' and/or 'delayed_queues' when triggering")
    with transport_for(conn_id) as transport:
        try:  # every name validated before anything is created
            names = [transport.name(q) for q in queues]
            delayed_names = [transport.name(q) for q in delayed]
        except ValueError as exc:
            raise BadConfigurationError(f"params queues/delayed_queues: {exc}") from None
        script = transport.ddl(names) if names else ""
        script += transport.ddl(delayed_names, delayed=True) if delayed_names else ""
        log.info("DDL for %s:\n%s", conn_id, script)
        if params.get("dry_run"):
            log.warning("dry run: nothing created")
            return {"conn_id": conn_id, "ready": [], "delayed": [], "created": [], "existed": [], "ddl": script}
        existed = [q for q in dict.fromkeys(names + delayed_names) if transport.exists(q)]
        created = transport.create_queues(names) if names else []
        created_delayed = transport.create_queues(delayed_names, delayed=True) if delayed_names else []
        findings = [f for q in created + created_delayed for f in _finding_rows(conn_id, transport.check(q))]
    new = [q for q in dict.fromkeys(created + created_delayed) if q not in existed]
    log.info("queues on %s: created %s; existed already %s", conn_id, ", ".join(new) or "none",
             ", ".join(existed) or "none")
    if findings:
        log.warning("findings on existing tables:\n%s", format_table(findings, ("queue", "code", "message")))
    return {"conn_id": conn_id, "ready": created, "delayed": created_delayed, "created": new, "existed": existed,
            "findings": findings}


# -- error queue ---------------------------------------------------------------------------------------
def error_queues(params: dict[str, Any] | None) -> list[dict[str, Any]]:
    """``[{"conn_id", "error_queue"}]``: the ``conn_id`` param or each configured connection, with the error queue
    the deployment's configuration gives it (an ``error_queue`` param must name that one)."""
    params = params or {}
    config = configuration(params)
    if params.get("conn_id"):
        _allowed(params["conn_id"], "param conn_id")
    conn_ids = [params["conn_id"]] if params.get("conn_id") else [c.conn_id for c in config.connections]
    targets = []
    for conn_id in conn_ids:
        configured = configuration({}).connection(conn_id).error_queue
        asked = params.get("error_queue")
        if asked:
            with transport_for(conn_id, configured) as transport:
                try:
                    same = transport.dialect.same_queue(transport.address(asked), transport.address(configured))
                except ValueError as exc:
                    raise BadConfigurationError(f"param error_queue: {exc}") from None
            if not same:
                raise BadConfigurationError(f"param error_queue: {asked!r} is not the error queue the configuration "
                                            f"gives connection {conn_id!r} ({configured!r})")
        targets.append({"conn_id": conn_id, "error_queue": configured})
    return targets


def retry_targets(conn_id: str, transport: SqlQueueTransport) -> tuple[str, list[str]]:
    """(error queue, the queues a retry may write to on ``conn_id``): the queues the deployment's configuration
    gives the connection (listed, or discovered and filtered), never the error queue; a run's params cannot
    change them."""
    try:
        return config_retry_targets(configuration({}).connection(conn_id), transport)
    except InvalidAddressError as exc:
        raise BadConfigurationError(f"connection {conn_id!r}: queues: {exc}") from None


def list_failed(target: dict[str, Any]) -> dict[str, Any]:
    """Failed messages grouped by ``NServiceBus.FailedQ`` and exception type, as a table in the log."""
    groups = FailureGroups()
    with transport_for(target["conn_id"], target["error_queue"]) as transport:
        errors = transport.errors(target["error_queue"])
        error_queue = errors.name
        for row in errors.rows(BROWSE_PAGE):
            failure = failure_of(row.headers)
            group = groups.add(failure)
            group.setdefault("example_id", str(row.id))
            group.setdefault("example_message", (failure.headers.get(h.EXCEPTION_MESSAGE) or "")[:120])
    result = groups.ordered()
    log.info("%d failed messages in %s on %s:\n%s", groups.total, error_queue, target["conn_id"], format_table(
        result, ("failed_q", "exception_type", "count", "first_failure", "last_failure", "example_message")))
    return {**target, "error_queue": error_queue, "total": groups.total, "groups": result}


def return_failed(target: dict[str, Any], params: dict[str, Any] | None) -> dict[str, Any]:
    """Return the selected failed messages to their source queue (only when the ``retry`` param is true).

    Selection by the params ``failed_q``, ``exception_type`` (full name or class name) and ``message_ids``
    (native Ids or ``NServiceBus.MessageId`` values); none given selects every message.
    """
    params = params or {}
    if not params.get("retry"):
        raise AirflowSkipException("listing only: trigger with retry=true to return the selected messages")
    with transport_for(target["conn_id"], target["error_queue"]) as transport:
        try:
            select = failure_selector(transport.dialect, failed_q=params.get("failed_q"),
                                      exception_type=params.get("exception_type"),
                                      message_ids=params.get("message_ids"))
        except ValueError as exc:
            raise BadConfigurationError(f"param failed_q: {exc}") from None
        error_queue, allowed = retry_targets(target["conn_id"], transport)
        if not allowed:
            raise BadConfigurationError(f"connection {target['conn_id']!r} has no queue a retry may write to: list "
                                        "its queues in the maintenance configuration")
        summary = transport.retry_errors(error_queue=error_queue, select=select, allowed=allowed,
                                         max_messages=params.get("max_messages") or None).as_dict()
    log.info("returned %d messages from %s on %s:\n%s", summary["total_returned"], target["error_queue"],
             target["conn_id"], format_table([{"queue": q, "returned": n} for q, n in summary["returned"].items()],
                                             ("queue", "returned")))
    if summary["left"]:
        log.warning("%d selected messages stay in the error queue:\n%s", len(summary["left"]),
                    format_table(summary["left"], ("id", "reason")))
    return {**target, **summary}
