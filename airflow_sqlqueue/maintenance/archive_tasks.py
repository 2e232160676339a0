"""Task bodies of the archive-failed maintenance DAG: which error queues, and archiving one of them.

Where archives go and how old a message must be come from the deployment's ``archive`` configuration key (a run's
conf cannot set it: see :mod:`airflow_sqlqueue.maintenance.config`). A run's params may only narrow: fewer
connections, an older cut-off, fewer messages, one group.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta, timezone
from typing import Any

from airflow_sqlqueue import metrics
from airflow_sqlqueue.archive.error_archive import ArchiveRefusedError, ArchiveSelection, archive_failed
from airflow_sqlqueue.transport.errorqueue.previews import FailedFilter

from .config import ArchiveConfig, MaintenanceConfig, MaintenanceConfigError, load_config
from .tasks import BadConfigurationError, format_table, gathered, transport_for

log = logging.getLogger(__name__)


def _config(params: dict[str, Any] | None) -> tuple[MaintenanceConfig, ArchiveConfig]:
    try:
        config = load_config(params)
    except MaintenanceConfigError as exc:
        raise BadConfigurationError(str(exc)) from None
    if config.archive is None:
        raise BadConfigurationError(
            f"{config.source} has no 'archive' key: add {{\"archive\": {{\"location\": \"s3://bucket/error-archive\", "
            "\"older_than_days\": 30}} to the Variable 'sqlqueue_maintenance' or the file named by "
            "$SQLQUEUE_MAINTENANCE_CONFIG (a DAG run cannot choose where archives go)")
    return config, config.archive


def archive_targets(params: dict[str, Any] | None) -> list[dict[str, Any]]:
    """``[{"conn_id", "error_queue"}]``: the error queue of each configured (or chosen) connection."""
    config, _ = _config(params)
    targets = [{"conn_id": c.conn_id, "error_queue": c.error_queue} for c in config.connections]
    log.info("archiving failed messages of:\n%s", format_table(targets, ("conn_id", "error_queue")))
    return targets


def selection(archive: ArchiveConfig, params: dict[str, Any] | None,
              now: datetime | None = None) -> ArchiveSelection:
    """The run's selection: the configured age, or an older one from the params; a group from the params."""
    params = params or {}
    days = params.get("older_than_days")
    if days is None:
        days = archive.older_than_days
    elif isinstance(days, bool) or not isinstance(days, int | float) or days < archive.older_than_days:
        raise BadConfigurationError(
            f"param older_than_days must be a number of days of at least {archive.older_than_days} (the "
            f"deployment's archive.older_than_days; a run may only archive older messages), got {days!r}")
    most = params.get("max_messages") or archive.max_messages
    if archive.max_messages is not None and most is not None and most > archive.max_messages:
        most = archive.max_messages
    where = FailedFilter(params.get("failed_q") or None, params.get("exception_type") or None,
                         params.get("message_type") or None)
    try:
        return ArchiveSelection(cutoff=(now or datetime.now(timezone.utc)) - timedelta(days=days), where=where,
                                max_messages=most)
    except ArchiveRefusedError as exc:
        raise BadConfigurationError(str(exc)) from None


def archive_error_queue(target: dict[str, Any], params: dict[str, Any] | None) -> dict[str, Any]:
    """Archive one connection's failed messages older than the cut-off; the manifest's summary."""
    _, archive = _config(params)
    chosen = selection(archive, params)
    with transport_for(target["conn_id"], target["error_queue"]) as transport:
        queue = transport.name(target["error_queue"])
        result = archive_failed(transport, target["error_queue"], archive.location, chosen,
                                batch_size=archive.batch_size, labels={"conn_id": target["conn_id"]})
    metrics.incr("archived", target["conn_id"], queue, int(result["deleted"]))
    log.info("archived %d failed messages of %s on %s (older than %s) to %s, archive %s; %d deleted, %d no longer "
             "there%s", result["rows"], queue, target["conn_id"], result["selection"]["cutoff"], result["location"],
             result["archive_id"], result["deleted"], result["not_found"],
             f"; finished earlier interrupted archives {result['resumed']}" if result["resumed"] else "")
    return {**target, "error_queue": queue, **{k: result[k] for k in (
        "archive_id", "location", "rows", "deleted", "not_found", "skipped", "resumed", "min_time_of_failure",
        "max_time_of_failure", "selection")}}


def archive_report(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One line per connection in the log; the results."""
    done = gathered(results)
    log.info("archives:\n%s", format_table(done, ("conn_id", "error_queue", "archive_id", "rows", "deleted")))
    return done
