"""NServiceBus headers: byte-exact serialization, parsing (NULL, empty, poison), wire timestamps."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_sqlqueue.transport import InvalidMessageError, OutgoingMessage
from airflow_sqlqueue.transport import headers as h
from airflow_sqlqueue.transport.headers import (
    MAX_HEADERS_CHARS,
    PoisonHeadersError,
    format_wire_time,
    parse_headers,
    parse_wire_time,
    serialize_headers,
)


@pytest.mark.parametrize(("headers", "text"), [
    ({}, "{}"),
    ({"a/b": "é"}, '{"a\\/b":"é"}'),
    ({"a": "1", "b": "2"}, '{"a":"1","b":"2"}'),
    ({"NServiceBus.ContentType": "application/json"}, '{"NServiceBus.ContentType":"application\\/json"}'),
    ({"k": None}, '{"k":null}'),
    ({"k": ""}, '{"k":""}'),
    ({"名前": "値 ü ß €"}, '{"名前":"値 ü ß €"}'),
    ({"q": 'say "hi"'}, '{"q":"say \\"hi\\""}'),
    ({"bs": "C:\\dir"}, '{"bs":"C:\\\\dir"}'),
    ({"bs/": "\\/"}, '{"bs\\/":"\\\\\\/"}'),
    ({"nl": "a\nb\tc"}, '{"nl":"a\\nb\\tc"}'),
    ({"emoji": "🙂"}, '{"emoji":"🙂"}'),
    ({"z": "1", "a": "2"}, '{"z":"1","a":"2"}'),  # insertion order kept, no sorting
])
def test_serialize_exactly_as_upstream(headers, text):
    assert serialize_headers(headers) == text
    assert parse_headers(text) == headers


def test_serialize_is_compact_and_escapes_every_slash():
    text = serialize_headers({"NServiceBus.ReplyToAddress": "a/b/c", "x y": "p q, r: s"})
    assert text == '{"NServiceBus.ReplyToAddress":"a\\/b\\/c","x y":"p q, r: s"}'
    assert "/" not in text.replace("\\/", "")


def test_realistic_nservicebus_headers_byte_for_byte():
    headers = {
        h.MESSAGE_ID: "4e1d0a3c-7c0e-4a8e-9a0b-b14a00c8b8a4",
        h.ENCLOSED_MESSAGE_TYPES: "Sales.OrderPlaced, Sales.Messages, Version=1.0.0.0",
        h.CONTENT_TYPE: "application/json",
        h.TIME_SENT: "2024-05-01 12:34:56:123456 Z",
        h.ORIGINATING_ENDPOINT: "Sales",
    }
    assert serialize_headers(headers).encode("utf-8") == (
        b'{"NServiceBus.MessageId":"4e1d0a3c-7c0e-4a8e-9a0b-b14a00c8b8a4",'
        b'"NServiceBus.EnclosedMessageTypes":"Sales.OrderPlaced, Sales.Messages, Version=1.0.0.0",'
        b'"NServiceBus.ContentType":"application\\/json",'
        b'"NServiceBus.TimeSent":"2024-05-01 12:34:56:123456 Z",'
        b'"NServiceBus.OriginatingEndpoint":"Sales"}'
    )


@pytest.mark.parametrize(("headers", "words"), [
    ({"a": 1}, ["'a'", "int", "str"]),
    ({"a": 1.5}, ["'a'", "float"]),
    ({"a": True}, ["'a'", "bool"]),
    ({"a": b"x"}, ["'a'", "bytes"]),
    ({"a": ["x"]}, ["'a'", "list"]),
    ({"a": {"b": "c"}}, ["'a'", "dict"]),
    ({1: "x"}, ["header names must be str", "1"]),
    ({None: "x"}, ["header names must be str"]),
])
def test_serialize_refuses_non_str_with_clear_error(headers, words):
    with pytest.raises(InvalidMessageError) as info:
        serialize_headers(headers)
    for word in words:
        assert word in str(info.value)


@pytest.mark.parametrize("headers", [[("a", "b")], "a=b", None, 5])
def test_serialize_refuses_non_mapping(headers):
    with pytest.raises(InvalidMessageError, match="mapping"):
        serialize_headers(headers)


def test_serialize_refuses_oversized_headers():
    with pytest.raises(InvalidMessageError, match="over the limit"):
        serialize_headers({"big": "x" * MAX_HEADERS_CHARS})


def test_serialize_refuses_text_that_is_not_unicode():
    with pytest.raises(InvalidMessageError, match="'a'"):
        serialize_headers({"a": "bad \udcff byte"})


def test_text_body_that_is_not_unicode_refused_clearly():
    with pytest.raises(InvalidMessageError):
        OutgoingMessage("bad \udcff byte").validated()


def test_outgoing_message_validates_its_headers():
    with pytest.raises(InvalidMessageError, match="'n'"):
        OutgoingMessage(b"x", {"n": 5}).validated()
    text, body, ttbr, delay = OutgoingMessage("é", {"a/b": "é"}, time_to_be_received=1.5).validated()
    assert (text, body, ttbr, delay) == ('{"a\\/b":"é"}', "é".encode(), 1500, None)


@pytest.mark.parametrize("text", [None, ""])
def test_null_or_empty_reads_as_empty_object(text):
    assert parse_headers(text) == {}


@pytest.mark.parametrize("text", [" ", "\n\t "])
def test_whitespace_only_is_poison_as_upstream(text):
    """Upstream's parser fails on whitespace-only Headers (reference/wire-format.md): poison, not ``{}``."""
    with pytest.raises(PoisonHeadersError, match="only whitespace"):
        parse_headers(text)


