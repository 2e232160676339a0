-- Every statement airflow-sqlqueue runs on SQLite (the embedded default; same logical columns as PostgreSQL).
-- %(name)s is a parameter (bound by the driver, never formatted in); {name} is an identifier quoted by the
-- dialect. SQLite has one writer at a time: every receive transaction starts with BEGIN IMMEDIATE, so
-- receivers never see each other's rows and no lock-skipping is needed.

-- table_exists --
-- 1 when the table exists.
SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = %(table_name)s

-- create_queue_table --
-- The queue table; seq is the rowid (never reused thanks to AUTOINCREMENT), so FIFO order is an index.
CREATE TABLE IF NOT EXISTS {queue} (
    id TEXT NOT NULL,
    expires TEXT NULL,
    headers TEXT NOT NULL,
    body BLOB NULL,
    seq INTEGER PRIMARY KEY AUTOINCREMENT
);

-- create_queue_expires_index --
-- Partial index used by purge of expired messages.
CREATE INDEX IF NOT EXISTS {expires_index} ON {queue} (expires) WHERE expires IS NOT NULL;

-- create_delayed_table --
-- The delayed-delivery store of an endpoint ("<endpoint>.Delayed").
CREATE TABLE IF NOT EXISTS {delayed} (
    headers TEXT NOT NULL,
    body BLOB NULL,
    due TEXT NOT NULL,
    seq INTEGER PRIMARY KEY AUTOINCREMENT
);

-- create_delayed_due_index --
-- Index used by the delayed-message mover.
CREATE INDEX IF NOT EXISTS {due_index} ON {delayed} (due);

-- send --
-- Insert one message; Expires (UTC text) is computed by the database clock from a millisecond TTBR.
INSERT INTO {queue} (id, expires, headers, body)
VALUES (
    %(id)s,
    CASE WHEN %(ttbr_ms)s IS NULL THEN NULL
         ELSE strftime('%%Y-%%m-%%d %%H:%%M:%%f', julianday('now') + %(ttbr_ms)s / 86400000.0) END,
    %(headers)s,
    %(body)s)

-- insert_raw --
-- Copy a row unchanged (same Id, no Expires): error queue moves and retries.
INSERT INTO {queue} (id, expires, headers, body) VALUES (%(id)s, NULL, %(headers)s, %(body)s)

-- send_delayed --
-- Store a message in the delayed table, due after %(delay_ms)s milliseconds (database clock).
INSERT INTO {delayed} (headers, body, due)
VALUES (%(headers)s, %(body)s,
        strftime('%%Y-%%m-%%d %%H:%%M:%%f', julianday('now') + %(delay_ms)s / 86400000.0))

-- receive_batch --
-- Delete up to %(batch_size)s of the oldest rows and return them.
DELETE FROM {queue}
WHERE seq IN (SELECT seq FROM {queue} ORDER BY seq LIMIT %(batch_size)s)
RETURNING id, seq, (expires IS NOT NULL AND expires < strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now')) AS expired,
          headers, body

-- receive_range --
-- Delete up to %(batch_size)s of the oldest rows with %(first_seq)s <= seq <= %(last_seq)s and return them: one
-- partition of a partitioned drain (the range keeps partitions disjoint).
DELETE FROM {queue}
WHERE seq IN (SELECT seq FROM {queue} WHERE seq BETWEEN %(first_seq)s AND %(last_seq)s
              ORDER BY seq LIMIT %(batch_size)s)
RETURNING id, seq, (expires IS NOT NULL AND expires < strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now')) AS expired,
          headers, body

-- seq_bounds --
-- Oldest and newest positions (both ends of the rowid; NULLs when empty): what a partitioned drain splits.
SELECT (SELECT min(seq) FROM {queue}), (SELECT max(seq) FROM {queue})

-- lock_batch --
-- Read up to %(batch_size)s of the oldest rows (the write lock taken by BEGIN IMMEDIATE holds them).
SELECT id, seq, (expires IS NOT NULL AND expires < strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now')) AS expired,
       headers, body
FROM {queue} ORDER BY seq LIMIT %(batch_size)s

-- lock_after --
-- Read rows after a position, oldest first, under the transaction's write lock.
SELECT id, seq, (expires IS NOT NULL AND expires < strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now')) AS expired,
       headers, body
FROM {queue} WHERE seq > %(after_seq)s ORDER BY seq LIMIT %(batch_size)s

-- browse --
-- Read rows after a position without deleting them.
SELECT id, seq, (expires IS NOT NULL AND expires < strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now')) AS expired,
       headers, body
FROM {queue} WHERE seq > %(after_seq)s ORDER BY seq LIMIT %(batch_size)s

-- delete_by_seq --
-- Delete one row.
DELETE FROM {queue} WHERE seq = %(seq)s

-- delete_by_id --
-- Delete a message by its native Id (the error-queue browser's delete action).
DELETE FROM {queue} WHERE id = %(id)s

-- delete_by_seqs --
-- Delete the rows a batch finished with, in one statement (%(seqs)s is a JSON array of integers).
DELETE FROM {queue} WHERE seq IN (SELECT value FROM json_each(%(seqs)s))

-- peek --
-- Depth estimate: newest minus oldest position + 1 (both ends of the rowid: O(1)). Each end is its own
-- subquery: SQLite's min/max shortcut only applies to a lone min() or max(); together they scan the table.
SELECT COALESCE((SELECT max(seq) FROM {queue}) - (SELECT min(seq) FROM {queue}) + 1, 0)

-- head_headers --
-- Headers of the oldest row (its TimeSent gives the age of the queue).
SELECT headers FROM {queue} ORDER BY seq LIMIT 1

-- purge_expired --
-- Delete up to %(batch_size)s expired rows by seq.
DELETE FROM {queue}
WHERE seq IN (SELECT seq FROM {queue} WHERE expires < strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now')
              LIMIT %(batch_size)s)

-- select_due_delayed --
-- Due delayed messages, oldest due first (moved by the mover in the same transaction).
SELECT seq, headers, body FROM {delayed}
WHERE due < strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now') ORDER BY due, seq LIMIT %(batch_size)s

-- savepoint --
-- Mark a point to undo one message's work.
SAVEPOINT {savepoint}

-- rollback_to_savepoint --
-- Undo one message's work, keeping the rest of the transaction.
ROLLBACK TO SAVEPOINT {savepoint}

-- release_savepoint --
-- Keep one message's work.
RELEASE SAVEPOINT {savepoint}

-- discover_queues --
-- Every table with the queue shape (id, expires, headers, body, seq).
SELECT m.name FROM sqlite_master AS m
WHERE m.type = 'table'
  AND (SELECT count(*) FROM pragma_table_info(m.name) AS p
       WHERE p.name IN ('id', 'expires', 'headers', 'body', 'seq')) = 5
ORDER BY m.name

-- list_columns --
-- Columns of a table with their declared types, for the schema check.
SELECT name, type, CASE WHEN "notnull" = 1 THEN 'NO' ELSE 'YES' END, pk
FROM pragma_table_info(%(table_name)s) ORDER BY cid

-- list_indexes --
-- Indexes of a table by first key column.
SELECT l.name, (SELECT i.name FROM pragma_index_info(l.name) AS i WHERE i.seqno = 0), 0, l.partial
FROM pragma_index_list(%(table_name)s) AS l ORDER BY l.name
