"""The headers text of a batched send is byte for byte what one message alone would get.

``BatchHeaders`` serializes the standard headers once per distinct set of the caller's own headers and joins
each message's native Id into that template; these tests hold it to the plain path
(``serialize_headers({**standard_headers(...), **own})``) for every kind of own headers, including the ones it
must not template (an own MessageId that is not a GUID and no ConversationId: a new one per message).
"""

from __future__ import annotations

import itertools
import json
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_sqlqueue.transport.common.errors import InvalidMessageError
from airflow_sqlqueue.transport.wire import headers as h
from airflow_sqlqueue.transport.wire.ids import id_stream
from airflow_sqlqueue.transport.wire.standard_headers import BatchHeaders, Origin, standard_headers

TIME_SENT = "2026-11-25 10:00:00:000000 Z"
ORIGINS = [Origin("airflow"), Origin("Sales", "Reply", reply_to="Sales@[dbo]@[nsb]",
                                     incoming={h.MESSAGE_ID: "m-1", h.CONVERSATION_ID: "c-1"})]


def plain(origin: Origin, own: dict, native_id: str, content_type: str | None, time_sent: str = TIME_SENT) -> str:
    own_id = own.get(h.MESSAGE_ID)
    message_id = own_id if isinstance(own_id, str) and own_id else native_id
    return h.serialize_headers({**standard_headers(origin, message_id, content_type=content_type,
                                                   time_sent=time_sent), **own})


OWN = [
    {},
    {"NServiceBus.EnclosedMessageTypes": "Sales.OrderPlaced, Sales"},
    {h.MESSAGE_ID: str(uuid.uuid4()), h.CONVERSATION_ID: "conv/1", "x": "ünï\u2028code/"},
    {h.MESSAGE_ID: "not-a-guid", h.CONVERSATION_ID: "given"},
    {h.TIME_SENT: "2020-01-01 00:00:00:000000 Z", h.CONTENT_TYPE: "text/plain", "k": None},
    {h.CONVERSATION_ID: None, h.CORRELATION_ID: "corr"},
]


@pytest.mark.parametrize("origin", ORIGINS, ids=["own endpoint", "in a handler"])
@pytest.mark.parametrize("content_type", [None, "application/json"])
def test_each_message_gets_the_text_it_would_get_alone(origin: Origin, content_type: str | None) -> None:
    writer = BatchHeaders(origin, TIME_SENT)
    ids = id_stream()
    for own in itertools.islice(itertools.cycle(OWN), 60):  # repeats: templates are reused
        native = str(next(ids))
        assert writer.text(own, native, content_type) == plain(origin, own, native, content_type)


def test_an_own_message_id_that_is_not_a_guid_gets_a_new_conversation_per_message() -> None:
    writer = BatchHeaders(Origin("airflow"), TIME_SENT)
    own = {h.MESSAGE_ID: "order-42"}
    conversations = {json.loads(writer.text(own, str(uuid.uuid4()), None))[h.CONVERSATION_ID] for _ in range(5)}
    assert len(conversations) == 5


def test_bad_headers_are_refused_each_time_with_the_plain_error() -> None:
    writer = BatchHeaders(Origin("airflow"), TIME_SENT)
    for _ in range(2):
        with pytest.raises(InvalidMessageError, match="has a int value"):
            writer.text({"n": 1}, str(uuid.uuid4()), None)
        with pytest.raises(InvalidMessageError, match="over the limit"):
            writer.text({"big": "x" * (h.MAX_HEADERS_CHARS)}, str(uuid.uuid4()), None)
        with pytest.raises(InvalidMessageError, match="lone surrogate"):
            writer.text({"s": "\ud800"}, str(uuid.uuid4()), None)


def test_a_batch_of_distinct_headers_gives_up_templates_and_stays_exact() -> None:
    writer = BatchHeaders(Origin("airflow"), TIME_SENT)
    for n in range(300):
        own = {"n": str(n)}
        native = str(uuid.uuid4())
        assert writer.text(own, native, None) == plain(Origin("airflow"), own, native, None)


@pytest.mark.parametrize("origin", ORIGINS, ids=["own endpoint", "in a handler"])
def test_a_writer_kept_across_sends_writes_each_send_its_own_time(origin: Origin) -> None:
    writer = BatchHeaders(origin)  # as a transport keeps one for its own sends
    ids = id_stream()
    for second, own in enumerate(itertools.islice(itertools.cycle(OWN), 40)):
        time_sent = f"2026-11-25 10:00:{second % 60:02d}:{second * 1234:06d} Z"
        native = str(next(ids))
        assert writer.text(own, native, None, time_sent) == plain(origin, own, native, None, time_sent)


def test_own_headers_that_hold_a_placeholder_are_written_as_given() -> None:
    """A template is only used where its placeholders are exactly the standard headers' Id and time."""
    writer = BatchHeaders(Origin("airflow"))
    hostile = [{"x": writer._id_placeholder}, {writer._time_placeholder: "k"},
               {"y": f"a{writer._time_placeholder}b{writer._id_placeholder}"}]
    for own in hostile * 3:
        native = str(uuid.uuid4())
        assert writer.text(own, native, None, TIME_SENT) == plain(Origin("airflow"), own, native, None)


def test_a_writer_kept_for_long_forgets_old_templates_and_stays_exact() -> None:
    writer = BatchHeaders(Origin("airflow"), TIME_SENT)
    for n in range(1200):  # several times the templates it keeps, each seen twice in a row
        own = {"n": str(n // 2)}
        native = str(uuid.uuid4())
        assert writer.text(own, native, None) == plain(Origin("airflow"), own, native, None)


text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.dictionaries(st.sampled_from([h.MESSAGE_ID, h.CONVERSATION_ID, h.CORRELATION_ID, h.TIME_SENT,
                                                  "a", "b/c", "\u00e9"]) | text,
                                st.none() | text | st.sampled_from([str(uuid.uuid4()), ""]), max_size=5),
                min_size=1, max_size=8),
       st.sampled_from(ORIGINS), st.none() | st.sampled_from(["application/json", "text/x\u00e9"]))
def test_any_own_headers_match_the_plain_path(batch: list[dict], origin: Origin, content_type: str | None) -> None:
    writer = BatchHeaders(origin, TIME_SENT)
    for own in batch * 2:
        native = str(uuid.uuid4())
        got = writer.text(own, native, content_type)
        expected = plain(origin, own, native, content_type)
        if own.get(h.MESSAGE_ID) and h.CONVERSATION_ID not in own and not origin.incoming \
                and len(str(own[h.MESSAGE_ID])) != 36:
            got, expected = json.loads(got), json.loads(expected)  # a new random ConversationId each
            got.pop(h.CONVERSATION_ID), expected.pop(h.CONVERSATION_ID)
        assert got == expected
