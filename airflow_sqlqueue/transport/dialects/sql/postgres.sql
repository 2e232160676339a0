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

-- relation_named --
-- What holds a name in a schema (tables, indexes, sequences, views share one namespace): its kind (r table,
-- p partitioned table, i index, S sequence, v view, m materialized view, c composite type, f foreign table) and,
-- for an index, the table it belongs to and whether it is valid (an interrupted CONCURRENTLY build is not).
SELECT c.relkind::text, t.relname, ix.indisvalid
FROM pg_class AS c
JOIN pg_namespace AS n ON n.oid = c.relnamespace
LEFT JOIN pg_index AS ix ON ix.indexrelid = c.oid
LEFT JOIN pg_class AS t ON t.oid = ix.indrelid
WHERE n.nspname = %(schema_name)s AND c.relname = %(name)s

-- create_queue_table --
-- The queue table: the exact shape NServiceBus.Transport.PostgreSql 9.x creates. The primary key on id serves
-- .NET receivers (they delete by id); the unique constraint on seq is the FIFO index of receive and peek.
CREATE TABLE IF NOT EXISTS {queue} (
    id uuid NOT NULL PRIMARY KEY,
    expires timestamp NULL,
    headers text NOT NULL,
    body bytea NULL,
    seq serial NOT NULL UNIQUE
);

-- create_queue_expires_index --
-- Partial index used by purge of expired messages (an extra: upstream creates none).
CREATE INDEX IF NOT EXISTS {expires_index} ON {queue} (expires) WHERE expires IS NOT NULL;

-- create_delayed_table --
-- The delayed-delivery store of an endpoint ("<endpoint>.Delayed"), the shape NServiceBus.Transport.PostgreSql
-- 9.x creates: whichever side creates it first fixes its shape, and both movers move rows by id.
CREATE TABLE IF NOT EXISTS {delayed} (
    id uuid NOT NULL DEFAULT gen_random_uuid() PRIMARY KEY,
    headers text NOT NULL,
    body bytea NULL,
    due timestamptz NOT NULL
) WITH (fillfactor=100);

-- create_delayed_due_index --
-- Index used by the delayed-message movers ("<delayed table>_Due", the name upstream gives it).
CREATE INDEX IF NOT EXISTS {due_index} ON {delayed} (due);

-- send --
-- Insert one message; Expires is computed by the database clock from a millisecond TTBR.
INSERT INTO {queue} (id, expires, headers, body)
VALUES (
    %(id)s::uuid,
    CASE WHEN %(ttbr_ms)s::bigint IS NULL THEN NULL
         ELSE (statement_timestamp() AT TIME ZONE 'UTC') + %(ttbr_ms)s::bigint * INTERVAL '1 millisecond' END,
    %(headers)s,
    COALESCE(%(body)s::bytea, ''::bytea))

-- send_many --
-- Insert a batch in one statement and one round trip, in list order. The arrays are bound in binary (psycopg 3:
-- no hex text for bodies, no parsing of UUIDs by the server); psycopg 2 binds the same text with %(name)s.
INSERT INTO {queue} (id, expires, headers, body)
SELECT m.id,
       CASE WHEN m.ttbr_ms IS NULL THEN NULL
            ELSE (statement_timestamp() AT TIME ZONE 'UTC') + m.ttbr_ms * INTERVAL '1 millisecond' END,
       m.headers,
       COALESCE(m.body, ''::bytea)
FROM unnest(%(ids)b::uuid[], %(ttbr_ms)b::bigint[], %(headers)b::text[], %(bodies)b::bytea[])
     WITH ORDINALITY AS m(id, ttbr_ms, headers, body, ord)
ORDER BY m.ord

-- insert_raw --
-- Copy a row (same Id, no Expires): error queue moves, retries, forwards. Inserts nothing when the table already
-- holds that Id (the caller then inserts it under a new Id); a NULL body is written as empty bytes.
INSERT INTO {queue} (id, expires, headers, body)
VALUES (%(id)s::uuid, NULL, %(headers)s, COALESCE(%(body)s::bytea, ''::bytea))
ON CONFLICT DO NOTHING

-- send_delayed --
-- Store a message in the delayed table, due after %(delay_ms)s milliseconds (database clock).
INSERT INTO {delayed} (headers, body, due)
VALUES (%(headers)s, COALESCE(%(body)s::bytea, ''::bytea),
        (statement_timestamp() AT TIME ZONE 'UTC') + %(delay_ms)s::bigint * INTERVAL '1 millisecond')

-- receive_batch --
-- Delete up to %(batch_size)s of the oldest rows no other receiver holds, and return them.
-- ARRAY(subquery) is an InitPlan: evaluated exactly once, so the delete can never take more than the limit
-- (an IN (subquery) may be planned as a join that re-runs the locking scan). The Id comes back as its canonical
-- text (what a drain writes, no UUID object per row; ReceivedMessage.id parses it when asked).
DELETE FROM {queue}
WHERE seq = ANY(ARRAY(SELECT seq FROM {queue} ORDER BY seq LIMIT %(batch_size)s FOR UPDATE SKIP LOCKED))
RETURNING id::text, seq, (expires IS NOT NULL AND expires <= (statement_timestamp() AT TIME ZONE 'UTC')) AS expired, headers, body

-- receive_after --
-- receive_batch for a receiver that took rows up to %(after_seq)s a moment ago: the index scan starts past that
-- position, not at the head, so it does not walk the entries of the rows receives deleted before it (they stay
-- in the seq index, and each costs a heap visit, until VACUUM may remove them: a long transaction anywhere in
-- the database, or a REPEATABLE READ reader, can keep tens of thousands of them there). Rows below the position
-- are received once the receiver goes back to the head (see ReceivePosition).
DELETE FROM {queue}
WHERE seq = ANY(ARRAY(SELECT seq FROM {queue} WHERE seq > %(after_seq)s
                      ORDER BY seq LIMIT %(batch_size)s FOR UPDATE SKIP LOCKED))
