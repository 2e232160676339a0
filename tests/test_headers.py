"""NServiceBus headers: byte-exact serialization, parsing (NULL, empty, poison), wire timestamps."""

from __future__ import annotations

import json
import unicodedata
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_sqlqueue.transport import InvalidMessageError, OutgoingMessage
from airflow_sqlqueue.transport.wire import headers as h
from airflow_sqlqueue.transport.wire.headers import (
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
    ({"emoji": "🙂"}, '{"emoji":"\\uD83D\\uDE42"}'),  # outside the BMP: a surrogate pair, upper-case hex
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


@pytest.mark.parametrize("text", [" ", "\n\t ", "\u3000"])
def test_whitespace_only_headers_are_poison(text):
    # upstream's parse fails on whitespace only: the row goes to the error queue
    with pytest.raises(PoisonHeadersError, match="whitespace|not valid JSON"):
        parse_headers(text)


def test_deep_nesting_is_poison_not_a_recursion_error():
    with pytest.raises(PoisonHeadersError, match="nested too deeply"):
        parse_headers("[" * 200_000 + "]" * 200_000)
    with pytest.raises(PoisonHeadersError):
        parse_headers('{"a":' * 100_000 + '"x"' + "}" * 100_000)


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


# -- the bytes 9.1 writes (System.Text.Json, relaxed escaping, then "/" as "\\/") -------------------------------
@pytest.mark.parametrize(("value", "written"), [
    ("Zoë☃", "Zoë☃"),                      # other non-ASCII raw
    ("🚀", "\\uD83D\\uDE80"),                # outside the BMP: surrogate pair, upper-case hex
    ("\x1b", "\\u001B"),                     # C0 control without a short form
    ("\x0b\x0e\x1f", "\\u000B\\u000E\\u001F"),
    ("\b\t\n\f\r", "\\b\\t\\n\\f\\r"),      # the short forms
    ("\x7f", "\\u007F"),                     # DEL
    ("\x80\x85\x9f", "\\u0080\\u0085\\u009F"),   # C1 controls
    ("\xa0", "\\u00A0"),                     # no-break space
    ("\u2007\u202f\u3000", "\\u2007\\u202F\\u3000"),  # other space separators
    ("a b", "a b"),                          # U+0020 stays
    ("\u2028\u2029", "\\u2028\\u2029"),        # line and paragraph separators
    ("\ue000\uf8ff", "\\uE000\\uF8FF"),        # private use
    ("\u0378", "\\u0378"),                   # unassigned
    ("\u00ad\u200b", "\u00ad\u200b"),        # format characters (Cf) stay raw
    ("<>&'+`", "<>&'+`"),                    # relaxed: HTML-sensitive characters raw
    ("\\u0041", "\\\\u0041"),                # a literal backslash-u is not an escape
    ("a/b", "a\\/b"),
])
def test_escaping_as_9_1_writes_it(value, written):
    assert serialize_headers({"k": value}) == '{"k":"' + written + '"}'
    assert parse_headers('{"k":"' + written + '"}') == {"k": value}


@pytest.mark.parametrize(("text", "value"), [
    ('{"k":"\\ud83d\\ude80"}', "🚀"),        # 9.0.x DataContractJsonSerializer: lower-case hex
    ('{"k":"\\u001b\\u0085\\u2028"}', "\x1b\x85\u2028"),
    ('{"k":"\\uD83D\\uDE80"}', "🚀"),        # 9.1
    ('{"k":"🚀"}', "🚀"),                    # raw (other writers)
    ('{"NServiceBus.MessageId":"a","k":"x y"}', "x y"),  # v6-era varchar text
])
def test_reads_9_0_9_1_and_v6_output(text, value):
    assert parse_headers(text)["k"] == value


def test_a_lone_surrogate_is_refused_on_send_and_escaped_on_a_copy():
    with pytest.raises(InvalidMessageError, match="lone surrogate"):
        serialize_headers({"a": "\ud800"})
    copied = serialize_headers(parse_headers('{"a":"x\\ud800y"}'), limit=None)
    assert copied == '{"a":"x\\uD800y"}'
    copied.encode("utf-8")  # storable and printable
    assert parse_headers(copied) == {"a": "x\ud800y"}
    assert h.escape_surrogates(json.dumps({"a": "\udfff"}, ensure_ascii=False)) == '{"a": "\\uDFFF"}'


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


def _escaped_by_9_1(ch: str) -> bool:
    """The oracle, from the rule as written: outside the BMP, controls, separators but U+0020, private use,
    unassigned, surrogates."""
    return ord(ch) > 0xFFFF or (ch != " " and unicodedata.category(ch) in {"Cc", "Cs", "Co", "Cn", "Zl", "Zp", "Zs"})


# -- round-trip property ---------------------------------------------------------------------------
header_maps = st.dictionaries(st.text(max_size=30), st.none() | st.text(max_size=60), max_size=12)


@settings(max_examples=400, deadline=None)
@given(header_maps)
def test_round_trip_property(headers):
    text = serialize_headers(headers)
    assert parse_headers(text) == headers
    assert json.loads(text) == headers
    # compact and upstream-escaped: no raw '/', no raw character 9.1 escapes, no \\u escape for the others
    assert "/" not in text.replace("\\/", "")
    assert not [ch for ch in text if _escaped_by_9_1(ch)]
    if not any(ch < " " or ch == "\\" or _escaped_by_9_1(ch) for item in headers.items() for part in item
               if part for ch in part):
        assert "\\u" not in text
    if not any(" " in part or ":" in part or "," in part for item in headers.items() for part in item if part):
        assert " " not in text