@pytest.mark.parametrize(("text", "words"), [
    ("not json", ["not valid JSON"]),
    ('{"a":"b"', ["not valid JSON"]),
    ("{'a':'b'}", ["not valid JSON"]),
    ('["a","b"]', ["JSON list", "not an object"]),
    ("[]", ["JSON list"]),
    ('"text"', ["JSON str", "not an object"]),
    ("42", ["JSON int"]),
    ("null", ["JSON NoneType"]),
    ('{"a":1}', ["'a'", "JSON int", "not a string"]),
    ('{"a":1.5}', ["'a'", "JSON float"]),
    ('{"a":true}', ["'a'", "JSON bool"]),
    ('{"a":["x"]}', ["'a'", "JSON list"]),
    ('{"a":{"b":"c"}}', ["'a'", "JSON dict"]),
])
def test_poison_headers(text, words):
    with pytest.raises(PoisonHeadersError) as info:
        parse_headers(text)
    for word in words:
        assert word in str(info.value)
    assert isinstance(info.value, ValueError)


def test_parse_reads_dotnet_escapes():
    assert parse_headers('{"t":"a\\/b","u":"\\u00e9","n":null}') == {"t": "a/b", "u": "é", "n": None}
    assert parse_headers(' { "a" : "b" } ') == {"a": "b"}  # whitespace written by other serializers


# -- wire time -------------------------------------------------------------------------------------
def test_wire_time_format():
    moment = datetime(2024, 1, 2, 3, 4, 5, 67890, tzinfo=timezone.utc)
    assert format_wire_time(moment) == "2024-01-02 03:04:05:067890 Z"
    assert parse_wire_time("2024-01-02 03:04:05:067890 Z") == moment


def test_wire_time_converts_to_utc():
    moment = datetime(2024, 1, 2, 5, 4, 5, 1, tzinfo=timezone(timedelta(hours=2)))
    assert format_wire_time(moment) == "2024-01-02 03:04:05:000001 Z"


def test_wire_time_now_is_utc_and_parses_back():
    before = datetime.now(timezone.utc)
    text = format_wire_time()
    after = datetime.now(timezone.utc)
    assert len(text) == len("yyyy-MM-dd HH:mm:ss:ffffff Z")
    assert text.endswith(" Z") and text[19] == ":"
    parsed = parse_wire_time(text)
    assert parsed.tzinfo is not None
    assert before - timedelta(microseconds=1) <= parsed <= after


@pytest.mark.parametrize("text", ["2024-01-02T03:04:05Z", "2024-01-02 03:04:05.067890 Z", "garbage", ""])
def test_wire_time_refuses_other_formats(text):
    with pytest.raises(ValueError):
        parse_wire_time(text)


@settings(max_examples=200, deadline=None)
@given(st.datetimes(min_value=datetime(1900, 1, 1), max_value=datetime(9999, 12, 31),
                    timezones=st.just(timezone.utc)))
def test_wire_time_round_trip_property(moment):
    assert parse_wire_time(format_wire_time(moment)) == moment


# -- round-trip property ---------------------------------------------------------------------------
header_maps = st.dictionaries(st.text(max_size=30), st.none() | st.text(max_size=60), max_size=12)


@settings(max_examples=400, deadline=None)
@given(header_maps)
def test_round_trip_property(headers):
    text = serialize_headers(headers)
    assert parse_headers(text) == headers
    assert json.loads(text) == headers
    # compact and upstream-escaped: no raw '/', and no \\u escapes for printable non-ASCII
    assert "/" not in text.replace("\\/", "")
    if not any(ch < " " or ch == "\\" for item in headers.items() for part in item if part for ch in part):
        assert "\\u" not in text
    if not any(" " in part or ":" in part or "," in part for item in headers.items() for part in item if part):
        assert " " not in text
