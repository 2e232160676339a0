-- Every statement airflow-sqlqueue runs on PostgreSQL (wire-compatible with NServiceBus.Transport.PostgreSql).
-- %(name)s is a parameter (bound by the driver, never formatted in); {name} is an identifier quoted by the
-- dialect ({queue} is the schema-qualified queue table).

-- create_lock --
-- Serialize concurrent creators of the same queue (released at commit).
SELECT pg_advisory_xact_lock(hashtext(%(lock_name)s))

-- schema_exists --
-- 1 when the schema exists (queues never create schemas implicitly).
SELECT count(*) FROM pg_namespace WHERE nspname = %(schema_name)s

-- table_exists --
-- 1 when the table exists.
SELECT count(*) FROM pg_tables WHERE schemaname = %(schema_name)s AND tablename = %(table_name)s

-- create_queue_table --
-- The queue table: the exact shape NServiceBus.Transport.PostgreSql creates.
CREATE TABLE IF NOT EXISTS {queue} (
    id uuid NOT NULL,
    expires timestamp NULL,
    headers text NOT NULL,
    body bytea NULL,
    seq serial NOT NULL
);

-- create_queue_seq_index --
-- FIFO order index used by receive and peek.
CREATE INDEX IF NOT EXISTS {seq_index} ON {queue} (seq);

-- create_queue_expires_index --
-- Partial index used by purge of expired messages.
CREATE INDEX IF NOT EXISTS {expires_index} ON {queue} (expires) WHERE expires IS NOT NULL;

-- create_delayed_table --
-- The delayed-delivery store of an endpoint ("<endpoint>.Delayed").
CREATE TABLE IF NOT EXISTS {delayed} (
    headers text NOT NULL,
    body bytea NULL,
    due timestamp NOT NULL,
    seq serial NOT NULL
);

-- create_delayed_due_index --
-- Index used by the delayed-message mover.
CREATE INDEX IF NOT EXISTS {due_index} ON {delayed} (due);

-- send --
-- Insert one message; Expires is computed by the database clock from a millisecond TTBR.
INSERT INTO {queue} (id, expires, headers, body)
VALUES (
    %(id)s::uuid,
    CASE WHEN %(ttbr_ms)s::bigint IS NULL THEN NULL
         ELSE (statement_timestamp() AT TIME ZONE 'UTC') + %(ttbr_ms)s::bigint * INTERVAL '1 millisecond' END,
    %(headers)s,
    %(body)s)

-- send_many --
-- Insert a batch in one statement and one round trip, in list order.
INSERT INTO {queue} (id, expires, headers, body)
SELECT m.id,
       CASE WHEN m.ttbr_ms IS NULL THEN NULL
            ELSE (statement_timestamp() AT TIME ZONE 'UTC') + m.ttbr_ms * INTERVAL '1 millisecond' END,
       m.headers,
       m.body
FROM unnest(%(ids)s::uuid[], %(ttbr_ms)s::bigint[], %(headers)s::text[], %(bodies)s::bytea[])
     WITH ORDINALITY AS m(id, ttbr_ms, headers, body, ord)
ORDER BY m.ord

-- insert_raw --
-- Copy a row unchanged (same Id, no Expires): error queue moves and retries.
INSERT INTO {queue} (id, expires, headers, body) VALUES (%(id)s::uuid, NULL, %(headers)s, %(body)s)

-- send_delayed --
-- Store a message in the delayed table, due after %(delay_ms)s milliseconds (database clock).
INSERT INTO {delayed} (headers, body, due)
VALUES (%(headers)s, %(body)s, (statement_timestamp() AT TIME ZONE 'UTC') + %(delay_ms)s::bigint * INTERVAL '1 millisecond')

-- receive_batch --
-- Delete up to %(batch_size)s of the oldest rows no other receiver holds, and return them.
DELETE FROM {queue}
WHERE seq IN (SELECT seq FROM {queue} ORDER BY seq LIMIT %(batch_size)s FOR UPDATE SKIP LOCKED)
RETURNING id, seq, (expires IS NOT NULL AND expires < (statement_timestamp() AT TIME ZONE 'UTC')) AS expired, headers, body

-- receive_range --
-- Delete up to %(batch_size)s of the oldest rows with %(first_seq)s <= seq <= %(last_seq)s that no other receiver
-- holds, and return them: one partition of a partitioned drain (the range keeps partitions disjoint).
DELETE FROM {queue}
WHERE seq IN (SELECT seq FROM {queue} WHERE seq BETWEEN %(first_seq)s AND %(last_seq)s
              ORDER BY seq LIMIT %(batch_size)s FOR UPDATE SKIP LOCKED)
RETURNING id, seq, (expires IS NOT NULL AND expires < (statement_timestamp() AT TIME ZONE 'UTC')) AS expired, headers, body

-- seq_bounds --
-- Oldest and newest positions (two index seeks, no locks; NULLs when empty): what a partitioned drain splits.
SELECT (SELECT seq FROM {queue} ORDER BY seq LIMIT 1), (SELECT seq FROM {queue} ORDER BY seq DESC LIMIT 1)

