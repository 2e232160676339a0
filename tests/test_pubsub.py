"""Native publish/subscribe on the subscription table .NET endpoints share (real SQLite and PostgreSQL)."""

from __future__ import annotations

import pytest

from airflow_sqlqueue.transport import InvalidMessageError, OutgoingMessage, QueueNotFoundError
from airflow_sqlqueue.transport.wire import headers as h


@pytest.fixture
def bus(queues):
    """A transport whose subscription table lives in this test's namespace, with queues a, b and error."""
    t = queues.new_transport(subscription_table=queues.q("SubscriptionRouting"), endpoint="Airflow.Sales")
    t.create_queues([queues.q("a"), queues.q("b")])
    assert t.create_subscription_table() is True
    assert t.create_subscription_table() is False  # idempotent
    yield queues, t
    t.close()


def test_two_subscribers_each_receive_once_then_unsubscribe(bus):
    db, t = bus
    a, b = db.q("a"), db.q("b")
    t.subscribe(a, ["Sales.OrderPlaced"])
    t.subscribe(b, "Sales.IOrderEvent")  # subscribed to a base type only
    t.subscribe(b, "Sales.OrderPlaced")  # and to the type: still one copy
    event = OutgoingMessage(b'{"OrderId":7}', {"k": "v"}, content_type="application/json")
    result = t.publish("Sales.OrderPlaced", event, base_types=["Sales.IOrderEvent"])
    assert sorted(result.sent) == sorted([t.name(a), t.name(b)])
    [got_a], [got_b] = t.receive(a, 10), t.receive(b, 10)
    for message in (got_a, got_b):
        assert message.body == b'{"OrderId":7}'
        assert message.headers[h.MESSAGE_INTENT] == "Publish"
        assert message.headers[h.MESSAGE_ID] == result.message_id  # one event, one MessageId
        assert message.headers[h.ENCLOSED_MESSAGE_TYPES] == "Sales.OrderPlaced;Sales.IOrderEvent"
        assert message.headers[h.ORIGINATING_ENDPOINT] == "Airflow.Sales"
        assert message.headers[h.CONTENT_TYPE] == "application/json"
        assert message.headers["k"] == "v"
        h.parse_wire_time(message.headers[h.TIME_SENT])
    assert got_a.id != got_b.id  # each copy its own native Id

    assert t.unsubscribe("a", ["Sales.OrderPlaced"]) == 1
    assert t.unsubscribe("a", ["Sales.OrderPlaced"]) == 0
    assert list(t.publish("Sales.OrderPlaced", b"again").sent) == [t.name(b)]
    assert t.receive(a, 10) == [] and len(t.receive(b, 10)) == 1


def test_rows_are_what_a_dotnet_endpoint_writes_and_reads(bus):
    db, t = bus
    t.subscribe(db.q("a"), ["Sales.OrderPlaced"], endpoint="Analytics")
    table = t.dialect.qualified(t.address(db.q("SubscriptionRouting")))
    rows = db.sql(f"SELECT queueaddress, endpoint, topic FROM {table}")  # noqa: S608
    assert rows == [(t.wire_address(db.q("a")), "Analytics", "Sales.OrderPlaced")]
    if db.kind == "postgres":
        assert rows[0][0] == f'"{db.schema}"."a"'  # canonical, always quoted
        columns = db.sql("SELECT column_name, data_type, character_maximum_length, is_nullable FROM "
                         "information_schema.columns WHERE table_schema = %s AND table_name = %s "
                         "ORDER BY ordinal_position", (db.schema, "SubscriptionRouting"))
        assert columns == [("queueaddress", "character varying", 200, "NO"),
                           ("endpoint", "character varying", 200, "NO"), ("topic", "character varying", 200, "NO")]
        [(key,)] = db.sql("SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE contype = 'p' AND conrelid = "
                          "%s::regclass", (table,))
        assert key == "PRIMARY KEY (endpoint, topic)"
    # a .NET endpoint moves its input queue: subscribe is an upsert on (Endpoint, Topic)
    t.subscribe(db.q("b"), ["Sales.OrderPlaced"], endpoint="Analytics")
    assert [(s.queue_address, s.endpoint) for s in t.subscriptions()] == [(t.wire_address(db.q("b")), "Analytics")]
    # a subscription a .NET endpoint inserted itself is published to
    p = "%s" if db.kind == "postgres" else "?"
    db.sql(f"INSERT INTO {table} (queueaddress, endpoint, topic) VALUES ({p}, {p}, {p})",  # noqa: S608
           (t.wire_address(db.q("a")), "Billing", "Sales.OrderPlaced"))
    assert sorted(t.publish("Sales.OrderPlaced", b"x").sent) == sorted([t.name(db.q("a")), t.name(db.q("b"))])


def test_publish_to_a_missing_subscriber_queue_sends_nothing(bus):
    db, t = bus
    t.subscribe(db.q("a"), ["Sales.OrderPlaced"])
    db.transport.create_queue(db.q("gone"))
    t.subscribe(db.q("gone"), ["Sales.OrderPlaced"])
    db.sql(f"DROP TABLE {t.dialect.qualified(t.address(db.q('gone')))}")  # noqa: S608
    with pytest.raises(QueueNotFoundError, match="gone"):
        t.publish("Sales.OrderPlaced", b"x")
    assert t.peek(db.q("a")) == 0


@pytest.mark.parametrize(("event_type", "words"), [("", "non-empty"), ("x" * 201, "at most 200"), (None, "text")])
def test_bad_topics_are_refused_clearly(bus, event_type, words):
    db, t = bus
    with pytest.raises(InvalidMessageError, match=words):
        t.publish(event_type, b"x")
    with pytest.raises(InvalidMessageError, match=words):
        t.subscribe(db.q("a"), [event_type])
    assert t.subscriptions() == []


def test_missing_subscription_table_is_explained(queues):
    t = queues.new_transport(subscription_table=queues.q("NoSuchRouting"))
    with pytest.raises(QueueNotFoundError, match="subscription table .* does not exist; create it"):
        t.subscriptions()
    with pytest.raises(QueueNotFoundError, match="create_subscription_table"):
        t.publish("Sales.OrderPlaced", b"x")
    t.close()
