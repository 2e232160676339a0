"""``SqlQueueSensor``: wait until a queue table holds at least N messages."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from airflow.sdk import BaseSensorOperator, Context, PokeReturnValue
from airflow.sdk.configuration import conf
from airflow.sdk.exceptions import AirflowException

from airflow_sqlqueue.hooks.sqlqueue import SqlQueueHook
from airflow_sqlqueue.triggers.sqlqueue import SqlQueueTrigger, check_poll_interval


class SqlQueueSensor(BaseSensorOperator):
    """Wait until ``queue_name`` holds at least ``min_messages`` messages; push the depth seen as the XCom value.

    The depth comes from ``peek``: cheap on any backlog, and rows held by receivers are not counted. With
    ``deferrable=True`` the wait runs in the triggerer (``SqlQueueTrigger``) and holds no worker slot.

    :param queue_name: the queue address (templated). Not ``queue``: that is Airflow's executor queue.
    :param sqlqueue_conn_id: an Airflow connection of type ``mssql``, ``odbc``, ``postgres`` or ``sqlite``
        (templated).
    :param min_messages: succeed when the depth reaches this many messages (templated).
    :param deferrable: wait in the triggerer; defaults to ``[operators] default_deferrable``.
    :param poll_interval: seconds between two peeks (at least 0.1; over 10 s warns). Also the default
        ``poke_interval`` of the non-deferrable modes. Deferred on a PostgreSQL queue created with
        ``notify=True``, a send wakes the trigger at once and this is only the fallback period.
    :param max_poll_interval: deferred: the longest pause between peeks while the queue stays empty (the idle
        back-off; default 4 x ``poll_interval``).
    """

    template_fields: Sequence[str] = ("queue_name", "sqlqueue_conn_id", "min_messages")
    ui_color = "#c6e2f5"

    def __init__(self, *, queue_name: str, sqlqueue_conn_id: str = SqlQueueHook.default_conn_name,
                 min_messages: int | str = 1,
                 deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
                 poll_interval: float = 5.0, max_poll_interval: float | None = None, **kwargs: Any) -> None:
        poll_interval = check_poll_interval(poll_interval, type(self).__name__)
        kwargs.setdefault("poke_interval", poll_interval)
        super().__init__(**kwargs)
        self.queue_name = queue_name
        self.sqlqueue_conn_id = sqlqueue_conn_id
        self.min_messages = min_messages
        self.deferrable = deferrable
        self.poll_interval = poll_interval
        self.max_poll_interval = max_poll_interval

    def _threshold(self) -> int:
        """``min_messages`` after templating (a rendered template is text)."""
        try:
            value = int(self.min_messages)
        except (TypeError, ValueError):
            value = 0
        if value < 1 or isinstance(self.min_messages, bool):
            raise ValueError(f"min_messages must be a positive integer, got {self.min_messages!r}")
        return value

    def poke(self, context: Context) -> PokeReturnValue:
        threshold = self._threshold()
        hook = SqlQueueHook(sqlqueue_conn_id=self.sqlqueue_conn_id)
        try:
            depth = hook.transport.peek(self.queue_name)
        finally:
            hook.close()
        self.log.info("queue %s holds %d messages (waiting for %d)", self.queue_name, depth, threshold)
        return PokeReturnValue(is_done=depth >= threshold, xcom_value=depth)

    def execute(self, context: Context) -> Any:
        if not self.deferrable:
            return super().execute(context=context)
        first = self.poke(context)
        if first.is_done:
            return first.xcom_value
        self.defer(
            trigger=SqlQueueTrigger(conn_id=self.sqlqueue_conn_id, queue=self.queue_name,
                                    min_messages=self._threshold(), poll_interval=self.poll_interval,
                                    max_poll_interval=self.max_poll_interval),
            method_name="execute_complete",
            timeout=timedelta(seconds=self.timeout),
        )

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> int:
        """Resume after the trigger fired: return (push) the depth, or fail with the trigger's error."""
        if not event or event.get("status") != "success":
            message = (event or {}).get("message") or f"no event from the trigger of queue {self.queue_name!r}"
            raise AirflowException(message)
        self.log.info("queue %s reached %d messages", self.queue_name, event["depth"])
        return int(event["depth"])
