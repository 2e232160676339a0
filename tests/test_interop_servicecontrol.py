"""Every kind of error row the provider writes passes ServiceControl's import rules (real SQLite and PostgreSQL).

The rules below are read from ServiceControl's error ingestion (``ErrorProcessor``, ``FailedMessageFactory``,
``EndpointDetailsParser``, the header extensions) and core 10's fault metadata, not from this project's output:

* the Headers column is a JSON object of strings (null allowed) and the body is not NULL;
* ``NServiceBus.MessageId`` is read unconditionally (missing: a "failed import" ServicePulse never shows);
* ``NServiceBus.FailedQ`` must be present (missing: "poison message or incorrectly sent to the error queue");
* ``NServiceBus.TimeOfFailure`` parses in the wire format ``yyyy-MM-dd HH:mm:ss:ffffff Z``;
* ``$.diagnostics.hostid`` and ``$.diagnostics.originating.hostid``, when present, parse as GUIDs;
* the processing endpoint is ``NServiceBus.ProcessingEndpoint``, else the queue of ``FailedQ``;
* the exception type groups the failure; core writes ``ExceptionInfo.Message`` cut at 16,384 characters.
"""

from __future__ import annotations

import json
import re
import uuid

import pytest

from airflow_sqlqueue.transport import OutgoingMessage
from airflow_sqlqueue.transport.wire import headers as h
from airflow_sqlqueue.transport.wire.standard_headers import ORIGINATING_HOST_ID

WIRE_TIME = re.compile(r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}:\d{6} Z$")
EXCEPTION_PREFIX = "NServiceBus.ExceptionInfo."


def servicecontrol_import(headers_text: str | None, body: bytes | None) -> dict[str, str]:
    """What ServiceControl's error ingestion does with a row; raises AssertionError where it would fail the import."""
    assert body is not None, "a NULL body stops ServiceControl's ingestion"
    assert headers_text, "empty Headers: no MessageId, no FailedQ"
    headers = json.loads(headers_text)
    assert isinstance(headers, dict) and all(isinstance(v, str | None) for v in headers.values())
    assert isinstance(headers.get(h.MESSAGE_ID), str) and headers[h.MESSAGE_ID], "MessageId is read unconditionally"
    assert h.FAILED_Q in headers, "Missing 'NServiceBus.FailedQ' header: a failed import"
    assert WIRE_TIME.match(headers[h.TIME_OF_FAILURE]), headers[h.TIME_OF_FAILURE]
    for guid in (h.HOST_ID, ORIGINATING_HOST_ID):
        if guid in headers:
            uuid.UUID(headers[guid])  # Guid.Parse
    endpoint = headers.get(h.PROCESSING_ENDPOINT) or headers[h.FAILED_Q].split("@")[0]
    assert endpoint
    assert headers[h.PROCESSING_MACHINE] and headers[h.HOST_DISPLAY_NAME]
    assert len(headers[h.HOST_ID]) == 32 and uuid.UUID(headers[h.HOST_ID]).hex == headers[h.HOST_ID]  # "N" format
    assert headers[h.EXCEPTION_TYPE]
    assert len(headers[h.EXCEPTION_MESSAGE]) <= 16_384
    assert h.FORWARD_DESTINATION not in headers and h.RETRIES not in headers and h.IMMEDIATE_RETRIES not in headers
    return headers


def error_rows(db) -> list[tuple[uuid.UUID, str, bytes | None]]:
    table = db.transport.dialect.qualified(db.transport.address(db.q("error")))
    found = db.sql(f"SELECT id, headers, body FROM {table} ORDER BY seq")  # noqa: S608
    return [(uuid.UUID(str(i)), text, None if b is None else bytes(b)) for i, text, b in found]


def insert_native(db, name: str, headers: str, body: bytes | None = b"b", expires_past: bool = False) -> uuid.UUID:
    """A row inserted as a 9.x .NET endpoint inserts it (explicit columns)."""
    row_id = uuid.uuid4()
    table = db.transport.dialect.qualified(db.transport.address(db.q(name)))
    if db.kind == "postgres":
        expires = "(now() AT TIME ZONE 'UTC') - interval '1 hour'" if expires_past else "NULL"
        db.sql(f"INSERT INTO {table} (id, expires, headers, body) VALUES (%s, {expires}, %s, %s)",  # noqa: S608
               (str(row_id), headers, body))
    else:
        expires = "strftime('%Y-%m-%d %H:%M:%f', 'now', '-1 hour')" if expires_past else "NULL"
        db.sql(f"INSERT INTO {table} (id, expires, headers, body) VALUES (?, {expires}, ?, ?)",  # noqa: S608
               (str(row_id), headers, body))
    return row_id


class StockError(Exception):
    """A handler's exception with an inner cause and data."""


