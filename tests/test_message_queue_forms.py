"""``MessageQueueTrigger`` of ``common.messaging`` builds ``SqlQueueMessageTrigger`` in both of its forms.

- The installed version (2.1): ``scheme="sqlqueue"`` with keyword arguments, and the deprecated queue URI
  ``queue="sqlqueue://CONN_ID/QUEUE"``, with or without other keyword arguments.
- 2.2 (documented, not installable here): beside ``scheme``, ``queue`` names the triggerer queue unless it is a
  broker queue URI, that is a value some provider's ``queue_matches`` accepts or one containing ``://``. That
  dispatch is replayed below with our provider's public methods, as 2.2 calls them.
"""

from __future__ import annotations

import tests.airflow_env  # noqa: F401  (sets AIRFLOW_HOME before any airflow import)

# isort: split

from typing import Any

import pytest

from airflow_sqlqueue.queues.sqlqueue import SqlQueueMessageQueueProvider, parse_queue_uri
from airflow_sqlqueue.triggers.sqlqueue import SqlQueueMessageTrigger


@pytest.fixture
def message_queue_trigger(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The installed ``MessageQueueTrigger``, with our provider registered even before the entry point is."""
    from airflow.providers.common.messaging.triggers import msg_queue

    if not any(isinstance(p, SqlQueueMessageQueueProvider) for p in msg_queue.MESSAGE_QUEUE_PROVIDERS):
        monkeypatch.setattr(msg_queue, "MESSAGE_QUEUE_PROVIDERS",
                            [*msg_queue.MESSAGE_QUEUE_PROVIDERS, SqlQueueMessageQueueProvider()])
    return msg_queue.MessageQueueTrigger


def kwargs_of(trigger: Any) -> dict[str, Any]:
    inner = trigger.trigger
    assert isinstance(inner, SqlQueueMessageTrigger)
    return inner.serialize()[1]


# -- the installed version ----------------------------------------------------------------------------------
def test_scheme_form_passes_every_keyword_to_our_trigger(message_queue_trigger: Any) -> None:
    kwargs = kwargs_of(message_queue_trigger(scheme="sqlqueue", conn_id="db", queue_name="orders", batch_size=5,
                                             min_event_interval=1))
    assert (kwargs["conn_id"], kwargs["queue_name"], kwargs["batch_size"], kwargs["min_event_interval"]) == (
        "db", "orders", 5, 1.0)


def test_queue_uri_form_with_and_without_other_keywords(message_queue_trigger: Any) -> None:
    with pytest.warns(Warning, match="deprecated"):
        plain = message_queue_trigger(queue="sqlqueue://db/orders%40dbo")
    assert (kwargs_of(plain)["conn_id"], kwargs_of(plain)["queue_name"]) == ("db", "orders@dbo")
    with pytest.warns(Warning, match="deprecated"):
        more = message_queue_trigger(queue="sqlqueue://db/orders", batch_size=7, conn_id="db")
    assert (kwargs_of(more)["batch_size"], kwargs_of(more)["conn_id"]) == (7, "db")  # same conn_id twice: fine
    with pytest.warns(Warning, match="deprecated"):
        clash = message_queue_trigger(queue="sqlqueue://db/orders", conn_id="other")
    with pytest.raises(ValueError, match="conn_id='db' but conn_id='other'"):
        clash.serialize()


@pytest.mark.parametrize("uri", ["sqlqueue://db", "sqlqueue:///orders", "sqlqueue://db/", "sqlqueue://db/o?x=1"])
def test_a_malformed_uri_is_refused_with_the_expected_form(message_queue_trigger: Any, uri: str) -> None:
    assert SqlQueueMessageQueueProvider().queue_matches(uri)
    with pytest.warns(Warning, match="deprecated"):
        trigger = message_queue_trigger(queue=uri)
    with pytest.raises(ValueError, match="sqlqueue://CONN_ID/QUEUE_NAME"):
        trigger.serialize()


# -- 2.2's dispatch, as documented ---------------------------------------------------------------------------
def build_as_2_2(providers: list[Any], *, scheme: str | None = None, queue: str | None = None,
                 **kwargs: Any) -> tuple[Any, str | None]:
    """What ``MessageQueueTrigger`` 2.2 builds: (the provider's trigger, the triggerer queue)."""
    queue_uri = None
    if queue is not None and (scheme is None or "://" in queue or any(p.queue_matches(queue) for p in providers)):
        queue_uri, queue = queue, None  # the deprecated broker queue URI
    if queue_uri is not None:
        [provider] = [p for p in providers if p.queue_matches(queue_uri)]
        return provider.trigger_class()(**provider.trigger_kwargs(queue_uri, **kwargs), **kwargs), queue
    [provider] = [p for p in providers if p.scheme_matches(scheme)]
    return provider.trigger_class()(**kwargs), queue


@pytest.mark.parametrize("trigger_queue", ["sqlqueue", "orders", "fast-lane", "default"])
def test_2_2_queue_beside_scheme_is_the_triggerer_queue(trigger_queue: str) -> None:
    provider = SqlQueueMessageQueueProvider()
    assert not provider.queue_matches(trigger_queue)  # a plain name is never taken for a broker queue URI
    trigger, routed = build_as_2_2([provider], scheme="sqlqueue", queue=trigger_queue, conn_id="db",
                                   queue_name="orders")
    assert routed == trigger_queue
    assert (trigger.conn_id, trigger.queue_name) == ("db", "orders")


def test_2_2_queue_uri_still_builds_our_trigger() -> None:
    provider = SqlQueueMessageQueueProvider()
    for scheme in (None, "sqlqueue"):  # alone, or beside scheme: a URI stays a broker queue URI
        trigger, routed = build_as_2_2([provider], scheme=scheme, queue="sqlqueue://db/orders", batch_size=3)
        assert routed is None
        assert (trigger.conn_id, trigger.queue_name, trigger.batch_size) == ("db", "orders", 3)


def test_parse_queue_uri() -> None:
    assert parse_queue_uri("sqlqueue://db/%22sales%22.%22orders%22") == ("db", '"sales"."orders"')
    assert parse_queue_uri("kafka://db/orders") is None
    assert parse_queue_uri("orders") is None


def test_installed_version_reads_queue_beside_scheme_as_a_uri(message_queue_trigger: Any) -> None:
    """On 2.1 ``queue`` wins over ``scheme`` and is a broker queue URI: a triggerer-queue name is refused there (as
    docs/triggers.md says), where 2.2 would route by it."""
    with pytest.warns(Warning, match="deprecated"):
        trigger = message_queue_trigger(scheme="sqlqueue", queue="fast", conn_id="db", queue_name="orders")
    with pytest.raises(ValueError, match="not recognized"):
        trigger.serialize()
    routed = message_queue_trigger(scheme="sqlqueue", trigger_queue="fast", conn_id="db", queue_name="orders")
    assert routed.queue == "fast" and kwargs_of(routed)["queue_name"] == "orders"
