-- Queue health samples (SQLite). Written only when the maintenance configuration sets
-- record_health_samples: one row per (connection, queue) per health run, kept for a bounded time.
-- {samples} is the samples table, {queue_time_index} and {time_index} its indexes (quoted by the dialect).
-- sampled_at is UTC text "YYYY-MM-DD HH:MM:SS.ffffff", which sorts in time order.

-- create_health_samples --
-- The samples table (idempotent).
CREATE TABLE IF NOT EXISTS {samples} (
    conn_id TEXT NOT NULL,
    queue_name TEXT NOT NULL,
    sampled_at TEXT NOT NULL,
    depth INTEGER NOT NULL,
    oldest_age_seconds REAL NULL,
    newest_seq INTEGER NULL
)

-- health_samples_newest_seq_missing --
-- Whether a table made before newest_seq existed lacks it (SQLite has no ADD COLUMN IF NOT EXISTS).
SELECT count(*) = 0 FROM pragma_table_info(%(samples_table)s) WHERE name = 'newest_seq'

-- add_health_samples_newest_seq --
-- newest_seq (the newest position at the sample: throughput from its deltas) on a table made before it existed.
ALTER TABLE {samples} ADD COLUMN newest_seq INTEGER NULL

-- create_health_samples_queue_index --
-- Serves "the last N hours of queue Q on connection C" (the depth-over-time plot).
CREATE INDEX IF NOT EXISTS {queue_time_index} ON {samples} (conn_id, queue_name, sampled_at)

-- create_health_samples_time_index --
-- Serves the retention delete.
CREATE INDEX IF NOT EXISTS {time_index} ON {samples} (sampled_at)

-- insert_health_sample --
-- One sample.
INSERT INTO {samples} (conn_id, queue_name, sampled_at, depth, oldest_age_seconds, newest_seq)
VALUES (%(conn_id)s, %(queue_name)s, %(sampled_at)s, %(depth)s, %(oldest_age_seconds)s, %(newest_seq)s)

-- delete_old_health_samples --
-- Retention: drop samples taken before %(before)s.
DELETE FROM {samples} WHERE sampled_at < %(before)s

-- recent_health_samples --
-- The samples of one queue since %(since)s, oldest first.
SELECT sampled_at, depth, oldest_age_seconds, newest_seq
FROM {samples}
WHERE conn_id = %(conn_id)s AND queue_name = %(queue_name)s AND sampled_at >= %(since)s
ORDER BY sampled_at