def test_handler_failure_row_imports(queues):
    t, q = queues.transport, queues.q("orders")
    sent = t.send(q, OutgoingMessage(b"order", {h.MESSAGE_ID: "m-1", h.RETRIES: "2", h.IMMEDIATE_RETRIES: "1",
                                                "k": "v"}))

    def handler(message, context):
        try:
            raise KeyError("sku")
        except KeyError as inner:
            error = StockError("x" * 20_000)
            error.data = {"Sku": "A-1", "None": None}  # ExceptionInfo.Data.<key>, null values skipped
            raise error from inner

    assert t.process(q, handler, immediate_retries=0).failed == 1
    [(row_id, text, body)] = error_rows(queues)
    headers = servicecontrol_import(text, body)
    assert (row_id, body) == (sent, b"order")
    assert headers[h.MESSAGE_ID] == "m-1" and headers["k"] == "v"
    assert headers[h.FAILED_Q] == t.wire_address(q)
    assert headers[h.PROCESSING_ENDPOINT] == "orders"
    assert headers[h.EXCEPTION_TYPE] == f"{__name__}.StockError"
    assert headers[h.INNER_EXCEPTION_TYPE] == "KeyError"
    assert headers[h.EXCEPTION_MESSAGE] == "x" * 16_384
    assert headers[h.EXCEPTION_DATA_PREFIX + "Sku"] == "A-1" and h.EXCEPTION_DATA_PREFIX + "None" not in headers
    assert headers[h.EXCEPTION_SOURCE] == __name__ and "StockError" in headers[h.EXCEPTION_STACK_TRACE]


def test_native_row_without_message_id_gets_the_native_id(queues):
    t, q = queues.transport, queues.q("orders")
    row_id = insert_native(queues, "orders", '{"NServiceBus.EnclosedMessageTypes":"Sales.Order"}')
    t.process(q, lambda m, c: 1 / 0, immediate_retries=0)
    [(_, text, body)] = error_rows(queues)
    headers = servicecontrol_import(text, body)
    assert headers[h.MESSAGE_ID] == str(row_id)  # lower-case, hyphenated, as upstream receivers fall back
    assert headers[h.EXCEPTION_TYPE] == "ZeroDivisionError"
    assert h.INNER_EXCEPTION_TYPE not in headers


@pytest.mark.parametrize("text", ["not json", "  ", "null", "[1]", '{"a":1}', "[" * 50_000])
@pytest.mark.parametrize("expired", [False, True])
def test_poison_row_imports_even_when_expired(queues, text, expired):
    t, q = queues.transport, queues.q("orders")
    row_id = insert_native(queues, "orders", text, b"\xffpoison", expires_past=expired)
    with t.receiving(q, 10) as batch:
        assert batch.messages == [] and batch.stats.poison == 1  # dead-lettered, not dropped as expired
    [(error_id, error_text, body)] = error_rows(queues)
    headers = servicecontrol_import(error_text, body)
    assert (error_id, body) == (row_id, b"\xffpoison")
    assert headers[h.MESSAGE_ID] == str(row_id)
    assert headers[h.RAW_HEADERS] == text
    assert headers[h.FAILED_Q] == t.wire_address(q)
    assert headers[h.EXCEPTION_TYPE].endswith("PoisonMessageError")


@pytest.mark.parametrize("target", ["elsewhere", "missing"])
def test_refused_or_missing_forward_target_imports(queues, target):
    """A ForwardDestination naming a queue this receiver may not forward to, or an allowed one that does not
    exist: the row goes to the error queue (the pump does not stop)."""
    t = queues.new_transport(forward_to=[queues.q("missing")])
    q = queues.q("orders")
    forward = t.wire_address(queues.q(target))
    row_id = insert_native(queues, "orders", json.dumps({h.MESSAGE_ID: "f-1", h.FORWARD_DESTINATION: forward}))
    t.send(q, b"next")
    assert [m.body for m in t.receive(q, 10)] == [b"next"]
    [(error_id, text, body)] = error_rows(queues)
    headers = servicecontrol_import(text, body)
    assert (error_id, headers[h.MESSAGE_ID]) == (row_id, "f-1")
    assert headers[h.FAILED_Q] == t.wire_address(q)
    assert headers[h.EXCEPTION_TYPE].endswith("ForwardRefusedError")
    t.close()


def test_rejected_message_imports(queues):
    """A message a claim holder rejects (the event trigger's and the workbench's reject)."""
    t, q = queues.transport, queues.q("orders")
    sent = t.send(q, OutgoingMessage(b"event", {"NServiceBus.SqlServer.ForwardDestination": t.wire_address(q)}))
    with t.claim(q, 1) as claim:
        [message] = claim.messages
        claim.reject(message, ValueError("not for this DAG"))
    [(error_id, text, body)] = error_rows(queues)
    headers = servicecontrol_import(text, body)
    assert (error_id, headers[h.MESSAGE_ID]) == (sent, str(sent))
    assert headers[h.EXCEPTION_MESSAGE] == "not for this DAG"


def test_error_rows_carry_the_endpoint_name_given(queues):
    t = queues.new_transport(endpoint="Sales.Airflow")
    q = queues.q("orders")
    t.send(q, b"x")
    t.process(q, lambda m, c: 1 / 0, immediate_retries=0)
    [(_, text, body)] = error_rows(queues)
    assert servicecontrol_import(text, body)[h.PROCESSING_ENDPOINT] == "Sales.Airflow"
    t.close()


