"""What the page's API answers, as pydantic models: FastAPI checks every response against them and describes them
in the OpenAPI document the app serves (``GET /api/openapi.json``), so clients can be generated and the answers
checked against the document (tests/test_dashboard_openapi.py)."""

from __future__ import annotations

from dataclasses import fields as dataclass_fields
from typing import Any, get_type_hints

from pydantic import BaseModel, ConfigDict, create_model

from airflow_sqlqueue.transport.errorqueue.previews import FailedPreview


class Answer(BaseModel):
    """A response: its fields are exactly those declared (nothing undeclared leaves the server)."""

    model_config = ConfigDict(extra="forbid")


class Open(BaseModel):
    """A record with declared fields and others kept as they are (archive manifests, run plans)."""

    model_config = ConfigDict(extra="allow")


class Problem(Answer):
    """Every error: what was wrong and how to fix it (a text), or the fields a request got wrong (a 422)."""

    detail: str | list[dict[str, Any]]


# -- overview and history ------------------------------------------------------------------------------------
class QueueFigures(Answer):
    queue: str
    exists: bool
    depth: int | None
    oldest_age_seconds: float | None
    newest_seq: int | None = None
    thresholds: dict[str, float | int | None]
    breaches: list[str]
    net_flow_per_minute: float | None
    throughput_per_minute: float | None
    is_error_queue: bool
    depth_exact: bool


class ConnectionOverview(Answer):
    conn_id: str
    error_queue: str
    can_edit: bool
    queues: list[QueueFigures]
    error: str | None


class Overview(Answer):
    source: str
    user: str
    connections: list[ConnectionOverview]


class HistoryPoint(Answer):
    sampled_at: str
    depth: int
    oldest_age_seconds: float | None
    newest_seq: int | None
    throughput_per_minute: float | None


class History(Answer):
    conn_id: str
    queue: str
    hours: float
    samples: list[HistoryPoint]
    net_flow_per_minute: float | None


# -- the error queue -----------------------------------------------------------------------------------------
class Group(Answer):
    failed_q: str | None = None
    exception_type: str | None = None
    message_type: str | None = None
    count: int
    first_failure: str | None
    last_failure: str | None
    filter: dict[str, str | list[str]]


class GroupSummary(Answer):
    """What the error groups summary says of itself: the highest position counted, rows above it not counted yet,
    rows the queue holds minus rows counted (0: they agree) as the last drift check found, when rebuilt, caught up
    and last checked (None: not yet), and how often a large queue is checked (a small one: on every read)."""

    high_water: int
    behind: int
    drift: int
    rebuilt_at: str | None
    caught_up_at: str | None
    checked_at: str | None = None
    checked_seconds_ago: float | None = None
    check_every_seconds: float | None = None


class Groups(Answer):
    conn_id: str
    can_edit: bool
    error_queue: str
    by: str
    total: int
    grouped: int
    groups: list[Group]
    summary: GroupSummary | None = None


def preview_fields(*, leave_out: tuple[str, ...] = ()) -> dict[str, Any]:
    """The fields of :class:`FailedPreview` (what a page's row is made of), in its order, each required."""
    hints = get_type_hints(FailedPreview)
    return {f.name: (hints[f.name], ...) for f in dataclass_fields(FailedPreview) if f.name not in leave_out}


#: One failed message of a page: exactly the fields of ``FailedPreview`` (its ``as_dict()``).
FailedMessage = create_model("FailedMessage", __base__=Answer, __module__=__name__, **preview_fields())


class FailedPage(Answer):
    conn_id: str
    can_edit: bool
    edit_retry: bool
    failure_headers: list[str]
    error_queue: str
    after: int
    limit: int
    messages: list[FailedMessage]
    next_after: int | None


class Returned(Answer):
    conn_id: str
    error_queue: str
    returned: dict[str, int]
    total_returned: int


class Deleted(Answer):
    conn_id: str
    error_queue: str
    deleted: int


class EditSent(Answer):
    conn_id: str
    error_queue: str
    queue: str
    id: str
    edit_of: str


# -- batched retries -----------------------------------------------------------------------------------------
class Run(Answer):
    run_id: str
    dag_run_state: str | None
    triggered_by: str | None
    queued_at: str | None
    run_path: str
    hint: str | None
    state: str
    started_by: str | None
    started_at: str | None
    ended_at: str | None
    plan: dict[str, Any] | None
    selection: dict[str, Any] | None
    redirects: dict[str, str] | None
    to_do: int | None
    batches_done: int
    looked_at: int
    remaining: int | None
    returned: dict[str, int]
    total_returned: int
    left_count: int
    left: list[dict[str, str]]
    cancel_requested_by: str | None
    error: str | None
    batches: list[dict[str, Any]]


