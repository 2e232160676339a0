"""Numbers are numbers (NaN and infinity refused everywhere, receivers bounded by the database) and the terminal
is not an attack surface (the CLI escapes controls, bidi and invisible characters from rows and queue names)."""

from __future__ import annotations

import tests.airflow_env  # noqa: F401  (sets AIRFLOW_HOME before any airflow import)

# isort: split

import json
import math

import pytest

from airflow_sqlqueue.transport import InvalidMessageError, OutgoingMessage
from airflow_sqlqueue.transport.common.printable import printable, printable_json

from .helpers import count, run_cli

BAD_NUMBERS = [math.nan, math.inf, -math.inf]


# -- numbers ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("value", BAD_NUMBERS)
def test_transport_refuses_nan_and_infinity_and_changes_nothing(queues, value):
    t, q = queues.transport, queues.q("orders")
    t.send(q, b"stays")
    for call in (lambda: t.process(q, lambda m, c: None, max_duration=value),
                 lambda: t.drain(q, len, max_duration=value),
                 lambda: t.process(q, lambda m, c: None, concurrency=value),
                 lambda: t.drain(q, len, batch_size=value)):
        with pytest.raises(ValueError, match="must be a positive"):
            call()
    for message in (OutgoingMessage(b"x", time_to_be_received=value), OutgoingMessage(b"x", delay=value)):
        with pytest.raises(InvalidMessageError, match="seconds"):
            t.send(q, message)
    assert count(queues, "orders") == 1


@pytest.mark.parametrize("value", [*BAD_NUMBERS, "nan", "inf"])
def test_airflow_entry_points_refuse_nan_and_infinity(value):
    from airflow_sqlqueue.operators.drain import SqlQueueDrainOperator
    from airflow_sqlqueue.sensors.sqlqueue import SqlQueueSensor
    from airflow_sqlqueue.triggers.sqlqueue import SqlQueueMessageTrigger, SqlQueueTrigger

    for make in (lambda: SqlQueueSensor(task_id="s", queue_name="q", poll_interval=value),
                 lambda: SqlQueueTrigger(conn_id="c", queue_name="q", min_messages=1, poll_interval=value),
                 lambda: SqlQueueMessageTrigger(conn_id="c", queue_name="q", poll_interval=value)):
        with pytest.raises((TypeError, ValueError)):
            make()
    with pytest.raises(ValueError, match="max_duration must be a positive, finite number"):  # given or rendered
        SqlQueueDrainOperator(task_id="d", queue_name="q", output_path="/tmp/never",
                              max_duration=value)._check_sizes(rendered=True)


@pytest.mark.parametrize("option", ["--ttbr", "--delay"])
@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e400"])
def test_cli_refuses_nan_and_infinity(queues, option, value):
    code, _, err = run_cli(queues, "send", queues.q("orders"), "--body", "x", f"{option}={value}")
    assert code == 2 and "seconds" in err
    assert count(queues, "orders") == 0


def test_concurrency_has_an_upper_bound_that_fits_the_database(queues):
    t, q = queues.transport, queues.q("orders")
    t.send(q, b"stays")
    if queues.kind == "sqlite":
        with pytest.raises(ValueError, match="over 64, the most receivers"):
            t.drain(q, len, concurrency=65)
        t.drain(q, len, concurrency=64, max_messages=0)  # the cap itself is fine
    else:
        [(limit,)] = queues.sql("SELECT current_setting('max_connections')::int "
                                "- current_setting('superuser_reserved_connections')::int")
        with pytest.raises(ValueError, match=rf"allows {limit} .*max_connections.*use at most {limit - 1}"):
            t.check_concurrency(limit)
        with pytest.raises(ValueError, match="max_connections"):  # the limit read once is checked by every run
            t.process(q, lambda m, c: None, concurrency=limit)
        with pytest.raises(ValueError, match="max_connections"):
            t.drain(q, len, concurrency=10**6)
    assert count(queues, "orders") == 1


# -- the terminal -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("char", ["\x1b", "\x07", "\x00", "\x7f", "\x85", "\x9b", "\u202a", "\u202b", "\u202c",
                                  "\u202d", "\u202e", "\u2066", "\u2067", "\u2068", "\u2069", "\u200e", "\u200f",
                                  "\u061c", "\u2028", "\u2029", "\ufeff", "\u200b", "\ud800", "\U000e0041"])
def test_printable_escapes_every_character_a_terminal_acts_on(char):
    shown = printable(f"a{char}b")
    assert char not in shown and shown.startswith("a\\") and shown.endswith("b")
    line = printable_json(json.dumps({"k": f"a{char}b"}, ensure_ascii=False))
    assert char not in line and json.loads(line) == {"k": f"a{char}b"}  # same value for a parser


def test_printable_keeps_ordinary_text():
    text = "Zoë ☃ 日本語 🚀 ok \\ / \" '"
    assert printable(text) == text and printable_json(json.dumps(text, ensure_ascii=False)) == json.dumps(
        text, ensure_ascii=False)




ATTACK = "\x1b]0;owned\x07\x1b[2J\u202eexe.txt\u2066"


def test_queue_names_bodies_and_errors_are_escaped_in_human_output(queues):
    """A queue named by another program, failures it recorded, and error messages quoting a name: the CLI shows
    them escaped in every human command."""
    t = queues.transport
    evil = queues.q("q" + ATTACK)
    t.create_queue(evil)
    t.send(evil, OutgoingMessage(ATTACK, {"NServiceBus.EnclosedMessageTypes": ATTACK}))
    t.send(queues.q("error"), OutgoingMessage(ATTACK, {"NServiceBus.FailedQ": evil,
                                                       "NServiceBus.ExceptionInfo.ExceptionType": ATTACK}))
    outputs = [run_cli(queues, "list"), run_cli(queues, "check", evil), run_cli(queues, "peek", evil),
               run_cli(queues, "retry-errors", "--list"), run_cli(queues, "receive", evil),
               run_cli(queues, "send", evil, "--body", "x"), run_cli(queues, "receive", queues.q("missing" + ATTACK)),
               run_cli(queues, "purge-expired", evil), run_cli(queues, "retry-errors", "--list", "--json"),
               run_cli(queues, "receive", evil, "--json", "--max", "5")]
    for _, out, err in outputs:
        for char in "\x1b\x07\u202e\u2066":
            assert char not in out + err, (char, out, err)
    assert "\\x1b]0;owned\\x07" in outputs[4][1]  # shown, as escapes
    assert "does not exist" in outputs[6][2] and outputs[6][0] == 2


def test_drain_operator_max_concurrency_fits_the_database(queues, monkeypatch):
    from airflow_sqlqueue.operators.drain import SqlQueueDrainOperator

    if queues.kind == "sqlite":
        fields = {"conn_type": "sqlite", "host": queues.url[len("sqlite:///"):]}
    else:
        fields = tests.airflow_env.pg_connection_fields()
    monkeypatch.setenv("AIRFLOW_CONN_HOSTILE_LIMIT", json.dumps(fields))
    queues.transport.send(queues.q("orders"), b"stays")
    op = SqlQueueDrainOperator(task_id="d", queue_name=queues.q("orders"), sqlqueue_conn_id="hostile_limit",
                               output_path="/tmp/never-written", max_concurrency=100_000)
    with pytest.raises(ValueError, match="max_concurrency=100000 "):
        op.execute({"run_id": "r"})
    assert count(queues, "orders") == 1
