"""Handle each message of an event-driven DAG run once, whatever crashes delivered it twice.

``SqlQueueMessageTrigger`` delivers every message at least once: a triggerer that dies after Airflow stored an
event, before the batch's delete committed, emits the batch again and a second DAG run gets the same messages
(same ``id``). ``handle_once(context, handler)`` hands ``handler`` only the messages no earlier successful
attempt of the same consumer finished, and records each one in the inbox table (``SqlQueueInbox``, in the queue's
database) in the same transaction as the handler's own writes through ``once.cursor`` / ``once.send``.

The guarantee:

- Writes the handler makes on ``once.cursor`` (or sends with ``once.send``) commit together with the inbox row:
  a message's effects are in the queue's database exactly once per consumer, across crashes, retries and
  re-runs, as long as the inbox row is kept (``purge_inbox`` retention).
- A handler that fails (an exception, a killed worker) commits nothing: its messages, and the rest of its
  transaction, are handled again by the next attempt (task retry, a cleared run, or a run that carries the
  same events). At-least-once is kept.
- Writes the handler makes ELSEWHERE (another database, an HTTP call, a file) are not in that transaction: they
  are at-least-once. If the worker dies after such a write and before the commit, the message is handled
  again. Make those writes idempotent by the message ``id`` (or keep them in the queue's database).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from airflow_sqlqueue.hooks.sqlqueue import SqlQueueHook
from airflow_sqlqueue.transport import OutgoingMessage, SqlQueueTransport
from airflow_sqlqueue.transport.common.validation import check_count
from airflow_sqlqueue.transport.operations.inbox import DEFAULT_INBOX_TABLE, check_key
from airflow_sqlqueue.triggers.sqlqueue import event_messages, event_payload_messages, messages_of_events

log = logging.getLogger(__name__)

#: Messages handled in one transaction by default.
DEFAULT_ONCE_BATCH = 50
#: Asset events asked for at a time when ``handle_once`` pages through those stored after the run was triggered.
LATER_EVENTS_PAGE = 100
#: Most such events it looks at, per asset (oldest first): a bound, far above what a run can be left behind.
LATER_EVENTS_LIMIT = 10_000


@dataclass
class Once:
    """What a ``handle_once`` handler gets besides the message: the open transaction it shares with the inbox.

    :param cursor: a DB-API cursor in the transaction that records the message as handled.
    :param transport: the queue transport (its ``send(..., cursor=once.cursor)`` joins the transaction).
    :param consumer: the name the inbox records the message under.
    """

    cursor: Any
    transport: SqlQueueTransport
    consumer: str

    def send(self, queue: str, message: OutgoingMessage | bytes | str) -> uuid.UUID:
        """Send a message in the same transaction (it leaves only if the message counts as handled)."""
        return self.transport.send(queue, message, cursor=self.cursor)


@dataclass
class OnceSummary:
    """How many messages ``handle_once`` gave the handler, and how many an earlier attempt had finished."""

    handled: int = 0
    skipped: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def default_consumer(context: Any) -> str:
    """``<dag_id>.<task_id>``: each task of each DAG handles each message once."""
    ti = context.get("ti") or context.get("task_instance")
    if ti is None:
        raise ValueError("handle_once: the context has no task instance; pass consumer=... (a stable name)")
    return f"{ti.dag_id}.{ti.task_id}"


def page_events(fetch: Callable[[Any, int], Sequence[Any]], after: Any, *, page_size: int = LATER_EVENTS_PAGE,
                limit: int = LATER_EVENTS_LIMIT) -> list[Any]:
    """Every event ``fetch(after, n)`` lists from ``after`` on, oldest first, each once, up to ``limit``.

    ``fetch`` is the execution API's asset-event listing: events whose timestamp is ``>= after``, ascending, at
    most ``n``. Each next page starts at the last timestamp seen (inclusive, so events sharing it are not
    skipped; those already seen are dropped by id); a page holding only events already seen (more than a page
    share one timestamp) is asked for again twice as large.
    """
    check_count(page_size, "page_size")
    found: list[Any] = []
    seen: set[Any] = set()
    size = page_size
    while len(found) < limit:
        page = list(fetch(after, size))
        fresh = [event for event in page if _event_key(event) not in seen]
        for event in fresh:
            seen.add(_event_key(event))
        found.extend(fresh)
        if len(page) < size:
            break  # the last page
        if fresh:
            after, size = getattr(page[-1], "timestamp", None), page_size
            if after is None:  # pragma: no cover - an event without a timestamp: no way to page on
                break
        else:
            size *= 2  # a full page of one timestamp, all seen: ask for more of it at once
    return found[:limit]


def _event_key(event: Any) -> Any:
    key = getattr(event, "id", None)
    return key if key is not None else id(event)


def later_event_messages(context: Any, queue: str | None = None, limit: int | None = None,
                         page_size: int | None = None) -> list[dict[str, Any]]:
    """The messages of the asset events stored after this run was triggered (after its ``run_after``), for the
    assets whose ``SqlQueueMessageTrigger`` events triggered it: every such event (up to ``limit`` per asset),
    oldest first, read ``page_size`` at a time (defaults: ``LATER_EVENTS_LIMIT``, ``LATER_EVENTS_PAGE``).

    On Airflow 3.3 a DAG that cannot start a run at once (``max_active_runs`` reached) queues one row per asset
    and, when it can, creates a run with the events stored up to that row's time only: events stored after it,
    while the previous run was still going, wait for the next event (apache/airflow#56050). Those events were
    stored after this run's ``run_after`` and before its task started, so this run finds them here; an event
    stored later queues the next run. Read through the task's execution API (no metadata-database access).
    """
    run_after = getattr(context.get("dag_run"), "run_after", None)
    if run_after is None:
        return []
    assets: dict[tuple[str, str], None] = {}
    for events in (context.get("triggering_asset_events") or {}).values():
        for event in events:
            asset = getattr(event, "asset", None)
            if asset is not None and event_payload_messages(event) is not None:
                assets[(asset.name, asset.uri)] = None
    if not assets:
        return []
    try:
        from airflow.sdk.execution_time.context import InletEventsAccessor
    except ImportError:  # pragma: no cover - an Airflow without the accessor: the run's own events only
        log.warning("handle_once: this Airflow cannot list later asset events; handling the run's own events only")
        return []
    limit = LATER_EVENTS_LIMIT if limit is None else limit
    page_size = LATER_EVENTS_PAGE if page_size is None else page_size
    later: list[Any] = []
    for name, uri in assets:
        def fetch(after: Any, size: int, name: str = name, uri: str = uri) -> list[Any]:
            return list(InletEventsAccessor(asset_name=name, asset_uri=uri).after(after).ascending(True).limit(size))
        try:
            later.extend(page_events(fetch, run_after, page_size=page_size, limit=limit))
        except Exception as exc:  # the run's own messages are still handled; a later run looks again
            log.warning("handle_once: cannot list the asset events of %r stored after this run was triggered "
                        "(%s); handling the run's own events only", name, type(exc).__name__)
    return messages_of_events(later, queue)


def handle_once(context: Any, handler: Callable[[dict[str, Any], Once], Any], *,
                conn_id: str = SqlQueueHook.default_conn_name, consumer: str | None = None,
                queue: str | None = None, batch_size: int = DEFAULT_ONCE_BATCH,
                inbox_table: str = DEFAULT_INBOX_TABLE, create_inbox: bool = True,
                messages: Iterable[dict[str, Any]] | None = None, later_events: bool = True) -> dict[str, int]:
    """Call ``handler(message, once)`` for each message of the run that ``consumer`` did not finish before.

    Messages come from ``event_messages(context, queue)`` (queue order, each ``id`` once) unless ``messages`` is
    given, followed (``later_events``) by those of the watched assets' events stored after the run was triggered
    (``later_event_messages``): events Airflow 3.3 can leave waiting for the next message when the DAG was at
    ``max_active_runs``. The run whose events they are skips what this run handled.
    They are handled in transactions of ``batch_size`` messages on the queue's database: for each, the
    inbox row is written first (a message a committed transaction already recorded is skipped), then the handler
    runs; the transaction commits when the batch is done. A handler exception rolls its batch back (earlier
    batches stay committed) and is raised: the task fails, and the next attempt handles what was not committed.

    Keep handlers short: the transaction is open while they run (on SQLite it holds the database's write lock,
    so senders wait). Returns ``{"handled": n, "skipped": m}``.

    :param context: the task's context.
    :param handler: ``handler(message, once)``; write through ``once.cursor`` or ``once.send`` to make the writes
        part of the transaction that marks the message handled.
    :param conn_id: the queue's connection (the inbox lives in that database).
    :param consumer: the name messages are recorded under (default ``<dag_id>.<task_id>``); two consumers each
        handle every message once.
    :param queue: only the messages of this queue.
    :param batch_size: messages per transaction.
    :param inbox_table: the inbox table's address (default ``SqlQueueInbox``).
    :param create_inbox: create the inbox table when it is missing (False: a DBA created it; see ``Inbox.ddl``).
    :param messages: the messages to handle (default: the run's asset events).
    :param later_events: also handle the messages of the assets' events stored after this run was triggered
        (default True; no effect with ``messages``).
    """
    if not callable(handler):
        raise TypeError(f"handle_once: handler must be callable as handler(message, once), got {handler!r}")
    check_count(batch_size, "batch_size")
    consumer = check_key(consumer if consumer is not None else default_consumer(context), "consumer")
    if messages is not None:
        items = list(messages)
    else:
        items = event_messages(context, queue)
        if later_events and items:
            own = {str(item.get("id")) for item in items}
            extra = [item for item in later_event_messages(context, queue) if str(item.get("id")) not in own]
            if extra:
                log.info("%s: %d more messages from asset events stored after this run was triggered", consumer,
                         len(extra))
                items = sorted(items + extra, key=lambda item: (str(item.get("queue")), int(item.get("seq") or 0)))
    summary = OnceSummary()
    if not items:
        return summary.as_dict()
    hook = SqlQueueHook(conn_id, inbox_table=inbox_table)
    try:
        transport = hook.transport
        if create_inbox:
            transport.create_inbox()
        inbox = transport.inbox
        for start in range(0, len(items), batch_size):
            chunk = items[start:start + batch_size]

            def work(cur: Any, chunk: list[dict[str, Any]] = chunk) -> tuple[int, int]:
                once = Once(cur, transport, consumer)
                handled = skipped = 0
                for message in chunk:
                    if inbox.mark(cur, consumer, str(message["id"])):
                        handler(message, once)
                        handled += 1
                    else:
                        skipped += 1
                return handled, skipped

            handled, skipped = transport.run(work, what=f"handle messages once as {consumer!r}")
            summary.handled += handled
            summary.skipped += skipped
    finally:
        hook.close()
    log.info("%s: handled %d messages, skipped %d an earlier attempt had handled", consumer, summary.handled,
             summary.skipped)
    return summary.as_dict()
