"""Throughput from the newest position (identity) between health samples: messages sent per minute, never
negative because a queue drained; a samples table made before ``newest_seq`` existed gets the column."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from airflow_sqlqueue.dashboard.queues import history_points, throughput_per_minute
from airflow_sqlqueue.maintenance.health import recent_samples, record_samples, sample
from airflow_sqlqueue.transport import OutgoingMessage
from tests.conftest import Db

OLD_TABLE = {"sqlite": "CREATE TABLE {t} (conn_id TEXT NOT NULL, queue_name TEXT NOT NULL, sampled_at TEXT NOT NULL, "
                       "depth INTEGER NOT NULL, oldest_age_seconds REAL NULL)",
             "postgres": "CREATE TABLE {t} (conn_id text NOT NULL, queue_name text NOT NULL, sampled_at timestamptz "
                         "NOT NULL, depth bigint NOT NULL, oldest_age_seconds double precision NULL)"}


def test_sends_per_minute_from_position_deltas_on_an_old_samples_table(db: Db) -> None:
    table = db.q("old_samples")
    db.sql(OLD_TABLE[db.kind].format(t=db.transport.dialect.qualified(db.transport.address(table))))
    queue = db.q("orders")
    db.transport.create_queues([queue])
    start = datetime.now(timezone.utc) - timedelta(minutes=30)
    sends = [0, 60, 0, 30]  # a drain between the 2nd and 3rd sample: the depth falls, the sends stay >= 0
    for i, n in enumerate(sends):
        if n:
            db.transport.send_many(queue, [OutgoingMessage(body=b"x") for _ in range(n)])
        if i == 2:
            while db.transport.receive(queue, max_messages=100):
                pass
        measured = sample(db.transport, queue)
        record_samples(db.transport, [{"conn_id": "c", **measured}], table, now=start + timedelta(minutes=5 * i))
    samples = recent_samples(db.transport, table, "c", queue, start - timedelta(minutes=1))
    assert [s["depth"] for s in samples] == [0, 60, 0, 30]
    seqs = [s["newest_seq"] for s in samples]
    assert seqs[0] is None and seqs[2] == seqs[1] and seqs[3] == seqs[1] + 30  # receives never lower it
    points = history_points(samples)
    assert [p["throughput_per_minute"] for p in points] == [None, None, 0.0, 6.0]  # 30 in 5 min
    assert throughput_per_minute([samples[3], {**samples[1], "sampled_at": samples[3]["sampled_at"]
                                               + timedelta(minutes=5)}]) == [None, None]  # went back: unknown