RETURNING id::text, seq, (expires IS NOT NULL AND expires <= (statement_timestamp() AT TIME ZONE 'UTC')) AS expired, headers, body

-- receive_range --
-- Delete up to %(batch_size)s of the oldest rows with %(first_seq)s <= seq <= %(last_seq)s that no other receiver
-- holds, and return them: one partition of a partitioned drain (the range keeps partitions disjoint). The locking
-- subquery is an InitPlan, run once (see receive_batch).
DELETE FROM {queue}
WHERE seq = ANY(ARRAY(SELECT seq FROM {queue} WHERE seq BETWEEN %(first_seq)s AND %(last_seq)s
                      ORDER BY seq LIMIT %(batch_size)s FOR UPDATE SKIP LOCKED))
RETURNING id::text, seq, (expires IS NOT NULL AND expires <= (statement_timestamp() AT TIME ZONE 'UTC')) AS expired, headers, body

-- seq_bounds --
-- Oldest and newest positions (two index seeks, no locks; NULLs when empty): what a partitioned drain splits.
SELECT (SELECT seq FROM {queue} ORDER BY seq LIMIT 1), (SELECT seq FROM {queue} ORDER BY seq DESC LIMIT 1)

-- lock_batch --
-- Lock (without deleting) up to %(batch_size)s of the oldest rows no other receiver holds.
SELECT id, seq, (expires IS NOT NULL AND expires <= (statement_timestamp() AT TIME ZONE 'UTC')) AS expired, headers, body
FROM {queue} ORDER BY seq LIMIT %(batch_size)s FOR UPDATE SKIP LOCKED

-- lock_after --
-- Lock rows after a position, oldest first (walks a queue without taking rows others hold; and lock_batch for a
-- receiver that took rows up to %(after_seq)s a moment ago: see receive_after).
SELECT id, seq, (expires IS NOT NULL AND expires <= (statement_timestamp() AT TIME ZONE 'UTC')) AS expired, headers, body
FROM {queue} WHERE seq > %(after_seq)s ORDER BY seq LIMIT %(batch_size)s FOR UPDATE SKIP LOCKED

-- browse --
-- Read rows after a position without locking or deleting them.
SELECT id, seq, (expires IS NOT NULL AND expires <= (statement_timestamp() AT TIME ZONE 'UTC')) AS expired, headers, body
FROM {queue} WHERE seq > %(after_seq)s ORDER BY seq LIMIT %(batch_size)s

-- delete_by_seq --
-- Delete one locked row.
DELETE FROM {queue} WHERE seq = %(seq)s

