"""The message page's conversation lookup reads a bounded window of positions around the message (never the whole
error queue), says where it looked, and looks further or from the start when asked: SQLite and PostgreSQL."""

from __future__ import annotations

from airflow_sqlqueue.dashboard import message
from airflow_sqlqueue.transport import OutgoingMessage
from airflow_sqlqueue.transport.wire import headers as h
from tests.conftest import Db

TALK = "c0ffee00-0000-4000-8000-000000000001"


def test_the_conversation_is_looked_for_in_windows_of_positions(db: Db) -> None:
    db.transport.create_queues([db.q("orders"), db.q("error")])
    ids = [str(i) for i in db.transport.send_many(db.q("error"), [OutgoingMessage(body=b"{}", headers={
        h.FAILED_Q: "orders", h.EXCEPTION_TYPE: "Boom",
        h.CONVERSATION_ID: TALK if i in (4, 149, 155, 289) else f"other-{i}"}) for i in range(300)])]
    page = db.transport.failed_page(db.q("error"), after_seq=0, limit=300)
    seq = {p.id: p.seq for p in page}
    me = ids[149]
    found = message.conversation(db.transport, db.q("error"), TALK, me, seq=seq[me], window=100)
    assert [m["id"] for m in found["messages"]] == [ids[155]]  # only the window around the message was read
    assert found["after"] == seq[me] - 50 and found["next_after"] == found["after"] + 100
    assert found["more"] is True
    further = message.conversation(db.transport, db.q("error"), TALK, me, after=found["next_after"], window=100)
    assert [m["id"] for m in further["messages"]] == [ids[289]] and further["next_after"] == seq[ids[299]]
    last = message.conversation(db.transport, db.q("error"), TALK, me, after=further["next_after"], window=100)
    assert last["messages"] == [] and last["next_after"] is None  # the end: nothing further to look at
    start = message.conversation(db.transport, db.q("error"), TALK, me, after=0, window=100)
    assert [m["id"] for m in start["messages"]] == [ids[4]] and start["next_after"] is not None
    assert message.conversation(db.transport, db.q("error"), None, me) == {"messages": [], "more": False,
                                                                          "after": 0, "next_after": None}
