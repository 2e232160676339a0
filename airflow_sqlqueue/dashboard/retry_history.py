"""What happened to returned messages: the retries the page's audit rows record (Airflow's audit log), and which
of the messages they returned failed again.

Audit rows that name messages by Id: ``sqlqueue.retry_failed_messages`` (the list's retry and the message page's),
``sqlqueue.edit_retry_failed_message`` (an edited copy: a new Id, ``airflow_sqlqueue.EditOf`` naming the original)
and ``sqlqueue.retry_failed_group`` (a group returned at once). ``sqlqueue.batch_retry_started`` names a group
filter and its DAG run; each batch of that run records the messages it returned (``retry_progress``, table
``sqlqueue_retry_progress_messages``), which a message's history lists.

A returned message keeps its native Id: when it fails again it is back in the error queue with the same Id and a
later ``NServiceBus.TimeOfFailure``, which is how "failed again" is told. (A retry from ServicePulse is marked by
``ServiceControl.Retry.UniqueMessageId``; such a message is shown as retried by ServicePulse.)
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from datetime import datetime, timedelta, timezone
from typing import Any

from airflow_sqlqueue.transport.wire import headers as h

log = logging.getLogger(__name__)

#: Audit events that returned messages named by Id.
MESSAGE_EVENTS = ("sqlqueue.retry_failed_messages", "sqlqueue.edit_retry_failed_message",
                  "sqlqueue.retry_failed_group")
#: Audit events that returned (or started returning) a whole group.
GROUP_EVENTS = ("sqlqueue.retry_failed_group", "sqlqueue.batch_retry_started")
#: How far back, and how many audit rows, a group card looks.
CARD_DAYS = 30
CARD_ROWS = 2_000
#: Returned messages a group card looks for in the error queue (most recent first).
CARD_IDS = 100
MESSAGE_ROWS = 100


def _like(text: str) -> str:
    return "%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def _rows(events: Iterable[str], *, ids: Iterable[str] = (), since: datetime | None = None,
          limit: int = MESSAGE_ROWS) -> list[tuple[datetime, str, str, dict[str, Any]]]:
    """(when, event, who, details) of the audit rows of these events, newest first, naming any of ``ids``."""
    from airflow.models.log import Log
    from airflow.utils.session import create_session
    from sqlalchemy import or_, select

    query = select(Log.dttm, Log.event, Log.owner, Log.extra).where(Log.event.in_(list(events)))
    wanted = [i for i in ids if i]
    if wanted:
        query = query.where(or_(*[Log.extra.like(_like(json.dumps(i)), escape="\\") for i in wanted]))
    if since is not None:
        query = query.where(Log.dttm >= since)
    with create_session() as session:
        found = session.execute(query.order_by(Log.dttm.desc()).limit(limit)).all()
    out = []
    for when, event, who, extra in found:
        try:
            details = json.loads(extra or "{}")
        except ValueError:
            continue
        if isinstance(details, dict):
            out.append((when, event, who or "", details))
    return out


def _ids_of(event: str, details: dict[str, Any]) -> list[str]:
    if event == "sqlqueue.edit_retry_failed_message":
        return [str((details.get("message") or {}).get("id", ""))]
    if event == "sqlqueue.retry_failed_group":
        return [str(i) for i in details.get("returned_ids") or []]
    return [str(m.get("id", "")) for m in details.get("messages") or [] if isinstance(m, dict)]


def _time(value: Any) -> datetime | None:
    if not value:
        return None
    try:
        return h.parse_wire_time(str(value))
    except (ValueError, TypeError):
        try:
            moment = datetime.fromisoformat(str(value))
            return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)
        except ValueError:
            return None


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def batched_retries(store: Any, conn_id: str, message_id: str) -> list[dict[str, Any]]:
    """The batched retries that returned one message, from the batched-retry tables beside the health samples
    (``store``: that database's transport); none when they cannot be read (logged)."""
    from airflow_sqlqueue.maintenance import retry_progress

    try:
        return retry_progress.message_retries(store, conn_id, message_id)
    except Exception:  # noqa: BLE001 - the history is extra: the message page still opens
        log.warning("batched retries of a message on %s could not be read", conn_id, exc_info=True)
        return []


def message_history(conn_id: str, message_id: str, now_failed_at: str | None = None,
                    headers: dict[str, str | None] | None = None,
                    batched: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """The retries of one message (by native Id), oldest first: when, by whom, how (and through which run), and
    whether it failed again (``now_failed_at``: its time of failure when it is in the error queue now).
    ``batched``: the batched retries that returned it (``batched_retries``)."""
    entries = [{"at": _aware(b["at"]).isoformat(), "by": b["by"] or "", "how": f"returned by a batched retry "
                f"(batch {b['batch']})", "event": "sqlqueue.batch_retry", "run_id": b["run_id"], "copy_id": None,
                "failed_again": None, "failed_again_at": None} for b in batched or []]
    for when, event, who, details in _rows(MESSAGE_EVENTS, ids=[message_id]):
        if details.get("conn_id") != conn_id:
            continue
        if message_id.lower() not in (i.lower() for i in _ids_of(event, details)):
            continue
        how = {"sqlqueue.retry_failed_messages": "returned", "sqlqueue.edit_retry_failed_message":
               "edited and sent as a new message", "sqlqueue.retry_failed_group": "returned with its group"}[event]
        result = details.get("result") if isinstance(details.get("result"), dict) else {}
        entries.append({"at": _aware(when).isoformat(), "by": who, "how": how, "event": event,
                        "run_id": details.get("run_id"), "copy_id": result.get("id") if event.startswith(
                            "sqlqueue.edit") else None, "failed_again": None, "failed_again_at": None})
    entries.sort(key=lambda e: e["at"])
    failed_at = _time(now_failed_at)
    for n, entry in enumerate(entries):
        later = entries[n + 1]["at"] if n + 1 < len(entries) else None
        if later is not None and entry["event"] != "sqlqueue.edit_retry_failed_message":
            entry["failed_again"] = True  # it was back in the error queue to be retried again
        elif failed_at is not None and failed_at > datetime.fromisoformat(entry["at"]) and \
                entry["event"] != "sqlqueue.edit_retry_failed_message":
            entry["failed_again"], entry["failed_again_at"] = True, now_failed_at
        elif entry["event"] != "sqlqueue.edit_retry_failed_message":
            entry["failed_again"] = False
    if headers and headers.get(h.RETRY_UNIQUE_MESSAGE_ID):
        entries.insert(0, {"at": None, "by": "ServicePulse", "how": "returned by ServiceControl (unique message "
                           f"Id {headers[h.RETRY_UNIQUE_MESSAGE_ID]})", "event": "servicecontrol", "run_id": None,
                           "copy_id": None, "failed_again": now_failed_at is not None, "failed_again_at": None})
    return entries


def retried_ids(conn_id: str, ids: Iterable[str]) -> dict[str, dict[str, Any]]:
    """For each of ``ids`` retried before (a page of the list): how often, last when and by whom."""
    wanted = {i.lower(): i for i in ids if i}
    out: dict[str, dict[str, Any]] = {}
    if not wanted:
        return out
    for when, event, who, details in _rows(MESSAGE_EVENTS, ids=list(wanted.values()), limit=1_000):
        if details.get("conn_id") != conn_id:
            continue
        for found in _ids_of(event, details):
            key = found.lower()
            if key in wanted:
                entry = out.setdefault(wanted[key], {"retries": 0, "last_retried": None, "last_retried_by": None})
                entry["retries"] += 1
                at = _aware(when).isoformat()
                if entry["last_retried"] is None or at > entry["last_retried"]:
                    entry["last_retried"], entry["last_retried_by"] = at, who
    return out


def recent_retries(conn_id: str, now: datetime | None = None) -> dict[str, Any]:
    """The retries of the last :data:`CARD_DAYS` days for the group cards: group-wide ones (filter, when, who, run)
    and the Ids returned one by one, newest first (at most :data:`CARD_IDS`)."""
    since = (now or datetime.now(timezone.utc)) - timedelta(days=CARD_DAYS)
    groups: list[dict[str, Any]] = []
    ids: dict[str, dict[str, Any]] = {}
    for when, event, who, details in _rows((*MESSAGE_EVENTS, *GROUP_EVENTS), since=since, limit=CARD_ROWS):
        if details.get("conn_id") != conn_id:
            continue
        at = _aware(when).isoformat()
        if event in GROUP_EVENTS:
            chosen = details.get("filter") if event == "sqlqueue.retry_failed_group" else details.get("request")
            if isinstance(chosen, dict) and not (event == "sqlqueue.batch_retry_started" and chosen.get("positions")):
                groups.append({"at": at, "by": who, "run_id": details.get("run_id"), "filter": chosen})
        if event in MESSAGE_EVENTS:
            for found in _ids_of(event, details):
                if found and found.lower() not in ids and len(ids) < CARD_IDS:
                    ids[found.lower()] = {"id": found, "at": at, "by": who}
    return {"groups": groups, "ids": list(ids.values())}