-- delete_by_id --
-- Delete a message by its native Id (the error-queue browser's delete action).
DELETE FROM {queue} WHERE id = %(id)s

-- delete_by_seqs --
-- Delete the locked rows a batch finished with, in one statement (%(seqs)s: an array literal, '{1,2,3}'; bigint: a table widened past 2^31 keeps working).
DELETE FROM {queue} WHERE seq = ANY(%(seqs)s::bigint[])

-- peek --
-- Depth estimate: newest minus oldest position + 1, skipping rows held by receivers (index-only, O(1)).
-- The row locks make this a write transaction; its commit need not wait for the WAL flush (nothing to keep).
SELECT COALESCE(
    (SELECT seq FROM {queue} ORDER BY seq DESC LIMIT 1 FOR UPDATE SKIP LOCKED)
  - (SELECT seq FROM {queue} ORDER BY seq LIMIT 1 FOR UPDATE SKIP LOCKED) + 1, 0),
  set_config('synchronous_commit', 'off', true)

-- sent_position --
-- The last value the queue's seq sequence handed out (NULL before the first send): how many messages were ever
-- sent to the queue, whatever was received since. Two readings a minute apart give the send rate.
SELECT pg_sequence_last_value(pg_get_serial_sequence(%(qualified_name)s, 'seq'))

-- purge_expired --
-- Delete up to %(batch_size)s expired rows by seq (not by expires, to avoid deadlocks with receivers).
DELETE FROM {queue}
WHERE seq = ANY(ARRAY(SELECT seq FROM {queue} WHERE expires <= (statement_timestamp() AT TIME ZONE 'UTC')
                      LIMIT %(batch_size)s FOR UPDATE SKIP LOCKED))

-- move_due_delayed --
-- Move up to %(batch_size)s due delayed messages into the endpoint's input queue, oldest due first, reusing each
-- row's id as upstream's mover does (a new one only if the queue already holds that id); never a NULL body. The
-- locking subquery is an InitPlan, run once (see receive_batch).
WITH due AS (
    DELETE FROM {delayed}
    WHERE id = ANY(ARRAY(SELECT id FROM {delayed} WHERE due < (statement_timestamp() AT TIME ZONE 'UTC')
                         ORDER BY due LIMIT %(batch_size)s FOR UPDATE SKIP LOCKED))
    RETURNING id, headers, body, due
)
INSERT INTO {queue} (id, expires, headers, body)
SELECT CASE WHEN EXISTS (SELECT 1 FROM {queue} AS q WHERE q.id = due.id) THEN gen_random_uuid() ELSE due.id END,
       NULL, due.headers, COALESCE(due.body, ''::bytea)
FROM due ORDER BY due.due, due.id

-- move_due_delayed_legacy --
-- move_due_delayed for a delayed table made by airflow-sqlqueue 0.1 (no id column; `check --repair`
-- migrates it): new Ids, seq order.
WITH due AS (
    DELETE FROM {delayed}
    WHERE seq = ANY(ARRAY(SELECT seq FROM {delayed} WHERE due < (statement_timestamp() AT TIME ZONE 'UTC')
                          ORDER BY due LIMIT %(batch_size)s FOR UPDATE SKIP LOCKED))
    RETURNING headers, body, seq
)
INSERT INTO {queue} (id, expires, headers, body)
SELECT gen_random_uuid(), NULL, due.headers, COALESCE(due.body, ''::bytea) FROM due ORDER BY due.seq

-- column_exists --
-- 1 when a table has the column (tells a delayed table of the current shape from a legacy one).
SELECT count(*) FROM information_schema.columns
WHERE table_schema = %(schema_name)s AND table_name = %(table_name)s AND column_name = %(column_name)s

-- commit --
-- End a transaction: sent in one pipeline with its last statement (one round trip for both).
COMMIT

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
-- Indexes of a table by first key column (matched by column, not by name), whether they are unique over that
-- one column (a primary key or unique constraint), and whether they are valid.
SELECT i.relname AS index_name, a.attname AS first_column, ix.indisclustered AS is_clustered,
       pg_get_expr(ix.indpred, ix.indrelid) AS predicate,
       (ix.indisunique AND ix.indnkeyatts = 1 AND ix.indpred IS NULL AND ix.indisvalid) AS unique_on_column,
       ix.indisprimary AS is_primary
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

-- create_wake_function --
-- Push wake-ups (opt-in), payload ["schema","table"], channel sqlqueue, delivered at commit; what a sender (.NET
-- or this provider) writes is unchanged. (Earlier versions' trigger called sqlqueue_notify: a NOTIFY on every
-- inserting statement, and every committing NOTIFY takes PostgreSQL's global notify lock, so commits of concurrent
-- senders queued behind each other. Re-installing wake-ups moves a queue to this function.) Three advisory locks
-- per queue (keys 1644256948/49/50 and the table's oid), none of which a sender ever waits for:
-- * the wake-up lock (...48): an idle receiver holds it exclusively on its listening connection, or is queued
--   for it. When a statement can take it shared, nobody waits: it keeps it to the end of its transaction (no
--   NOTIFY, no global lock), and a receiver that starts waiting meanwhile gets it only after this commit, then
--   looks once more, so it sees these rows.
-- * the notifier lock (...49): a receiver waits. The first statement to take it (to the end of its transaction)
--   notifies; while that notification is in flight the others do not, so at most one transaction per queue at a
--   time takes the global notify lock.
-- * the covered lock (...50): a statement that relies on the notification in flight holds it shared to the end of
--   its transaction; a receiver takes it (waits for those commits) before it looks and waits again, so it sees
--   these rows even when they commit after the notification woke it. Any lock not granted at once: NOTIFY.
CREATE OR REPLACE FUNCTION {wake_function}() RETURNS trigger LANGUAGE plpgsql AS $sqlqueue$
BEGIN
    IF pg_try_advisory_xact_lock_shared(1644256948, TG_RELID::integer) THEN
        RETURN NULL;
    END IF;
    IF NOT pg_try_advisory_xact_lock(1644256949, TG_RELID::integer) THEN
        IF pg_try_advisory_xact_lock_shared(1644256950, TG_RELID::integer) THEN
            RETURN NULL;  -- another transaction's notification is in flight; a receiver waits for this commit
        END IF;
    END IF;
    PERFORM pg_notify('sqlqueue', json_build_array(TG_TABLE_SCHEMA, TG_TABLE_NAME)::text);
    RETURN NULL;
END
$sqlqueue$

-- drop_notify_trigger --
-- Remove a queue's wake-up trigger (also before re-creating it).
DROP TRIGGER IF EXISTS {notify_trigger} ON {queue}

-- create_notify_trigger --
-- Fire the wake-up function once per statement that inserts into the queue.
CREATE TRIGGER {notify_trigger} AFTER INSERT ON {queue} FOR EACH STATEMENT EXECUTE FUNCTION {wake_function}()

-- wake_lock_timeout --
-- On a listening connection: how long a receiver that starts waiting waits for senders' open transactions
-- (past it, a send still in flight is found by the fallback poll).
SET lock_timeout = '200ms'

-- wake_lock_try --
-- A receiver starts waiting: first wait for the senders that relied on a notification of the last wake cycle
-- (the covered lock, taken and released by this autocommit statement; bounded by lock_timeout), then take the
-- queue's wake-up lock at once when no sender's statement holds it. (A WITH query with a volatile function is run
-- once, before the outer query reads its row, on every PostgreSQL version.)
WITH covered AS (SELECT pg_advisory_xact_lock(1644256950, to_regclass(%(table)s)::oid::integer))
SELECT pg_try_advisory_lock(1644256948, to_regclass(%(table)s)::oid::integer) FROM covered

-- wake_lock_try_now --
-- The same without waiting for those senders (they kept the covered lock past lock_timeout).
SELECT pg_try_advisory_lock(1644256948, to_regclass(%(table)s)::oid::integer)

-- wake_peek --
-- On the listening connection, right after taking the wake-up lock: whether the queue holds a row (then the
-- receiver is busy again at once: it releases the lock instead of keeping senders notifying while it works). Rows
-- other receivers hold are skipped, as a receive skips them.
SELECT EXISTS (SELECT 1 FROM {queue} LIMIT 1 FOR UPDATE SKIP LOCKED)

-- wake_lock_held --
-- Whether another receiver holds the queue's wake-up lock or waits for it (then senders notify already): a shared
-- take of it fails only then, senders hold it shared. Taken and given back in one statement: two lock-table calls
-- (an earlier version scanned pg_locks, which visits every backend's fast-path locks, senders' included, each
-- wake cycle). CASE: the release runs only after a granted take.
SELECT CASE WHEN pg_try_advisory_lock_shared(1644256948, to_regclass(%(table)s)::oid::integer)
            THEN NOT pg_advisory_unlock_shared(1644256948, to_regclass(%(table)s)::oid::integer) ELSE true END

-- wake_lock_wait --
-- Take the queue's wake-up lock after the senders' transactions that hold it shared end (bounded by lock_timeout).
SELECT pg_advisory_lock(1644256948, to_regclass(%(table)s)::oid::integer)

-- wake_lock_release --
-- A woken receiver is busy: senders stop notifying until a receiver waits again.
SELECT pg_advisory_unlock(1644256948, to_regclass(%(table)s)::oid::integer)

-- notify_function_of --
-- The function a queue's wake-up trigger calls (sqlqueue_notify in earlier versions, sqlqueue_wake now), or none.
SELECT p.proname FROM pg_trigger AS t JOIN pg_proc AS p ON p.oid = t.tgfoid
WHERE t.tgrelid = to_regclass(%(table)s) AND t.tgname = %(trigger_name)s

-- notify_installed --
-- 1 when the queue's wake-up trigger exists.
SELECT 1 FROM pg_trigger WHERE tgrelid = to_regclass(%(table)s) AND tgname = %(trigger_name)s

-- listen --
-- Receive the wake-ups of every queue on this connection (filtered by payload).
LISTEN sqlqueue

-- Migration of tables made by airflow-sqlqueue 0.1 (no primary key, no unique seq; delayed store with seq and a
-- due without time zone) to the shapes above. `sqlqueue check --repair` runs these steps online; `sqlqueue ddl
-- --migrate` prints them for a DBA. Statements marked "outside a transaction" use CONCURRENTLY: they neither
-- block nor are blocked by senders and receivers.

-- migrate_dedupe_ids --
-- Migration: give a new Id to every row but the oldest of each Id held more than once (a primary key needs
-- unique Ids; the NServiceBus.MessageId header, the message's identity, is kept).
UPDATE {queue} SET id = gen_random_uuid()
WHERE seq IN (SELECT d.seq FROM (SELECT seq, row_number() OVER (PARTITION BY id ORDER BY seq) AS n FROM {queue}) AS d
              WHERE d.n > 1)

-- migrate_build_id_index --
-- Migration, outside a transaction: build the unique index on id that becomes the primary key.
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS {pkey_index} ON {queue} (id)

-- migrate_add_primary_key --
-- Migration: make that index the primary key (a brief lock; id is NOT NULL already, so nothing is scanned).
ALTER TABLE {queue} ADD CONSTRAINT {pkey_index} PRIMARY KEY USING INDEX {pkey_index}

-- migrate_build_seq_index --
-- Migration, outside a transaction: build the unique index on seq that becomes the unique constraint.
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS {seq_key_index} ON {queue} (seq)

-- migrate_add_seq_unique --
-- Migration: make that index the UNIQUE constraint on seq (a brief lock).
ALTER TABLE {queue} ADD CONSTRAINT {seq_key_index} UNIQUE USING INDEX {seq_key_index}

-- migrate_drop_index --
-- Migration, outside a transaction: drop an index ({index} is schema-qualified): the 0.1 seq index the unique
-- constraint replaces, or an invalid index an interrupted CONCURRENTLY build left behind.
DROP INDEX CONCURRENTLY IF EXISTS {index}

-- migrate_delayed_lock --
-- Migration of a 0.1 delayed store, in one transaction: senders and movers wait for it (a delayed store is small).
LOCK TABLE {delayed} IN ACCESS EXCLUSIVE MODE

-- migrate_delayed_add_id --
-- Migration: the id column, filled for every stored row.
ALTER TABLE {delayed} ADD COLUMN IF NOT EXISTS id uuid NOT NULL DEFAULT gen_random_uuid()

-- migrate_delayed_primary_key --
-- Migration: the primary key on id (both movers delete by id; PostgreSQL names it).
ALTER TABLE {delayed} ADD PRIMARY KEY (id)

-- migrate_delayed_due_type --
-- Migration: due as timestamptz, read from the UTC wall-clock time 0.1 stored as the session's time zone does,
-- as the senders and movers of both sides compare it.
ALTER TABLE {delayed} ALTER COLUMN due TYPE timestamptz USING due::timestamptz

-- migrate_delayed_drop_seq --
-- Migration: drop the seq column (and its sequence) upstream's shape does not have.
ALTER TABLE {delayed} DROP COLUMN IF EXISTS seq

-- migrate_delayed_fillfactor --
-- Migration: the storage parameter upstream creates the store with.
ALTER TABLE {delayed} SET (fillfactor=100)

-- migrate_delayed_drop_old_due_index --
-- Migration: drop the 0.1 due index ({legacy_due_index} is schema-qualified) once "<table>_Due" exists.
DROP INDEX IF EXISTS {legacy_due_index}

-- create_subscription_table --
-- The subscription table shared by every endpoint (native publish/subscribe, NServiceBus.Transport.PostgreSql's shape; {table} is its name).
CREATE TABLE IF NOT EXISTS {table} (
    queueaddress varchar(200) NOT NULL,
    endpoint varchar(200) NOT NULL,
    topic varchar(200) NOT NULL,
    PRIMARY KEY (endpoint, topic)
)

-- subscribe --
-- Subscribe an endpoint's queue to a topic (an upsert on (endpoint, topic): the endpoint's queue address is updated).
INSERT INTO {table} (queueaddress, topic, endpoint)
VALUES (%(queue_address)s, %(topic)s, %(endpoint)s)
ON CONFLICT (endpoint, topic) DO UPDATE SET queueaddress = EXCLUDED.queueaddress

-- unsubscribe --
-- Remove an endpoint's subscription to a topic.
DELETE FROM {table} WHERE endpoint = %(endpoint)s AND topic = %(topic)s

-- subscribers --
-- The queue addresses subscribed to one topic.
SELECT DISTINCT queueaddress FROM {table} WHERE topic = %(topic)s

-- list_subscriptions --
-- Every subscription, by topic.
SELECT queueaddress, endpoint, topic FROM {table} ORDER BY topic, endpoint

-- create_inbox_table --
-- The inbox (deduplication) table: one row per (consumer, message Id) a consumer finished, written in the same
-- transaction as the consumer's own work (as NServiceBus's outbox records handled messages). An airflow-sqlqueue extra.
CREATE TABLE IF NOT EXISTS {table} (
    consumer varchar(200) NOT NULL,
    message_id varchar(200) NOT NULL,
    processed_at timestamp NOT NULL DEFAULT (now() AT TIME ZONE 'utc'),
    PRIMARY KEY (consumer, message_id)
)

-- create_inbox_index --
-- Index used by the inbox's retention purge.
CREATE INDEX IF NOT EXISTS {inbox_index} ON {table} (processed_at)

-- inbox_mark --
-- Record one message as handled by a consumer; inserts nothing (rowcount 0) when a committed transaction already
-- did. A concurrent uncommitted insert of the same key makes this wait for its outcome.
INSERT INTO {table} (consumer, message_id) VALUES (%(consumer)s, %(message_id)s) ON CONFLICT DO NOTHING

-- inbox_handled --
-- Whether a consumer already handled one message (1 or 0).
SELECT count(*) FROM {table} WHERE consumer = %(consumer)s AND message_id = %(message_id)s

-- purge_inbox --
-- Delete up to %(batch_size)s inbox rows older than %(older_than_s)s seconds (database clock).
DELETE FROM {table} WHERE (consumer, message_id) IN (
    SELECT consumer, message_id FROM {table}
    WHERE processed_at < (now() AT TIME ZONE 'utc') - %(older_than_s)s * interval '1 second'
    LIMIT %(batch_size)s)

-- count_rows --
-- Exact number of rows (the error queue's depth on the page: the peek estimate counts gaps left by retries).
SELECT count(*) FROM {queue}

-- failed_page --
-- One page of an error queue after a position (and up to %(through_seq)s), for the browser. Headers and body are cut to a preview here
-- (never sent whole). The fields it groups and filters by are the JSON string text after '"<name>":"' (or
-- '"<name>": "') up to the next quote (FailedQ, a canonical address with quotes on PostgreSQL, is read with its
-- escaped quotes, backslashes and slashes undone; other fields are cut at an escaped quote); the exception message and
-- stack trace are the whole JSON string found by pattern in the first MiB of the headers (the provider sends at
-- most 1,000,000 characters). Plain text functions: no row (bad JSON, a lone surrogate escape, huge headers) can
-- make the statement fail or run long. Filters: NULL matches any row; %(search)s is text the headers contain
-- (exact case); <field>_missing = 1 matches only rows without that field (absent or empty).
-- The search is also looked for as header JSON stores it: %(search_wire)s (as NServiceBus writes it, '/' as '\/'),
-- %(search_json)s and %(search_ascii)s (JSON escapes, raw and ASCII-only non-ASCII); in the native Id (any case);
-- and in the body's bytes (bytea: %(search_body)s and %(search_body_wire)s are the search's UTF-8 bytes, plain and
-- as NServiceBus writes JSON; no conversion, so a binary or invalid UTF-8 body cannot make the statement fail).
-- FailedQ: any of %(failed_q)s and failed_q_2 to failed_q_8 (spellings of one queue; NULL where unused).
SELECT id::text, seq, failed_q, exception_type, message_type, time_of_failure,
       left(substring(left(headers, 1048576) from '"NServiceBus\.ExceptionInfo\.Message"\s*:\s*"((?:[^"\\]|\\.)*)"'), 2000),
       left(substring(left(headers, 1048576) from '"NServiceBus\.ExceptionInfo\.StackTrace"\s*:\s*"((?:[^"\\]|\\.)*)"'), 8000),
       headers_preview, headers_length, body_preview, body_length
FROM (
    SELECT id, seq, headers, body,
           {group_fields},
           left(headers, %(headers_chars)s) AS headers_preview, length(headers) AS headers_length,
           substring(body from 1 for %(body_bytes)s) AS body_preview, octet_length(body) AS body_length
    FROM {queue}
    WHERE seq > %(after_seq)s AND seq <= %(through_seq)s
) AS f
WHERE (%(failed_q)s::text IS NULL OR f.failed_q IN (%(failed_q)s::text, %(failed_q_2)s::text, %(failed_q_3)s::text,
       %(failed_q_4)s::text, %(failed_q_5)s::text, %(failed_q_6)s::text, %(failed_q_7)s::text, %(failed_q_8)s::text))
  AND (%(exception_type)s::text IS NULL OR f.exception_type = %(exception_type)s::text)
  AND (%(message_type)s::text IS NULL OR f.message_type = %(message_type)s::text)
  AND (%(search)s::text IS NULL OR strpos(f.headers, %(search)s::text) > 0
       OR strpos(f.headers, %(search_wire)s::text) > 0 OR strpos(f.headers, %(search_json)s::text) > 0
       OR strpos(f.headers, %(search_ascii)s::text) > 0 OR strpos(f.id::text, lower(%(search)s::text)) > 0
       OR position(%(search_body)s::bytea in f.body) > 0 OR position(%(search_body_wire)s::bytea in f.body) > 0)
  AND (%(failed_q_missing)s = 0 OR COALESCE(length(f.failed_q), 0) = 0)
  AND (%(exception_type_missing)s = 0 OR COALESCE(length(f.exception_type), 0) = 0)
  AND (%(message_type_missing)s = 0 OR COALESCE(length(f.message_type), 0) = 0)
ORDER BY f.seq
LIMIT %(batch_size)s

-- failed_groups --
-- Only rows after %(after_seq)s up to %(through_seq)s (a range of positions: the page keeps groups per range).
-- Failed messages counted by the queue they failed in, exception type and message type, with the first and
-- last failure (fields read as in failed_page, one pass over the queue); largest groups first.
SELECT failed_q, exception_type, message_type, count(*), min(time_of_failure), max(time_of_failure)
FROM (
    SELECT {group_fields}
    FROM {queue}
    WHERE seq > %(after_seq)s AND seq <= %(through_seq)s
) AS f
GROUP BY failed_q, exception_type, message_type
ORDER BY count(*) DESC, failed_q, exception_type, message_type
LIMIT %(batch_size)s

-- lock_position --
-- Lock one row addressed by position and Id (an index seek on seq; the Id guards against a reused position).
SELECT id, seq, false, headers, body FROM {queue} WHERE seq = %(seq)s AND id::text = %(id)s FOR UPDATE

-- delete_position --
-- Delete one row addressed by position and Id (an index seek on seq).
DELETE FROM {queue} WHERE seq = %(seq)s AND id::text = %(id)s

-- head_time_sent --
-- TimeSent of the oldest row, found in the headers by pattern (JSON string text, still escaped): the age of the
-- queue without reading the whole headers of a row that may be huge or not JSON.
SELECT substring(left(headers, 1048576) from '"NServiceBus\.TimeSent"\s*:\s*"((?:[^"\\]|\\.)*)"') FROM {queue} ORDER BY seq LIMIT 1

-- connection_limit --
-- Connections other clients can open at once: max_connections less the slots kept for superusers and (PostgreSQL
-- 16+) for roles with pg_use_reserved_connections; the per-database and per-role limits when lower.
SELECT LEAST(
    current_setting('max_connections')::int - current_setting('superuser_reserved_connections')::int
        - COALESCE(NULLIF(current_setting('reserved_connections', true), '')::int, 0),
    COALESCE(NULLIF((SELECT datconnlimit FROM pg_database WHERE datname = current_database()), -1), 2147483647),
    COALESCE(NULLIF((SELECT rolconnlimit FROM pg_roles WHERE rolname = current_user), -1), 2147483647))

-- archive_rows --
-- Whole rows after position %(after_seq)s up to %(through_seq)s, oldest first, for the error archive
-- (CorrelationId, ReplyToAddress and Recoverable are SQL Server columns: NULL here).
SELECT id::text, NULL::text, NULL::text, NULL::boolean, to_char(expires, 'YYYY-MM-DD"T"HH24:MI:SS.US'), 'text',
       headers, CASE WHEN body IS NULL THEN 'null' ELSE 'blob' END, body, seq
FROM {queue} WHERE seq > %(after_seq)s AND seq <= %(through_seq)s ORDER BY seq

-- restore_row --
-- Put an archived row back (same Id, Expires, headers and body). Inserts nothing when the table already holds that
-- Id; a NULL body is written as empty bytes.
INSERT INTO {queue} (id, expires, headers, body)
VALUES (%(id)s::uuid, %(expires)s::timestamp, %(headers)s, COALESCE(%(body)s::bytea, ''::bytea))
ON CONFLICT DO NOTHING

-- id_present --
-- 1 when the table holds a row with this Id (the primary key).
SELECT count(*) FROM {queue} WHERE id = %(id)s::uuid

-- create_redirect_table --
-- Retry redirects (an airflow-sqlqueue extra, beside the error queue): the messages that failed in source_queue go
-- back to target_queue when retried, by every retry path. Names are canonical queue names; one redirect per source.
CREATE TABLE IF NOT EXISTS {table} (
    source_queue varchar(450) NOT NULL PRIMARY KEY,
    target_queue varchar(450) NOT NULL,
    created_by varchar(200) NULL,
    created_at timestamp NOT NULL DEFAULT (now() AT TIME ZONE 'utc')
)

-- list_redirects --
-- Every retry redirect, by source queue.
SELECT source_queue, target_queue, created_by, to_char(created_at, 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')
FROM {table} ORDER BY source_queue

-- insert_redirect --
-- Add one retry redirect; inserts nothing (rowcount 0) when that source already has one.
INSERT INTO {table} (source_queue, target_queue, created_by)
VALUES (%(source_queue)s, %(target_queue)s, %(created_by)s)
ON CONFLICT DO NOTHING

-- delete_redirect --
-- Remove the retry redirect of one source queue.
DELETE FROM {table} WHERE source_queue = %(source_queue)s

-- position_of_id --
-- The position of the row with this Id, if any (the primary key; the failed-message page finds a message by Id).
SELECT seq FROM {queue} WHERE id = %(id)s::uuid

-- estimate_rows --
-- The planner's row estimate of a table (pg_class.reltuples, kept by VACUUM and ANALYZE; -1 or NULL before the
-- first): what the error queue's depth shows above a threshold, instead of counting a million rows.
SELECT reltuples::bigint FROM pg_class WHERE oid = to_regclass(%(qualified_name)s)

-- scan_end --
-- The position %(batch_size)s rows after %(after_seq)s (NULL when fewer rows follow): a filtered page reads at most
-- the rows up to it (an index-only walk of seq), so a rare group or a search costs the same on any queue size.
SELECT seq FROM {queue} WHERE seq > %(after_seq)s ORDER BY seq OFFSET %(batch_size)s - 1 LIMIT 1

-- range_counts --
-- Rows per range of %(batch_size)s positions (an index-only walk of seq, no row read): which ranges changed since
-- their groups were counted (rows are only ever taken out of a range: a new row gets a new, higher position).
SELECT seq / %(batch_size)s, count(*) FROM {queue} GROUP BY 1

-- count_and_last --
-- Rows and the newest position (index-only): unchanged both, no row came or went (a new row gets a higher position).
SELECT count(*), max(seq) FROM {queue}

-- create_error_groups_table --
-- Error groups summary (an airflow-sqlqueue extra beside the error queue, like SqlQueueRetryRedirects): the group
-- counts of each error queue, so the page reads a few rows instead of every failed message. SqlQueueErrorGroups holds one row
-- per (error queue, FailedQ, exception type, message type) with its count and first and last failure; SqlQueueErrorGroupsState one
-- row per error queue with the highest position counted (high_water). Rows above high_water are counted by a
-- catch-up (rows .NET endpoints or this provider's receivers moved in); a retry, delete or archive by this
-- provider takes its rows out in its own transaction. A rebuild clears and counts again.
-- Group counts of the error queues of this schema (no key: rows are added only under the state row's lock).
CREATE TABLE IF NOT EXISTS {groups} (
    error_queue varchar(450) NOT NULL,
    failed_q text NULL,
    exception_type text NULL,
    message_type text NULL,
    message_count bigint NOT NULL,
    first_failure text NULL,
    last_failure text NULL,
    first_seq bigint NULL,
    last_seq bigint NULL
)

-- create_error_groups_index --
-- The group rows of one error queue.
CREATE INDEX IF NOT EXISTS {groups_index} ON {groups} (error_queue)

-- create_error_groups_state_table --
-- One row per error queue: the highest position counted into its groups, when they were last rebuilt and caught up,
-- and when the groups were last compared with an exact count of the queue (the drift check) and what it found.
CREATE TABLE IF NOT EXISTS {state} (
    error_queue varchar(450) NOT NULL PRIMARY KEY,
    high_water bigint NOT NULL,
    rebuilt_at timestamp NOT NULL DEFAULT (now() AT TIME ZONE 'utc'),
    caught_up_at timestamp NULL,
    checked_at timestamp NULL,
    drift bigint NULL
)

-- error_groups_state_insert --
-- The state row of an error queue (nothing counted yet); nothing when it exists.
INSERT INTO {state} (error_queue, high_water) VALUES (%(error_queue)s, 0) ON CONFLICT DO NOTHING

-- error_groups_state_lock --
-- The high water, locked for a catch-up or rebuild (retries and deletes of counted rows wait, and it waits for them).
SELECT high_water FROM {state} WHERE error_queue = %(error_queue)s FOR UPDATE

-- error_groups_state_share --
-- The high water, held shared by a retry or delete until it commits (a catch-up waits for it; they never wait for
-- each other).
SELECT high_water FROM {state} WHERE error_queue = %(error_queue)s FOR SHARE

-- error_groups_state_read --
-- The high water, when the groups were last rebuilt and caught up, when they were last compared with an exact count,
-- the drift that count found and its age in seconds (the database's clock; no lock).
SELECT high_water, to_char(rebuilt_at, 'YYYY-MM-DD"T"HH24:MI:SS"Z"'), to_char(caught_up_at, 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
       to_char(checked_at, 'YYYY-MM-DD"T"HH24:MI:SS"Z"'), drift,
       EXTRACT(EPOCH FROM (now() AT TIME ZONE 'utc') - checked_at)::float8
FROM {state} WHERE error_queue = %(error_queue)s

-- error_groups_state_set --
-- Everything up to %(high_water)s is counted.
UPDATE {state} SET high_water = %(high_water)s, caught_up_at = now() AT TIME ZONE 'utc'
WHERE error_queue = %(error_queue)s

-- error_groups_state_rebuilt --
-- A rebuild starts: nothing counted (so nothing counted wrongly: no drift as of now).
UPDATE {state} SET high_water = 0, rebuilt_at = now() AT TIME ZONE 'utc', caught_up_at = NULL,
                   checked_at = now() AT TIME ZONE 'utc', drift = 0
WHERE error_queue = %(error_queue)s

-- error_groups_checked --
-- The groups were just compared with an exact count of the queue: the rows they miss (%(drift)s, 0: they agree).
UPDATE {state} SET checked_at = now() AT TIME ZONE 'utc', drift = %(drift)s WHERE error_queue = %(error_queue)s

-- error_groups_check --
-- The drift check, one statement (one snapshot): the queue's rows (an index-only count of every row: the one
-- O(rows) read of the summary, never on a page's path), the rows its groups count, and the rows above the high water.
SELECT (SELECT count(*) FROM {queue}),
       (SELECT COALESCE(sum(message_count), 0) FROM {groups} WHERE error_queue = %(error_queue)s AND message_count > 0),
       (SELECT count(*) FROM {queue} WHERE seq > (SELECT high_water FROM {state} WHERE error_queue = %(error_queue)s))

-- error_groups_clear --
-- Forget every group of one error queue (a rebuild).
DELETE FROM {groups} WHERE error_queue = %(error_queue)s

-- error_groups_list --
-- The groups of one error queue that hold messages, largest first.
SELECT failed_q, exception_type, message_type, message_count, first_failure, last_failure, first_seq, last_seq
FROM {groups} WHERE error_queue = %(error_queue)s AND message_count > 0
ORDER BY message_count DESC, failed_q, exception_type, message_type

-- error_groups_add --
-- Count %(message_count)s more messages into a group (rowcount 0: no such group yet, insert it).
UPDATE {groups} SET
    first_failure = CASE WHEN message_count = 0 OR first_failure IS NULL THEN %(first_failure)s::text
                         WHEN %(first_failure)s::text IS NULL OR first_failure <= %(first_failure)s::text THEN first_failure
                         ELSE %(first_failure)s::text END,
    last_failure = CASE WHEN message_count = 0 OR last_failure IS NULL THEN %(last_failure)s::text
                        WHEN %(last_failure)s::text IS NULL OR last_failure >= %(last_failure)s::text THEN last_failure
                        ELSE %(last_failure)s::text END,
    first_seq = CASE WHEN message_count = 0 OR first_seq IS NULL OR first_seq > %(first_seq)s THEN %(first_seq)s
                     ELSE first_seq END,
    last_seq = CASE WHEN message_count = 0 OR last_seq IS NULL OR last_seq < %(last_seq)s THEN %(last_seq)s
                    ELSE last_seq END,
    message_count = message_count + %(message_count)s
WHERE error_queue = %(error_queue)s AND failed_q IS NOT DISTINCT FROM %(failed_q)s::text
  AND exception_type IS NOT DISTINCT FROM %(exception_type)s::text AND message_type IS NOT DISTINCT FROM %(message_type)s::text

-- error_groups_insert --
-- A new group of one error queue.
INSERT INTO {groups} (error_queue, failed_q, exception_type, message_type, message_count, first_failure, last_failure,
                      first_seq, last_seq)
VALUES (%(error_queue)s, %(failed_q)s::text, %(exception_type)s::text, %(message_type)s::text, %(message_count)s, %(first_failure)s::text,
        %(last_failure)s::text, %(first_seq)s, %(last_seq)s)

-- error_groups_forget --
-- One counted message left the error queue: its group counts one less.
UPDATE {groups} SET message_count = message_count - 1
WHERE error_queue = %(error_queue)s AND failed_q IS NOT DISTINCT FROM %(failed_q)s::text
  AND exception_type IS NOT DISTINCT FROM %(exception_type)s::text AND message_type IS NOT DISTINCT FROM %(message_type)s::text
  AND message_count > 0

-- error_groups_fields --
-- The group fields of one row of {queue}: FailedQ, exception type, message
-- type, time of failure. A fragment, never run alone: the {group_fields} slot of failed_page, failed_groups,
-- error_groups_range, error_groups_merge_range and error_group_of is filled with it when the file is loaded (one text: they can never
-- read a header differently).
COALESCE(NULLIF(replace(replace(replace(split_part(replace(replace(left(split_part(headers, '"NServiceBus.FailedQ":"', 2), 2000), '\\', E'\x02'), '\"', E'\x01'), '"', 1), E'\x01', '"'), '\/', '/'), E'\x02', '\'), ''),
                NULLIF(replace(replace(replace(split_part(replace(replace(left(split_part(headers, '"NServiceBus.FailedQ": "', 2), 2000), '\\', E'\x02'), '\"', E'\x01'), '"', 1), E'\x01', '"'), '\/', '/'), E'\x02', '\'), '')) AS failed_q,
       COALESCE(NULLIF(split_part(split_part(headers, '"NServiceBus.ExceptionInfo.ExceptionType":"', 2), '"', 1), ''),
                NULLIF(split_part(split_part(headers, '"NServiceBus.ExceptionInfo.ExceptionType": "', 2), '"', 1), '')) AS exception_type,
       left(COALESCE(NULLIF(split_part(split_part(headers, '"NServiceBus.EnclosedMessageTypes":"', 2), '"', 1), ''),
                NULLIF(split_part(split_part(headers, '"NServiceBus.EnclosedMessageTypes": "', 2), '"', 1), '')), 300) AS message_type,
       COALESCE(NULLIF(split_part(split_part(headers, '"NServiceBus.TimeOfFailure":"', 2), '"', 1), ''),
                NULLIF(split_part(split_part(headers, '"NServiceBus.TimeOfFailure": "', 2), '"', 1), '')) AS time_of_failure

-- error_groups_range --
-- The groups of the rows after %(after_seq)s up to %(through_seq)s (what a catch-up or rebuild counts), the fields
-- read exactly as failed_groups reads them.
SELECT failed_q, exception_type, message_type, count(*), min(time_of_failure), max(time_of_failure), min(seq), max(seq)
FROM (
    SELECT seq, {group_fields}
    FROM {queue}
    WHERE seq > %(after_seq)s AND seq <= %(through_seq)s
) AS f
GROUP BY failed_q, exception_type, message_type

-- error_groups_merge_range --
-- error_groups_range counted into the groups in one statement (one round trip however many groups the rows hold):
-- existing groups updated, new ones inserted; returns the rows counted.
WITH r AS (
    SELECT failed_q, exception_type, message_type, count(*) AS n, min(time_of_failure) AS first_failure,
           max(time_of_failure) AS last_failure, min(seq) AS first_seq, max(seq) AS last_seq
    FROM (
        SELECT seq, {group_fields}
        FROM {queue}
        WHERE seq > %(after_seq)s AND seq <= %(through_seq)s
    ) AS f
    GROUP BY failed_q, exception_type, message_type
), u AS (
    UPDATE {groups} AS g SET
        first_failure = CASE WHEN g.message_count = 0 OR g.first_failure IS NULL THEN r.first_failure
                             WHEN r.first_failure IS NULL OR g.first_failure <= r.first_failure THEN g.first_failure
                             ELSE r.first_failure END,
        last_failure = CASE WHEN g.message_count = 0 OR g.last_failure IS NULL THEN r.last_failure
                            WHEN r.last_failure IS NULL OR g.last_failure >= r.last_failure THEN g.last_failure
                            ELSE r.last_failure END,
        first_seq = CASE WHEN g.message_count = 0 OR g.first_seq IS NULL OR g.first_seq > r.first_seq THEN r.first_seq
                         ELSE g.first_seq END,
        last_seq = CASE WHEN g.message_count = 0 OR g.last_seq IS NULL OR g.last_seq < r.last_seq THEN r.last_seq
                        ELSE g.last_seq END,
        message_count = g.message_count + r.n
    FROM r
    WHERE g.error_queue = %(error_queue)s AND g.failed_q IS NOT DISTINCT FROM r.failed_q
      AND g.exception_type IS NOT DISTINCT FROM r.exception_type AND g.message_type IS NOT DISTINCT FROM r.message_type
    RETURNING g.failed_q, g.exception_type, g.message_type
), i AS (
    INSERT INTO {groups} (error_queue, failed_q, exception_type, message_type, message_count, first_failure, last_failure,
                          first_seq, last_seq)
    SELECT %(error_queue)s, r.failed_q, r.exception_type, r.message_type, r.n, r.first_failure, r.last_failure,
           r.first_seq, r.last_seq
    FROM r
    WHERE NOT EXISTS (SELECT 1 FROM u WHERE u.failed_q IS NOT DISTINCT FROM r.failed_q
                      AND u.exception_type IS NOT DISTINCT FROM r.exception_type
                      AND u.message_type IS NOT DISTINCT FROM r.message_type)
    RETURNING 1
)
SELECT COALESCE(sum(n), 0) FROM r

-- error_group_of --
-- The group of one row addressed by position and Id (the fields of error_groups_range, the time of failure last), the
-- row locked: the retry or delete about to take it out says which group counts one less.
SELECT {group_fields}
FROM {queue} WHERE seq = %(seq)s AND id::text = %(id)s FOR UPDATE

-- count_above --
-- Rows above a position (an index-only walk of the positions not counted into the error groups yet).
SELECT count(*) FROM {queue} WHERE seq > %(after_seq)s
