"""``batch_table``: the columns of a drained batch, built column by column (issue 33), keep every message exact."""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timezone

from airflow_sqlqueue.operators.parquet import batch_table
from airflow_sqlqueue.transport import ReceivedMessage


def test_columns_keep_ids_queues_and_headers_exact() -> None:
    ids = [uuid.uuid4(), str(uuid.uuid4()), uuid.uuid4()]
    messages = [
        ReceivedMessage(ids[0], {"k": "v"}, b"one", 1, "public.a", '{"k":"v"}'),
        # headers changed after the receive (no stored text) holding a lone surrogate: written as its escape
        ReceivedMessage(ids[1], {"k": "x\ud800y"}, b"two", 2, "public.a", None),
        ReceivedMessage(ids[2], {"n": "1"}, None, 3, "public.b", '{"n":"1"}'),
    ]
    when = datetime(2026, 11, 27, tzinfo=timezone.utc)
    table = batch_table(messages, when).to_pydict()
    assert table["id"] == [str(i) for i in ids]
    assert table["seq"] == [1, 2, 3] and table["queue"] == ["public.a", "public.a", "public.b"]
    assert table["headers"][0] == '{"k":"v"}' and table["headers"][1] == '{"k":"x\\uD800y"}'
    assert json.loads(table["headers"][1]) == {"k": "x\ud800y"}
    assert table["body"] == [b"one", b"two", None] and table["received_at"] == [when] * 3


def test_one_queue_batch_and_empty_batch() -> None:
    messages = [ReceivedMessage(uuid.uuid4(), {}, b"", i, "public.q", "{}") for i in range(3)]
    table = batch_table(messages, datetime.now(timezone.utc))
    assert table.column("queue").to_pylist() == ["public.q"] * 3
    assert batch_table([], datetime.now(timezone.utc)).num_rows == 0


def test_id_column_as_returned_when_canonical_else_each_id_text() -> None:
    """PostgreSQL's ``id::text`` ids go into the column as returned (one check over the column); any other id in
    the batch (upper case, not a UUID, a UUID object) makes every id ``id_text``, as before."""
    canonical = [str(uuid.uuid4()) for _ in range(3)]
    when = datetime.now(timezone.utc)

    def ids(raw: list[object]) -> list[str]:
        messages = [ReceivedMessage(i, {}, b"", n, "q", "{}") for n, i in enumerate(raw)]
        return batch_table(messages, when)["id"].to_pylist()

    assert ids(canonical) == canonical
    upper = str(uuid.uuid4()).upper()
    assert ids([*canonical, upper]) == [*canonical, upper.lower()]
    loose = "order-17"  # SQLite's loose types: a stable UUID derived from the text
    assert ids([canonical[0], loose]) == [canonical[0], ReceivedMessage(loose, {}, b"", 1).id_text]
    native = uuid.uuid4()
    assert ids([native, canonical[1]]) == [str(native), canonical[1]]
    assert ids([7, canonical[2]]) == [ReceivedMessage(7, {}, b"", 1).id_text, canonical[2]]
