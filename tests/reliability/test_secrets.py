"""No password from a connection appears in any error message, traceback, log line (DEBUG included), trigger
event or output, whether the connection is a URL, an Airflow connection used by the hook, or one used by
the triggers.

Passwords are unique (``s3cr3t-<uuid>``) so a leak anywhere is found by a plain substring search. The
PostgreSQL server here uses trust authentication, so a "wrong password" is accepted: the real-server cases
are a missing database and a full send/process/fail cycle with the password in the URL.
"""

from __future__ import annotations

import asyncio
import json
import logging
import traceback
import uuid
from urllib.parse import quote

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tests.airflow_env  # sets AIRFLOW_HOME before any airflow import; the test database's connection
from airflow_sqlqueue.transport import SqlQueueTransport, TransactionMode
from airflow_sqlqueue.transport.tables.circuit_breaker import CircuitBreaker

from .helpers import insert_raw
from .workers import InjectedFailure

LOGGERS = "airflow_sqlqueue"


def _secret() -> str:
    return "s3cr3t-" + uuid.uuid4().hex


def _all_text(exc: BaseException) -> str:
    """str, repr and the full formatted traceback, chained causes and contexts included."""
    parts = [str(exc), repr(exc), "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))]
    seen = set()
    inner = exc.__cause__ or exc.__context__
    while inner is not None and id(inner) not in seen:
        seen.add(id(inner))
        parts += [str(inner), repr(inner)]
        inner = inner.__cause__ or inner.__context__
    return "\n".join(parts)


def _assert_clean(secret: str, caplog, *texts: str) -> int:
    logged = "\n".join(r.getMessage() + (r.exc_text or "") for r in caplog.records)
    for record in caplog.records:  # format exc_info too (exc_text is filled only by a formatter)
        if record.exc_info:
            logged += "".join(traceback.format_exception(*record.exc_info))
    for text in (*texts, logged):
        assert secret not in text, "the password leaked"
    return len(caplog.records)


def test_closed_port_errors_and_logs_free_of_the_password(caplog):
    caplog.set_level(logging.DEBUG, logger=LOGGERS)
    secret = _secret()
    url = f"postgresql://postgres:{secret}@127.0.0.1:1/test?connect_timeout=2"
    texts = []
    with SqlQueueTransport.from_url(url) as t:
        for operation in (lambda: t.send("orders", b"x"), lambda: t.peek("orders"), lambda: t.receive("orders"),
                          lambda: t.create_queue("orders"),
                          lambda: t.pump("orders", lambda m, c: None, mode=TransactionMode.RECEIVE_ONLY,
                                              breaker=CircuitBreaker("orders", timeout=0.05, armed_delay=0.01,
                                                                     triggered_delay=0.01)).run()):
            with pytest.raises(Exception) as info:
                operation()
            texts.append(_all_text(info.value))
            assert "***" in str(info.value) and "127.0.0.1" in str(info.value), str(info.value)
    _assert_clean(secret, caplog, *texts)


def test_real_server_errors_and_logs_free_of_the_password(db, caplog):
    if db.kind != "postgres":
        pytest.skip("passwords: PostgreSQL")
    caplog.set_level(logging.DEBUG, logger=LOGGERS)
    secret = _secret()
    with_password = db.url.replace("postgres@", f"postgres:{secret}@", 1)
    texts = []
    # a database that does not exist: the server answers with an error
    with SqlQueueTransport.from_url(with_password.rsplit("/", 1)[0] + "/no_such_db_" + uuid.uuid4().hex[:6]) as t:
        with pytest.raises(Exception) as info:
            t.peek("orders")
        texts.append(_all_text(info.value))
    # a whole working cycle with failures, poison rows and a missing queue, all logged at DEBUG
    with SqlQueueTransport.from_url(with_password, error_queue=db.q("error")) as t:
        t.create_queues([db.q("orders"), db.q("error")])
        t.send_many(db.q("orders"), [b"a", b"b"])
        db.sql(f'INSERT INTO "{db.schema}"."orders" (id, headers, body) VALUES (%s, %s, %s)',  # noqa: S608
               (str(uuid.uuid4()), "not json", b"p"))

        def handler(message, context):
            raise InjectedFailure(f"refused {message.body!r}")

        summary = t.process(db.q("orders"), handler, immediate_retries=1)
        assert summary.failed == 2 and summary.poison == 1
        with pytest.raises(Exception) as info:
            t.send(db.q("missing"), b"x")
        texts.append(_all_text(info.value))
        texts += [h for _, h, _ in ((r.id, r.headers, r.body) for r in t.browse(db.q("error")))]
    assert _assert_clean(secret, caplog, *texts) > 0, "nothing was logged: the check proves nothing"


def test_malformed_url_error_free_of_the_password():
    secret = _secret()
    with pytest.raises(Exception) as info:
        SqlQueueTransport.from_url(f"postgresql:/postgres:{secret}@127.0.0.1:5432/test")
    assert secret not in _all_text(info.value)
    # a '://' inside the pasted password of such a URL is not where the scheme ends (found by the fuzz below)
    head, tail = _secret(), _secret()
    with pytest.raises(Exception, match="not a connection URL") as info:
        SqlQueueTransport.from_url(f"postgresql:/postgres:{head}://{tail}@127.0.0.1:1/test")
    assert head not in _all_text(info.value) and tail not in _all_text(info.value)
    # brackets in a pasted password made urlsplit quote part of it in an IPv6 host error
    for pasted in (f"{head}][{tail}", f"{head}[{tail}"):
        with pytest.raises(Exception, match="percent-encode") as info:
            SqlQueueTransport.from_url(f"postgresql://postgres:{pasted}@127.0.0.1:1/test")
        assert head not in _all_text(info.value) and tail not in _all_text(info.value)


URL_FORMS = [
    "postgresql://postgres:{pw}@127.0.0.1:1/test?connect_timeout=2",  # the server is down
    "postgresql://postgres@127.0.0.1:1/test?connect_timeout=2&password={pw}",  # libpq's password parameter
    "mysql://127.0.0.1/db?password={pw}",
    "postgresql:/postgres:{pw}@127.0.0.1:1/test",  # a typo: not a URL
    "postgres//postgres:{pw}@127.0.0.1:1/test",
    "mysql://user:{pw}@127.0.0.1/db",  # an unsupported scheme
    "mssql+pymssql://sa:{pw}@127.0.0.1:1/db",
    "sqlite://user:{pw}@/queues.db",
]


@settings(max_examples=60, deadline=None)
@given(special=st.text(alphabet="/?#@:%&=+ ;'\"[]{}~!$*()-_.", max_size=6), encode=st.booleans(),
       form=st.sampled_from(URL_FORMS))
def test_fuzz_any_password_in_a_url_stays_secret(special, encode, form):
    """Passwords with URL syntax in them, percent-encoded or pasted as they are, in well-formed and broken URLs:
    neither half of the password appears in the error (a driver echoing a fragment is caught too)."""
    head, tail = "Hd" + uuid.uuid4().hex[:10], uuid.uuid4().hex[:10] + "Tl"
    password = head + special + tail
    if "password=" in form:  # a raw '&' or '#' in a parameter value ends it: there it must be encoded
        encode = True
    url = form.format(pw=quote(password, safe="") if encode else password)
    try:
        with SqlQueueTransport.from_url(url) as transport:
            transport.peek("orders")
    except Exception as exc:  # noqa: BLE001 - every failure is checked
        text = _all_text(exc)
    else:
        raise AssertionError(f"{url}: no error")
    assert head not in text and tail not in text, text


def test_airflow_hook_errors_and_logs_free_of_the_password(monkeypatch, caplog):
    from airflow_sqlqueue.hooks.sqlqueue import SqlQueueHook

    caplog.set_level(logging.DEBUG)
    secret = _secret()
    conn_id = "rel_secret_" + uuid.uuid4().hex[:6]
    monkeypatch.setenv("AIRFLOW_CONN_" + conn_id.upper(), json.dumps(
        {"conn_type": "postgres", "host": "127.0.0.1", "port": 1, "login": "postgres", "password": secret,
         "schema": "test", "extra": {"connect_timeout": 2}}))
    hook = SqlQueueHook(conn_id)
    with pytest.raises(Exception) as info:
        hook.get_transport().peek("orders")
    hook.close()
    text = _all_text(info.value)
    assert conn_id in str(info.value)
    _assert_clean(secret, caplog, text, repr(hook))


# -- triggers (the triggerer logs and stores event payloads: both must be free of the password) -----------------
def _airflow_conn(monkeypatch, secret: str, port: int | None = None) -> str:
    """The test database (SQLQUEUE_TEST_PG_URL) with ``secret`` as its password; ``port`` for a closed one."""
    conn_id = "rel_secret_" + uuid.uuid4().hex[:6]
    fields = {**tests.airflow_env.PG_CONNECTION, "password": secret, "extra": {"connect_timeout": 2}}
    monkeypatch.setenv("AIRFLOW_CONN_" + conn_id.upper(), json.dumps({**fields, **({"port": port} if port else {})}))
    return conn_id


def _first_event(trigger):
    async def first():
        events = trigger.run()
        try:
            return await anext(events)
        finally:
            await events.aclose()

    return asyncio.run(asyncio.wait_for(first(), 60))


def test_triggers_events_errors_and_logs_free_of_the_password(db, monkeypatch, caplog, capfd):
    if db.kind != "postgres":
        pytest.skip("passwords: PostgreSQL")
    from airflow.triggers.shared_stream import AdvanceItem, AdvanceOutcome

    from airflow_sqlqueue.triggers.sqlqueue import SqlQueueMessageTrigger, SqlQueueTrigger

    caplog.set_level(logging.DEBUG)
    secret = _secret()
    texts: list[str] = []
    # the database is down: the depth trigger yields an error event, the message trigger's stream raises
    down = _airflow_conn(monkeypatch, secret, port=1)
    event = _first_event(SqlQueueTrigger(conn_id=down, queue="orders", poll_interval=0.1))
    assert event.payload["status"] == "error" and down in event.payload["message"]
    texts.append(json.dumps(event.payload))
    producer = SqlQueueMessageTrigger.create_shared_stream_producer(
        SqlQueueMessageTrigger(conn_id=down, queue_name="orders", poll_interval=0.1).serialize()[1])

    async def open_down() -> None:
        try:
            await anext(producer.open_stream())
        finally:
            await producer.aclose()

    with pytest.raises(Exception) as info:
        asyncio.run(asyncio.wait_for(open_down(), 60))
    texts.append(_all_text(info.value))
    # the real server accepts the password (trust): a missing queue, then a full ack cycle with a poison row,
    # an acknowledged and a rejected message
    up = _airflow_conn(monkeypatch, secret)
    event = _first_event(SqlQueueTrigger(conn_id=up, queue=db.q("missing"), poll_interval=0.1))
    assert event.payload["status"] == "error" and "missing" in event.payload["message"]
    texts.append(json.dumps(event.payload))
    db.transport.create_queues([db.q("orders"), db.q("error")])
    insert_raw(db, "orders", "not json", b"poison")
    db.transport.send_many(db.q("orders"), [b"acked", b"rejected"])
    event = _first_event(SqlQueueTrigger(conn_id=up, queue=db.q("orders"), min_messages=3, poll_interval=0.1))
    assert event.payload["status"] == "success"
    producer = SqlQueueMessageTrigger.create_shared_stream_producer(SqlQueueMessageTrigger(
        conn_id=up, queue_name=db.q("orders"), error_queue=db.q("error"), poll_interval=0.1).serialize()[1])

    async def cycle() -> dict:
        stream = producer.open_stream()
        raw, number = await anext(stream)  # one event for the claimed batch
        await producer.advance([AdvanceItem(number, AdvanceOutcome(acked=0, failed=0, rejected=1))])
        await stream.aclose()
        await producer.aclose()
        return raw

    raw = asyncio.run(asyncio.wait_for(cycle(), 60))
    assert [m["body"] for m in raw["messages"]] == ["acked", "rejected"]
    texts.append(json.dumps(raw))
    errors = db.transport.browse(db.q("error"))
    assert len(errors) == 3  # the poison row and the rejected batch
    texts += [row.headers for row in errors]
    out, err = capfd.readouterr()
    # the logs reach either the capture handler or, once Airflow's structlog owns the handlers, stdout/stderr
    checked = _assert_clean(secret, caplog, *texts, out, err)
    assert checked > 0 or (out + err).strip(), "nothing was logged: the check proves nothing"


def test_the_circuit_breaker_and_the_receiver_loop_log_no_password_a_driver_error_quotes(caplog):
    """A driver may quote its connection string in an error: the breaker's and the receive loop's log lines and
    the breaker's own error carry the error's first line with the password blanked."""
    import psycopg

    from airflow_sqlqueue.transport.common.errors import CircuitBreakerOpenError
    from airflow_sqlqueue.transport.dialects import get_dialect
    from airflow_sqlqueue.transport.processing.receivers import ReceiverLoop
    from airflow_sqlqueue.transport.tables.session import RetryPolicy

    caplog.set_level(logging.DEBUG, logger=LOGGERS)
    secret = _secret()

    def one_batch(n: int) -> tuple[int, int]:  # a lost connection, as the PostgreSQL dialect reads it
        raise psycopg.OperationalError(f"server closed the connection of postgresql://app:{secret}@db:5432/q\n"
                                       "second line")

    breaker = CircuitBreaker("orders", timeout=0.05, armed_delay=0.01, triggered_delay=0.01)
    policy = RetryPolicy(get_dialect("postgres"), breaker=breaker)
    with pytest.raises(CircuitBreakerOpenError) as info:
        ReceiverLoop(policy, batch_size=10, concurrency=1).run(one_batch)
    assert "***" in str(info.value)
    assert len(caplog.records) >= 3  # armed, each retry, triggered
    assert not any("second line" in r.getMessage() for r in caplog.records)
    _assert_clean(secret, caplog, str(info.value))


def test_blank_skips_absent_secrets_and_blanks_every_form_of_a_present_one() -> None:
    """A connection without a password (``None`` or empty: Airflow gives either) blanks nothing, and never the text
    ``on`` (what ``repr(None)`` would leave); a present one is blanked as written, percent-decoded and repr-escaped."""
    from airflow_sqlqueue.transport.common.redaction import MASK, blank

    text = "connection 'sqtest' on host db: could not connect"
    assert blank(text, None, "") == text
    assert blank("pw p%40ss and p@ss and it's", "p%40ss", "it's") == f"pw {MASK} and {MASK} and {MASK}"