-- lock_batch --
-- Lock (without deleting) up to %(batch_size)s of the oldest rows no other receiver holds.
SELECT id, seq, (expires IS NOT NULL AND expires < (statement_timestamp() AT TIME ZONE 'UTC')) AS expired, headers, body
FROM {queue} ORDER BY seq LIMIT %(batch_size)s FOR UPDATE SKIP LOCKED

-- lock_after --
-- Lock rows after a position, oldest first (walks a queue without taking rows others hold).
SELECT id, seq, (expires IS NOT NULL AND expires < (statement_timestamp() AT TIME ZONE 'UTC')) AS expired, headers, body
FROM {queue} WHERE seq > %(after_seq)s ORDER BY seq LIMIT %(batch_size)s FOR UPDATE SKIP LOCKED

-- browse --
-- Read rows after a position without locking or deleting them.
SELECT id, seq, (expires IS NOT NULL AND expires < (statement_timestamp() AT TIME ZONE 'UTC')) AS expired, headers, body
FROM {queue} WHERE seq > %(after_seq)s ORDER BY seq LIMIT %(batch_size)s

-- delete_by_seq --
-- Delete one locked row.
DELETE FROM {queue} WHERE seq = %(seq)s

-- delete_by_id --
-- Delete a message by its native Id (the error-queue browser's delete action).
DELETE FROM {queue} WHERE id = %(id)s

-- delete_by_seqs --
-- Delete the locked rows a batch finished with, in one statement (%(seqs)s is an integer array).
DELETE FROM {queue} WHERE seq = ANY(%(seqs)s::integer[])

-- peek --
-- Depth estimate: newest minus oldest position + 1, skipping rows held by receivers (index-only, O(1)).
-- The row locks make this a write transaction; its commit need not wait for the WAL flush (nothing to keep).
SELECT COALESCE(
    (SELECT seq FROM {queue} ORDER BY seq DESC LIMIT 1 FOR UPDATE SKIP LOCKED)
  - (SELECT seq FROM {queue} ORDER BY seq LIMIT 1 FOR UPDATE SKIP LOCKED) + 1, 0),
  set_config('synchronous_commit', 'off', true)

-- head_headers --
-- Headers of the oldest row (its TimeSent gives the age of the queue).
SELECT headers FROM {queue} ORDER BY seq LIMIT 1

-- purge_expired --
-- Delete up to %(batch_size)s expired rows by seq (not by expires, to avoid deadlocks with receivers).
DELETE FROM {queue}
WHERE seq IN (SELECT seq FROM {queue} WHERE expires < (statement_timestamp() AT TIME ZONE 'UTC')
              LIMIT %(batch_size)s FOR UPDATE SKIP LOCKED)

-- move_due_delayed --
-- Move up to %(batch_size)s due delayed messages into the endpoint's input queue (new Id).
WITH due AS (
    DELETE FROM {delayed}
    WHERE seq IN (SELECT seq FROM {delayed} WHERE due < (statement_timestamp() AT TIME ZONE 'UTC')
                  ORDER BY due LIMIT %(batch_size)s FOR UPDATE SKIP LOCKED)
    RETURNING headers, body, seq
)
INSERT INTO {queue} (id, expires, headers, body)
SELECT gen_random_uuid(), NULL, due.headers, due.body FROM due ORDER BY due.seq

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
-- Every table in the database with the queue shape (id, expires, headers, body, seq).
SELECT c.table_schema, c.table_name
FROM information_schema.columns AS c
JOIN information_schema.tables AS t
  ON t.table_schema = c.table_schema AND t.table_name = c.table_name AND t.table_type = 'BASE TABLE'
WHERE c.table_schema NOT IN ('pg_catalog', 'information_schema')
GROUP BY c.table_schema, c.table_name
HAVING count(*) FILTER (WHERE c.column_name IN ('id', 'expires', 'headers', 'body', 'seq')) = 5
ORDER BY c.table_schema, c.table_name

-- list_columns --
-- Columns of a table with their types, for the schema check.
SELECT column_name, data_type, is_nullable
FROM information_schema.columns
WHERE table_schema = %(schema_name)s AND table_name = %(table_name)s
ORDER BY ordinal_position

-- list_indexes --
-- Indexes of a table by first key column (matched by column, not by name).
SELECT i.relname AS index_name, a.attname AS first_column, ix.indisclustered AS is_clustered,
       pg_get_expr(ix.indpred, ix.indrelid) AS predicate
FROM pg_index AS ix
JOIN pg_class AS t ON t.oid = ix.indrelid
JOIN pg_namespace AS n ON n.oid = t.relnamespace
JOIN pg_class AS i ON i.oid = ix.indexrelid
LEFT JOIN pg_attribute AS a ON a.attrelid = t.oid AND a.attnum = ix.indkey[0]
WHERE n.nspname = %(schema_name)s AND t.relname = %(table_name)s
ORDER BY i.relname

-- table_bloat --
-- Live and dead tuples of a table (dead tuples slow receives until VACUUM).
SELECT COALESCE(n_live_tup, 0), COALESCE(n_dead_tup, 0)
FROM pg_stat_user_tables WHERE schemaname = %(schema_name)s AND relname = %(table_name)s

-- vacuum_table --
-- Reclaim dead tuples left by receives (runs outside a transaction).
VACUUM (ANALYZE) {queue}