class Runs(Answer):
    conn_id: str
    can_edit: bool
    edit_retry: bool
    error_queue: str
    queues: list[str]
    runs: list[Run]


class RunStarted(Answer):
    conn_id: str
    run_id: str
    run_path: str
    unpaused_dag: bool
    hint: str | None


class CancelAsked(Answer):
    conn_id: str
    run_id: str
    cancel_requested_by: str
    state_before: str


# -- the error archive ---------------------------------------------------------------------------------------
class ArchiveConnection(Answer):
    conn_id: str
    can_edit: bool


class ArchiveSetup(Answer):
    configured: bool
    older_than_days: float | None
    connections: list[ArchiveConnection]


class ArchiveSummary(Open):
    """An archive's manifest without its per-message lists (fields as the archive wrote them)."""

    archive_id: str
    queue: str


class Archives(Answer):
    conn_id: str
    error_queue: str
    can_edit: bool
    archives: list[ArchiveSummary]


class ArchivePage(Answer):
    conn_id: str
    can_edit: bool
    archive: ArchiveSummary
    messages: list[dict[str, Any]]
    next_after: int | None


class Archived(Open):
    """What archiving did (the archive's id, rows written, rows deleted, those not found)."""

    conn_id: str
    archive_id: str


class Restored(Open):
    """What a restore did (rows put back, those already there)."""

    conn_id: str


# -- one failed message (its own page) and retry history ------------------------------------------------------
class HistoryEntry(Answer):
    """One retry of a message: when, by whom, how, through which run, and whether it failed again."""

    at: str | None
    by: str
    how: str
    event: str
    run_id: str | None
    copy_id: str | None
    failed_again: bool | None
    failed_again_at: str | None


class ConversationMessage(Answer):
    seq: int
    id: str
    failed_q: str | None
    exception_type: str | None
    message_type: str | None
    time_of_failure: str | None


class MessageHead(Answer):
    """Where a message page's answer starts: the connection, and what the user may do there."""

    conn_id: str
    error_queue: str
    can_edit: bool
    edit_retry: bool
    failure_headers: list[str]


class MessageFacts(Answer):
    """What a message page adds to the page row's fields (its body as laid out, the failure's context)."""

    body_shown_bytes: int
    body_kind: str
    body_text: str
    content_type: str | None
    time_sent: str | None
    conversation_id: str | None
    message_id: str | None
    processing_endpoint: str | None
    processing_machine: str | None
    bad: list[str]
    history: list[HistoryEntry]


def _fields_of(model: type[BaseModel]) -> dict[str, Any]:
    return {name: (info.annotation, ...) for name, info in model.model_fields.items()}


#: One failed message's page: the head, the page row's fields but the body preview (the whole body is laid out
#: instead), then the page's own facts; ``bad`` stays last but one, as before.
MessageDetail = create_model("MessageDetail", __base__=Answer, __module__=__name__, **_fields_of(MessageHead),
                             **preview_fields(leave_out=("body_preview", "bad")), **_fields_of(MessageFacts))


class Conversation(Answer):
    conn_id: str
    conversation_id: str
    messages: list[ConversationMessage]
    more: bool
    after: int
    next_after: int | None


class RetrySummary(Answer):
    retries: int
    last_retried: str | None
    last_retried_by: str | None


class RetriedIds(Answer):
    conn_id: str
    retried: dict[str, RetrySummary]


# -- group cards and whole-group actions -----------------------------------------------------------------------
class GroupCard(Group):
    last_retried: str | None
    last_retried_by: str | None
    last_run_id: str | None
    failed_again: int


class GroupCards(Answer):
    conn_id: str
    can_edit: bool
    max_return: int
    error_queue: str
    by: str
    total: int
    grouped: int
    groups: list[GroupCard]
    summary: GroupSummary | None = None
    retried_looked_at: int
    retry_window_days: int


class GroupReturned(Answer):
    conn_id: str
    error_queue: str
    returned: dict[str, int]
    total_returned: int
    left: list[dict[str, str]]


class GroupDeleted(Answer):
    conn_id: str
    error_queue: str
    deleted: int
    not_found: int