def test_retry_removes_failure_headers_by_prefix_as_servicecontrol(queues):
    t, q = queues.transport, queues.q("orders")
    failed = {h.MESSAGE_ID: "r-1", h.FAILED_Q: t.wire_address(q), h.TIME_OF_FAILURE: h.format_wire_time(),
              h.EXCEPTION_TYPE: "System.Exception", h.EXCEPTION_DATA_PREFIX + "Key": "v", h.RETRIES: "3",
              h.RETRIES_TIMESTAMP: h.format_wire_time(), "ServiceControl.EditOf": "abc",
              h.PROCESSING_ENDPOINT: "orders", "Custom.Header": "kept"}
    t.send(queues.q("error"), OutgoingMessage(b"x", failed))
    assert t.retry_errors(allowed=[q]).total_returned == 1
    [back] = t.receive(q)
    gone = [k for k in back.headers if k.startswith(h.RETRY_REMOVED_PREFIXES)]
    assert gone == []
    assert back.headers["Custom.Header"] == "kept" and back.headers[h.PROCESSING_ENDPOINT] == "orders"
    assert back.headers[h.MESSAGE_ID] == "r-1"


@pytest.mark.parametrize("mode", ["sends-atomic-with-receive", "receive-only", "transaction-scope", "none"])
def test_servicecontrol_retry_is_acknowledged_once_handled(queues, mode):
    """A message retried from ServicePulse carries ServiceControl.Retry.UniqueMessageId and .AcknowledgementQueue;
    once handled, the control message core sends goes to that queue (here the error queue, ServiceControl's)."""
    t, q, error = queues.transport, queues.q("orders"), queues.q("error")
    retried = {h.RETRY_UNIQUE_MESSAGE_ID: "u-1", h.RETRY_ACKNOWLEDGEMENT_QUEUE: t.wire_address(error)}
    t.send(q, OutgoingMessage(b"again", retried))
    t.send(q, OutgoingMessage(b"plain"))
    assert t.process(q, lambda m, c: None, mode=mode).succeeded == 2
    [(_, text, body)] = error_rows(queues)
    assert body == b""
    ack = json.loads(text)
    assert set(ack) == {h.RETRY_SUCCESSFUL, h.RETRY_UNIQUE_MESSAGE_ID, h.CONTROL_MESSAGE}
    assert ack[h.RETRY_UNIQUE_MESSAGE_ID] == "u-1" and ack[h.CONTROL_MESSAGE] == "True"
    assert WIRE_TIME.match(ack[h.RETRY_SUCCESSFUL])


def test_no_acknowledgement_when_the_retry_fails_again_or_names_a_foreign_queue(queues):
    t, q, error = queues.transport, queues.q("orders"), queues.q("error")
    t.send(q, OutgoingMessage(b"fails", {h.RETRY_UNIQUE_MESSAGE_ID: "u-2",
                                        h.RETRY_ACKNOWLEDGEMENT_QUEUE: t.wire_address(error)}))
    t.process(q, lambda m, c: 1 / 0, immediate_retries=0)
    [(_, text, _)] = error_rows(queues)
    assert h.CONTROL_MESSAGE not in json.loads(text)  # the failed message itself, no acknowledgement
    t.send(q, OutgoingMessage(b"ok", {h.RETRY_UNIQUE_MESSAGE_ID: "u-3",
                                     h.RETRY_ACKNOWLEDGEMENT_QUEUE: t.wire_address(queues.q("replies"))}))
    assert t.process(q, lambda m, c: None).succeeded == 1
    assert t.peek(queues.q("replies")) == 0  # a header is not trusted as a destination
    assert len(error_rows(queues)) == 1


def test_lone_surrogates_never_stop_an_error_move_or_its_display(queues, capsys):
    """``"\\ud800"`` in a row's headers parses to a lone surrogate: moving the message, printing it as JSON and
    showing it on the dashboard still work (the escape is kept on every copy)."""
    from airflow_sqlqueue.cli.output import emit_json, message_json

    t, q = queues.transport, queues.q("orders")
    insert_native(queues, "orders", '{"NServiceBus.MessageId":"s-1","Odd\\udfff":"x\\ud800y"}')
    [message] = t.receive(q)
    emit_json(message_json(message))
    out = capsys.readouterr().out
    out.encode("utf-8")  # printable as UTF-8; a JSON parser reads the very same value back
    assert json.loads(out)["headers"]["Odd\udfff"] == "x\ud800y"
    insert_native(queues, "orders", '{"NServiceBus.MessageId":"s-2","Odd":"x\\ud800y"}')
    t.process(q, lambda m, c: (_ for _ in ()).throw(ValueError(m.headers["Odd"])), immediate_retries=0)
    [(_, text, body)] = error_rows(queues)
    headers = servicecontrol_import(text, body)
    assert '"Odd":"x\\uD800y"' in text and headers["Odd"] == "x\ud800y"
    text.encode("utf-8")
    [preview] = t.failed_page(queues.q("error"))
    view = preview.as_dict()
    json.dumps(view, ensure_ascii=False).encode("utf-8")  # what the dashboard API sends
    assert '"Odd":"x\\uD800y"' in view["headers_preview"]
