-- Every statement airflow-sqlqueue runs on SQLite (the embedded default; same logical columns as PostgreSQL).
-- %(name)s is a parameter (bound by the driver, never formatted in); {name} is an identifier quoted by the
-- dialect. SQLite has one writer at a time: every receive transaction starts with BEGIN IMMEDIATE, so
-- receivers never see each other's rows and no lock-skipping is needed.

-- table_exists --
-- 1 when the table exists.
SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = %(table_name)s

-- database_file --
-- The main database's file (empty for an in-memory database): what a watcher stats for wake-ups without queries.
SELECT file FROM pragma_database_list WHERE name = 'main'

-- object_named --
-- What holds a name (tables and indexes share one namespace): its type and, for an index, its table.
SELECT type, tbl_name FROM sqlite_master WHERE name = %(name)s COLLATE NOCASE

-- create_queue_table --
-- The queue table; seq is the rowid (never reused thanks to AUTOINCREMENT), so FIFO order is an index; id is
-- unique, as PostgreSQL's primary key.
CREATE TABLE IF NOT EXISTS {queue} (
    id TEXT NOT NULL UNIQUE,
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
    COALESCE(%(body)s, X''))

-- send_untimed --
-- Insert one message that has no time to be received (Expires stays NULL): the common send, three values. The
-- body is never NULL here (a send writes an empty body as empty bytes).
INSERT INTO {queue} (id, headers, body) VALUES (%(id)s, %(headers)s, %(body)s)

-- insert_raw --
-- Copy a row (same Id, no Expires): error queue moves, retries, forwards, the delayed mover. Inserts nothing when
-- the table already holds that Id (the caller then inserts it under a new Id); a NULL body is written as empty bytes.
INSERT INTO {queue} (id, expires, headers, body) VALUES (%(id)s, NULL, %(headers)s, COALESCE(%(body)s, X''))
ON CONFLICT DO NOTHING

-- send_delayed --
-- Store a message in the delayed table, due after %(delay_ms)s milliseconds (database clock).
INSERT INTO {delayed} (headers, body, due)
VALUES (%(headers)s, COALESCE(%(body)s, X''),
        strftime('%%Y-%%m-%%d %%H:%%M:%%f', julianday('now') + %(delay_ms)s / 86400000.0))

-- receive_batch --
-- Delete up to %(batch_size)s of the oldest rows and return them. Expired compares as dates (julianday), so an
-- Expires written by another program in another date format (ISO 8601 with T and Z, an offset) is read right,
-- and one that is no date at all (NULL from julianday) is never taken for expired. A row without Expires (most
-- rows) skips both date parses.
DELETE FROM {queue}
WHERE seq IN (SELECT seq FROM {queue} ORDER BY seq LIMIT %(batch_size)s)
RETURNING id, seq, CASE WHEN expires IS NULL THEN 0 ELSE COALESCE(julianday(expires) <= julianday('now'), 0) END AS expired,
          headers, body

-- receive_one --
-- receive_batch for one row: the oldest position as a scalar (the rowid's minimum, read off the end of the table)
-- instead of a list of positions, which SQLite builds as a temporary table first (a third of what a
-- one-message receive costs on the client's CPU). Expired as in receive_batch.
DELETE FROM {queue}
WHERE seq = (SELECT min(seq) FROM {queue})
RETURNING id, seq, CASE WHEN expires IS NULL THEN 0 ELSE COALESCE(julianday(expires) <= julianday('now'), 0) END AS expired,
          headers, body

-- receive_range --
-- Delete up to %(batch_size)s of the oldest rows with %(first_seq)s <= seq <= %(last_seq)s and return them: one
-- partition of a partitioned drain (the range keeps partitions disjoint). Expired as in receive_batch.
DELETE FROM {queue}
WHERE seq IN (SELECT seq FROM {queue} WHERE seq BETWEEN %(first_seq)s AND %(last_seq)s
              ORDER BY seq LIMIT %(batch_size)s)
RETURNING id, seq, CASE WHEN expires IS NULL THEN 0 ELSE COALESCE(julianday(expires) <= julianday('now'), 0) END AS expired,
          headers, body

-- seq_bounds --
-- Oldest and newest positions (both ends of the rowid; NULLs when empty): what a partitioned drain splits.
SELECT (SELECT min(seq) FROM {queue}), (SELECT max(seq) FROM {queue})

-- lock_batch --
-- Read up to %(batch_size)s of the oldest rows (the write lock taken by BEGIN IMMEDIATE holds them).
SELECT id, seq, CASE WHEN expires IS NULL THEN 0 ELSE COALESCE(julianday(expires) <= julianday('now'), 0) END AS expired,
       headers, body
FROM {queue} ORDER BY seq LIMIT %(batch_size)s

-- lock_after --
-- Read rows after a position, oldest first, under the transaction's write lock.
SELECT id, seq, CASE WHEN expires IS NULL THEN 0 ELSE COALESCE(julianday(expires) <= julianday('now'), 0) END AS expired,
       headers, body
FROM {queue} WHERE seq > %(after_seq)s ORDER BY seq LIMIT %(batch_size)s

-- browse --
-- Read rows after a position without deleting them.
SELECT id, seq, CASE WHEN expires IS NULL THEN 0 ELSE COALESCE(julianday(expires) <= julianday('now'), 0) END AS expired,
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

-- sent_position --
-- The highest seq the table ever handed out (AUTOINCREMENT keeps it in sqlite_sequence; no row before the first
-- send): how many messages were ever sent to the queue. Two readings a minute apart give the send rate.
SELECT seq FROM sqlite_sequence WHERE name = %(table_name)s

-- purge_expired --
-- Delete up to %(batch_size)s expired rows by seq (an Expires that is no date SQLite reads is never expired).
DELETE FROM {queue}
WHERE seq IN (SELECT seq FROM {queue} WHERE expires IS NOT NULL AND julianday(expires) <= julianday('now')
              LIMIT %(batch_size)s)

-- select_due_delayed --
-- Due delayed messages, oldest due first (moved by the mover in the same transaction). Due compares as a date
-- (another program may write another format); a Due that is no date is due now rather than never.
SELECT seq, headers, body FROM {delayed}
WHERE COALESCE(julianday(due) < julianday('now'), 1) ORDER BY due, seq LIMIT %(batch_size)s

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
-- Indexes of a table by first key column, and whether each is unique over that one column.
SELECT l.name, (SELECT i.name FROM pragma_index_info(l.name) AS i WHERE i.seqno = 0), 0, l.partial,
       (l."unique" = 1 AND l.partial = 0 AND (SELECT count(*) FROM pragma_index_info(l.name)) = 1)
FROM pragma_index_list(%(table_name)s) AS l ORDER BY l.name

-- Migration of queue tables made by airflow-sqlqueue 0.1 (id not unique). `sqlqueue check --repair` runs these
-- steps in one transaction (senders wait for SQLite's write lock); `sqlqueue ddl --migrate` prints them.

-- migrate_dedupe_ids --
-- Migration: give a new random Id to every row but the oldest of each Id held more than once (the
-- NServiceBus.MessageId header, the message's identity, is kept).
UPDATE {queue}
SET id = lower(hex(randomblob(4)) || '-' || hex(randomblob(2)) || '-4' || substr(hex(randomblob(2)), 2) || '-'
               || substr('89ab', 1 + (abs(random()) %% 4), 1) || substr(hex(randomblob(2)), 2) || '-'
               || hex(randomblob(6)))
WHERE seq IN (SELECT d.seq FROM (SELECT seq, row_number() OVER (PARTITION BY id ORDER BY seq) AS n FROM {queue}) AS d
              WHERE d.n > 1)

-- migrate_unique_id --
-- Migration: the unique index on id (what UNIQUE on the column gives a new table).
CREATE UNIQUE INDEX IF NOT EXISTS {id_index} ON {queue} (id)

-- create_subscription_table --
-- The subscription table shared by every endpoint (native publish/subscribe, the upstream shape; {table} is its name).
CREATE TABLE IF NOT EXISTS {table} (
    QueueAddress varchar(200) NOT NULL,
    Endpoint varchar(200) NOT NULL,
    Topic varchar(200) NOT NULL,
    PRIMARY KEY (Endpoint, Topic)
)

-- subscribe --
-- Subscribe an endpoint's queue to a topic (an upsert on (Endpoint, Topic): the endpoint's queue address is updated).
INSERT INTO {table} (QueueAddress, Topic, Endpoint)
VALUES (%(queue_address)s, %(topic)s, %(endpoint)s)
ON CONFLICT (Endpoint, Topic) DO UPDATE SET QueueAddress = excluded.QueueAddress

-- unsubscribe --
-- Remove an endpoint's subscription to a topic.
DELETE FROM {table} WHERE Endpoint = %(endpoint)s AND Topic = %(topic)s

-- subscribers --
-- The queue addresses subscribed to one topic.
SELECT DISTINCT QueueAddress FROM {table} WHERE Topic = %(topic)s

-- list_subscriptions --
-- Every subscription, by topic.
SELECT QueueAddress, Endpoint, Topic FROM {table} ORDER BY Topic, Endpoint

-- create_inbox_table --
-- The inbox (deduplication) table: one row per (consumer, message Id) a consumer finished, written in the same
-- transaction as the consumer's own work (as NServiceBus's outbox records handled messages). Times are UTC text.
CREATE TABLE IF NOT EXISTS {table} (
    Consumer varchar(200) NOT NULL,
    MessageId varchar(200) NOT NULL,
    ProcessedAt text NOT NULL DEFAULT (strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now')),
    PRIMARY KEY (Consumer, MessageId)
)

-- create_inbox_index --
-- Index used by the inbox's retention purge.
CREATE INDEX IF NOT EXISTS {inbox_index} ON {table} (ProcessedAt)

-- inbox_mark --
-- Record one message as handled by a consumer; inserts nothing (rowcount 0) when a committed transaction already did.
INSERT INTO {table} (Consumer, MessageId) VALUES (%(consumer)s, %(message_id)s) ON CONFLICT DO NOTHING

-- inbox_handled --
-- Whether a consumer already handled one message (1 or 0).
SELECT count(*) FROM {table} WHERE Consumer = %(consumer)s AND MessageId = %(message_id)s

-- purge_inbox --
-- Delete up to %(batch_size)s inbox rows older than %(older_than_s)s seconds (database clock).
DELETE FROM {table} WHERE rowid IN (
    SELECT rowid FROM {table}
    WHERE julianday(ProcessedAt) < julianday('now') - %(older_than_s)s / 86400.0
    LIMIT %(batch_size)s)

-- create_lease_table --
-- Leased rows (the event trigger's claims, ``processing.lease``): rows moved out of their queue in a short
-- transaction, each under its owner (a live trigger renews LeasedUntil, unix seconds) until Airflow stored the event
-- carrying them. Column names differ from a queue's, so the table is never taken for a queue.
CREATE TABLE IF NOT EXISTS {leases} (
    QueueName text NOT NULL,
    RowSeq integer NOT NULL,
    RowId text NOT NULL,
    RowExpires text NULL,
    RowHeaders text NOT NULL,
    RowBody blob NULL,
    Owner text NOT NULL,
    LeasedUntil real NOT NULL,
    PRIMARY KEY (QueueName, RowSeq)
)

-- lease_owners --
-- The owners holding leased rows of one queue, each with its lease's end (unix seconds).
SELECT Owner, max(LeasedUntil) FROM {leases} WHERE QueueName = %(queue_name)s GROUP BY Owner

-- lease_rows --
-- Copy claimed rows of a queue (%(seqs)s: a JSON array of positions) into the lease table under an owner; the
-- claim deletes them from the queue in the same transaction.
INSERT INTO {leases} (QueueName, RowSeq, RowId, RowExpires, RowHeaders, RowBody, Owner, LeasedUntil)
SELECT %(queue_name)s, seq, id, expires, headers, body, %(owner)s, %(until)s FROM {queue}
WHERE seq IN (SELECT value FROM json_each(%(seqs)s))

-- renew_leases --
-- Extend every lease of one owner.
UPDATE {leases} SET LeasedUntil = %(until)s WHERE Owner = %(owner)s

-- return_leased --
-- Put an owner's leased rows of a queue back at their positions (the same seq: AUTOINCREMENT never hands one out
-- twice), all of them (%(seqs)s NULL) or those listed. A row whose Id the queue holds again stays leased.
INSERT INTO {queue} (id, expires, headers, body, seq)
SELECT RowId, RowExpires, RowHeaders, RowBody, RowSeq FROM {leases}
WHERE QueueName = %(queue_name)s AND Owner = %(owner)s
  AND (%(seqs)s IS NULL OR RowSeq IN (SELECT value FROM json_each(%(seqs)s)))
ORDER BY RowSeq
ON CONFLICT DO NOTHING

-- drop_returned --
-- Forget an owner's leases of rows that are back in their queue (after return_leased).
-- (a look-up of the queue's position per leased row: not a walk over the whole queue)
DELETE FROM {leases} WHERE QueueName = %(queue_name)s AND Owner = %(owner)s
  AND EXISTS (SELECT 1 FROM {queue} WHERE seq = RowSeq)

-- drop_leased --
-- Delete an owner's leased rows (their event was stored, or they went to the error queue).
DELETE FROM {leases}
WHERE QueueName = %(queue_name)s AND Owner = %(owner)s AND RowSeq IN (SELECT value FROM json_each(%(seqs)s))

-- count_rows --
-- Exact number of rows (the error queue's depth on the page: the peek estimate counts gaps left by retries).
SELECT count(*) FROM {queue}

-- failed_page --
-- One page of an error queue after a position (and up to %(through_seq)s), for the browser. Headers and body are cut to a preview here
-- (bytes, never sent whole); every text comes back as a BLOB, so a row other programs wrote with loose types
-- or invalid UTF-8 cannot make the statement fail. Grouping fields are read only from valid JSON text of at most
-- one MiB (the provider sends at most 1,000,000 characters): huge headers cannot make a page run long.
-- The last column is the headers' storage type (a retry takes only 'text').
-- Filters: NULL matches any row; %(search)s is text the headers contain (exact case); <field>_missing = 1
-- matches only rows without that field (absent or empty).
-- The search is also looked for as header JSON stores it: %(search_wire)s (as NServiceBus writes it, '/' as '\/'),
-- %(search_json)s and %(search_ascii)s (JSON escapes, raw and ASCII-only non-ASCII); in the Id (any case); and in
-- the body's bytes (%(search_body)s and %(search_body_wire)s: the search's UTF-8 bytes, plain and as NServiceBus
-- writes JSON).
-- FailedQ: any of %(failed_q)s and failed_q_2 to failed_q_8 (spellings of one queue; NULL where unused).
SELECT CAST(CAST(id AS TEXT) AS BLOB), seq, failed_q, exception_type, message_type, time_of_failure,
       substr(exception_message, 1, 2000), substr(stack_trace, 1, 8000), headers_preview, headers_length,
       body_preview, body_length, headers_type
FROM (
    SELECT id, seq, typeof(headers) AS headers_type,
           CASE WHEN ok THEN CAST(json_extract(headers, '$."NServiceBus.FailedQ"') AS BLOB) END AS failed_q,
           CASE WHEN ok THEN CAST(json_extract(headers, '$."NServiceBus.ExceptionInfo.ExceptionType"') AS BLOB) END
               AS exception_type,
           CASE WHEN ok THEN substr(CAST(json_extract(headers, '$."NServiceBus.EnclosedMessageTypes"') AS BLOB), 1, 300)
           END AS message_type,
           CASE WHEN ok THEN CAST(json_extract(headers, '$."NServiceBus.TimeOfFailure"') AS BLOB) END
               AS time_of_failure,
           CASE WHEN ok THEN CAST(json_extract(headers, '$."NServiceBus.ExceptionInfo.Message"') AS BLOB) END
               AS exception_message,
           CASE WHEN ok THEN CAST(json_extract(headers, '$."NServiceBus.ExceptionInfo.StackTrace"') AS BLOB) END
               AS stack_trace,
           substr(CAST(headers AS BLOB), 1, %(headers_chars)s) AS headers_preview,
           length(CAST(headers AS BLOB)) AS headers_length,
           substr(CAST(body AS BLOB), 1, %(body_bytes)s) AS body_preview,
           length(CAST(body AS BLOB)) AS body_length,
           headers, body
    FROM (SELECT id, seq, headers, body, typeof(headers) = 'text' AND length(CAST(headers AS BLOB)) <= 1048576 AND json_valid(headers) AS ok
          FROM {queue} WHERE seq > %(after_seq)s AND seq <= %(through_seq)s)
) AS f
WHERE (%(failed_q)s IS NULL OR f.failed_q IN (CAST(%(failed_q)s AS BLOB), CAST(%(failed_q_2)s AS BLOB),
       CAST(%(failed_q_3)s AS BLOB), CAST(%(failed_q_4)s AS BLOB), CAST(%(failed_q_5)s AS BLOB),
       CAST(%(failed_q_6)s AS BLOB), CAST(%(failed_q_7)s AS BLOB), CAST(%(failed_q_8)s AS BLOB)))
  AND (%(exception_type)s IS NULL OR f.exception_type = CAST(%(exception_type)s AS BLOB))
  AND (%(message_type)s IS NULL OR f.message_type = CAST(%(message_type)s AS BLOB))
  AND (%(search)s IS NULL OR instr(CAST(f.headers AS BLOB), CAST(%(search)s AS BLOB)) > 0
       OR instr(CAST(f.headers AS BLOB), CAST(%(search_wire)s AS BLOB)) > 0
       OR instr(CAST(f.headers AS BLOB), CAST(%(search_json)s AS BLOB)) > 0
       OR instr(CAST(f.headers AS BLOB), CAST(%(search_ascii)s AS BLOB)) > 0
       OR instr(lower(CAST(f.id AS TEXT)), lower(%(search)s)) > 0
       OR instr(CAST(f.body AS BLOB), CAST(%(search_body)s AS BLOB)) > 0
       OR instr(CAST(f.body AS BLOB), CAST(%(search_body_wire)s AS BLOB)) > 0)
  AND (%(failed_q_missing)s = 0 OR COALESCE(length(f.failed_q), 0) = 0)
  AND (%(exception_type_missing)s = 0 OR COALESCE(length(f.exception_type), 0) = 0)
  AND (%(message_type_missing)s = 0 OR COALESCE(length(f.message_type), 0) = 0)
ORDER BY f.seq
LIMIT %(batch_size)s

-- failed_groups --
-- Only rows after %(after_seq)s up to %(through_seq)s (a range of positions: the page keeps groups per range).
-- Failed messages counted by the queue they failed in, exception type and message type, with the first and
-- last failure (read from valid JSON text only, returned as BLOBs as in failed_page); largest groups first.
SELECT failed_q, exception_type, message_type, count(*), min(time_of_failure), max(time_of_failure)
FROM (
    SELECT CASE WHEN ok THEN CAST(json_extract(headers, '$."NServiceBus.FailedQ"') AS BLOB) END AS failed_q,
           CASE WHEN ok THEN CAST(json_extract(headers, '$."NServiceBus.ExceptionInfo.ExceptionType"') AS BLOB) END
               AS exception_type,
           CASE WHEN ok THEN substr(CAST(json_extract(headers, '$."NServiceBus.EnclosedMessageTypes"') AS BLOB), 1, 300)
           END AS message_type,
           CASE WHEN ok THEN CAST(json_extract(headers, '$."NServiceBus.TimeOfFailure"') AS BLOB) END
               AS time_of_failure
    FROM (SELECT headers, typeof(headers) = 'text' AND length(CAST(headers AS BLOB)) <= 1048576 AND json_valid(headers) AS ok FROM {queue}
          WHERE seq > %(after_seq)s AND seq <= %(through_seq)s)
) AS f
GROUP BY failed_q, exception_type, message_type
ORDER BY count(*) DESC, failed_q, exception_type, message_type
LIMIT %(batch_size)s

-- lock_position --
-- Read one row addressed by position and Id (seq is the rowid; the transaction holds the write lock).
SELECT id, seq, 0, headers, body FROM {queue} WHERE seq = %(seq)s AND CAST(id AS TEXT) = %(id)s

-- delete_position --
-- Delete one row addressed by position and Id (a rowid seek).
DELETE FROM {queue} WHERE seq = %(seq)s AND CAST(id AS TEXT) = %(id)s

-- head_time_sent --
-- TimeSent of the oldest row (read only from valid JSON text, as a BLOB): the age of the queue without reading
-- the whole headers of a row that may be huge or not JSON.
SELECT CASE WHEN typeof(headers) = 'text' AND length(CAST(headers AS BLOB)) <= 1048576 AND json_valid(headers)
            THEN CAST(json_extract(headers, '$."NServiceBus.TimeSent"') AS BLOB) END
FROM {queue} ORDER BY seq LIMIT 1

-- archive_rows --
-- Whole rows after position %(after_seq)s up to %(through_seq)s, oldest first, for the error archive. Every value
-- comes back as bytes with its storage type, so a row other programs wrote with loose types or invalid UTF-8 is
-- archived byte for byte (CorrelationId, ReplyToAddress and Recoverable are SQL Server columns: NULL here).
SELECT CAST(CAST(id AS TEXT) AS BLOB), NULL, NULL, NULL, CAST(expires AS BLOB), typeof(headers),
       CAST(headers AS BLOB), typeof(body), CAST(body AS BLOB), seq
FROM {queue} WHERE seq > %(after_seq)s AND seq <= %(through_seq)s ORDER BY seq

-- restore_row --
-- Put an archived row back (same Id, Expires, headers and body; text or blob as it was stored). Inserts nothing
-- when the table already holds that Id; a NULL body is written as empty bytes.
INSERT INTO {queue} (id, expires, headers, body)
VALUES (%(id)s, %(expires)s,
        CASE WHEN %(headers_type)s = 'blob' THEN %(headers)s ELSE CAST(%(headers)s AS TEXT) END,
        CASE WHEN %(body_type)s = 'text' THEN CAST(%(body)s AS TEXT) ELSE COALESCE(%(body)s, X'') END)
ON CONFLICT DO NOTHING

-- id_present --
-- 1 when the table holds a row with this Id (the unique index on id).
SELECT count(*) FROM {queue} WHERE id = %(id)s

-- create_redirect_table --
-- Retry redirects (an airflow-sqlqueue extra, beside the error queue): the messages that failed in SourceQueue go
-- back to TargetQueue when retried, by every retry path. Names are canonical queue names; one redirect per source.
-- Times are UTC text.
CREATE TABLE IF NOT EXISTS {table} (
    SourceQueue varchar(450) NOT NULL PRIMARY KEY,
    TargetQueue varchar(450) NOT NULL,
    CreatedBy varchar(200) NULL,
    CreatedAt text NOT NULL DEFAULT (strftime('%%Y-%%m-%%dT%%H:%%M:%%fZ', 'now'))
)

-- list_redirects --
-- Every retry redirect, by source queue.
SELECT SourceQueue, TargetQueue, CreatedBy, CreatedAt FROM {table} ORDER BY SourceQueue

-- insert_redirect --
-- Add one retry redirect; inserts nothing (rowcount 0) when that source already has one.
INSERT INTO {table} (SourceQueue, TargetQueue, CreatedBy)
VALUES (%(source_queue)s, %(target_queue)s, %(created_by)s)
ON CONFLICT DO NOTHING

-- delete_redirect --
-- Remove the retry redirect of one source queue.
DELETE FROM {table} WHERE SourceQueue = %(source_queue)s

-- position_of_id --
-- The position of the row with this Id, if any (the unique index on id; the failed-message page finds a message by Id).
SELECT seq FROM {queue} WHERE id = %(id)s

-- estimate_rows --
-- No row estimate on SQLite: the error queue's depth is always counted (NULL).
SELECT NULL WHERE %(qualified_name)s IS NOT NULL

-- scan_end --
-- The position %(batch_size)s rows after %(after_seq)s (NULL when fewer rows follow): a filtered page reads at most
-- the rows up to it, so a rare group or a search costs the same on any queue size.
SELECT seq FROM {queue} WHERE seq > %(after_seq)s ORDER BY seq LIMIT 1 OFFSET %(batch_size)s - 1

-- range_counts --
-- Rows per range of %(batch_size)s positions (the seq index, no row read): which ranges changed since their groups
-- were counted (rows are only ever taken out of a range: a new row gets a new, higher position).
SELECT seq / %(batch_size)s, count(*) FROM {queue} GROUP BY 1

-- count_and_last --
-- Rows and the newest position: unchanged both, no row came or went (a new row gets a higher position).
SELECT count(*), max(seq) FROM {queue}

-- create_error_groups_table --
-- Error groups summary (an airflow-sqlqueue extra beside the error queue, like SqlQueueRetryRedirects): the group
-- counts of each error queue, so the page reads a few rows instead of every failed message. SqlQueueErrorGroups holds one row
-- per (error queue, FailedQ, exception type, message type) with its count and first and last failure; SqlQueueErrorGroupsState one
-- row per error queue with the highest position counted (HighWater). Rows above HighWater are counted by a catch-up;
-- a retry, delete or archive by this provider takes its rows out in its own transaction. The group fields are the
-- BLOBs failed_groups reads. Times are UTC text.
-- Group counts of the error queues of this database (no key: rows are added only by the one writer).
CREATE TABLE IF NOT EXISTS {groups} (
    ErrorQueue varchar(450) NOT NULL,
    FailedQ BLOB NULL,
    ExceptionType BLOB NULL,
    MessageType BLOB NULL,
    MessageCount INTEGER NOT NULL,
    FirstSeq INTEGER NULL,
    LastSeq INTEGER NULL,
    FirstFailure BLOB NULL,
    LastFailure BLOB NULL
)

-- create_error_groups_index --
-- The group rows of one error queue.
CREATE INDEX IF NOT EXISTS {groups_index} ON {groups} (ErrorQueue)

-- create_error_groups_state_table --
-- One row per error queue: the highest position counted into its groups, when they were last rebuilt and caught up,
-- and when the groups were last compared with an exact count of the queue (the drift check) and what it found.
CREATE TABLE IF NOT EXISTS {state} (
    ErrorQueue varchar(450) NOT NULL PRIMARY KEY,
    HighWater INTEGER NOT NULL,
    RebuiltAt text NOT NULL DEFAULT (strftime('%%Y-%%m-%%dT%%H:%%M:%%SZ', 'now')),
    CaughtUpAt text NULL,
    CheckedAt text NULL,
    Drift INTEGER NULL
)

-- error_groups_state_insert --
-- The state row of an error queue (nothing counted yet); nothing when it exists.
INSERT INTO {state} (ErrorQueue, HighWater) VALUES (%(error_queue)s, 0) ON CONFLICT DO NOTHING

-- error_groups_state_lock --
-- The high water for a catch-up or rebuild (the transaction holds SQLite's one write lock).
SELECT HighWater FROM {state} WHERE ErrorQueue = %(error_queue)s

-- error_groups_state_share --
-- The high water for a retry or delete (the transaction holds SQLite's one write lock).
SELECT HighWater FROM {state} WHERE ErrorQueue = %(error_queue)s

-- error_groups_state_read --
-- The high water, when the groups were last rebuilt and caught up, when they were last compared with an exact count,
-- the drift that count found and its age in seconds.
SELECT HighWater, RebuiltAt, CaughtUpAt, CheckedAt, Drift, (julianday('now') - julianday(CheckedAt)) * 86400.0
FROM {state} WHERE ErrorQueue = %(error_queue)s

-- error_groups_state_set --
-- Everything up to %(high_water)s is counted.
UPDATE {state} SET HighWater = %(high_water)s, CaughtUpAt = strftime('%%Y-%%m-%%dT%%H:%%M:%%SZ', 'now')
WHERE ErrorQueue = %(error_queue)s

-- error_groups_state_rebuilt --
-- A rebuild starts: nothing counted (so nothing counted wrongly: no drift as of now).
UPDATE {state} SET HighWater = 0, RebuiltAt = strftime('%%Y-%%m-%%dT%%H:%%M:%%SZ', 'now'), CaughtUpAt = NULL,
                   CheckedAt = strftime('%%Y-%%m-%%dT%%H:%%M:%%fZ', 'now'), Drift = 0
WHERE ErrorQueue = %(error_queue)s

-- error_groups_checked --
-- The groups were just compared with an exact count of the queue: the rows they miss (%(drift)s, 0: they agree).
UPDATE {state} SET CheckedAt = strftime('%%Y-%%m-%%dT%%H:%%M:%%fZ', 'now'), Drift = %(drift)s
WHERE ErrorQueue = %(error_queue)s

-- error_groups_check --
-- The drift check, one statement (one read transaction): the queue's rows (a count of every row: never on a page's
-- path), the rows its groups count, and the rows above the high water.
SELECT (SELECT count(*) FROM {queue}),
       (SELECT COALESCE(sum(MessageCount), 0) FROM {groups} WHERE ErrorQueue = %(error_queue)s AND MessageCount > 0),
       (SELECT count(*) FROM {queue} WHERE seq > (SELECT HighWater FROM {state} WHERE ErrorQueue = %(error_queue)s))

-- error_groups_clear --
-- Forget every group of one error queue (a rebuild).
DELETE FROM {groups} WHERE ErrorQueue = %(error_queue)s

-- error_groups_list --
-- The groups of one error queue that hold messages, largest first.
SELECT FailedQ, ExceptionType, MessageType, MessageCount, FirstFailure, LastFailure, FirstSeq, LastSeq
FROM {groups} WHERE ErrorQueue = %(error_queue)s AND MessageCount > 0
ORDER BY MessageCount DESC, FailedQ, ExceptionType, MessageType

-- error_groups_add --
-- Count %(message_count)s more messages into a group (rowcount 0: no such group yet, insert it).
UPDATE {groups} SET
    FirstFailure = CASE WHEN MessageCount = 0 OR FirstFailure IS NULL THEN %(first_failure)s
                        WHEN %(first_failure)s IS NULL OR FirstFailure <= %(first_failure)s THEN FirstFailure
                        ELSE %(first_failure)s END,
    LastFailure = CASE WHEN MessageCount = 0 OR LastFailure IS NULL THEN %(last_failure)s
                       WHEN %(last_failure)s IS NULL OR LastFailure >= %(last_failure)s THEN LastFailure
                       ELSE %(last_failure)s END,
    FirstSeq = CASE WHEN MessageCount = 0 OR FirstSeq IS NULL OR FirstSeq > %(first_seq)s THEN %(first_seq)s
                    ELSE FirstSeq END,
    LastSeq = CASE WHEN MessageCount = 0 OR LastSeq IS NULL OR LastSeq < %(last_seq)s THEN %(last_seq)s
                   ELSE LastSeq END,
    MessageCount = MessageCount + %(message_count)s
WHERE ErrorQueue = %(error_queue)s AND FailedQ IS %(failed_q)s AND ExceptionType IS %(exception_type)s
  AND MessageType IS %(message_type)s

-- error_groups_insert --
-- A new group of one error queue.
INSERT INTO {groups} (ErrorQueue, FailedQ, ExceptionType, MessageType, MessageCount, FirstFailure, LastFailure,
                      FirstSeq, LastSeq)
VALUES (%(error_queue)s, %(failed_q)s, %(exception_type)s, %(message_type)s, %(message_count)s, %(first_failure)s,
        %(last_failure)s, %(first_seq)s, %(last_seq)s)

-- error_groups_forget --
-- One counted message left the error queue: its group counts one less.
UPDATE {groups} SET MessageCount = MessageCount - 1
WHERE ErrorQueue = %(error_queue)s AND FailedQ IS %(failed_q)s AND ExceptionType IS %(exception_type)s
  AND MessageType IS %(message_type)s AND MessageCount > 0

-- error_groups_range --
-- The groups of the rows after %(after_seq)s up to %(through_seq)s (what a catch-up or rebuild counts), the fields
-- read exactly as failed_groups reads them.
SELECT failed_q, exception_type, message_type, count(*), min(time_of_failure), max(time_of_failure), min(seq), max(seq)
FROM (
    SELECT seq, CASE WHEN ok THEN CAST(json_extract(headers, '$."NServiceBus.FailedQ"') AS BLOB) END AS failed_q,
           CASE WHEN ok THEN CAST(json_extract(headers, '$."NServiceBus.ExceptionInfo.ExceptionType"') AS BLOB) END
               AS exception_type,
           CASE WHEN ok THEN substr(CAST(json_extract(headers, '$."NServiceBus.EnclosedMessageTypes"') AS BLOB), 1, 300)
           END AS message_type,
           CASE WHEN ok THEN CAST(json_extract(headers, '$."NServiceBus.TimeOfFailure"') AS BLOB) END
               AS time_of_failure
    FROM (SELECT seq, headers, typeof(headers) = 'text' AND length(CAST(headers AS BLOB)) <= 1048576 AND json_valid(headers) AS ok FROM {queue}
          WHERE seq > %(after_seq)s AND seq <= %(through_seq)s)
) AS f
GROUP BY failed_q, exception_type, message_type

-- error_group_of --
-- The group of one row addressed by position and Id (fields as error_groups_range reads them): the retry or delete
-- about to take it out says which group counts one less.
SELECT CASE WHEN ok THEN CAST(json_extract(headers, '$."NServiceBus.FailedQ"') AS BLOB) END,
       CASE WHEN ok THEN CAST(json_extract(headers, '$."NServiceBus.ExceptionInfo.ExceptionType"') AS BLOB) END,
       CASE WHEN ok THEN substr(CAST(json_extract(headers, '$."NServiceBus.EnclosedMessageTypes"') AS BLOB), 1, 300) END
FROM (SELECT headers, typeof(headers) = 'text' AND length(CAST(headers AS BLOB)) <= 1048576 AND json_valid(headers) AS ok
      FROM {queue} WHERE seq = %(seq)s AND CAST(id AS TEXT) = %(id)s)

-- count_above --
-- Rows above a position (the positions not counted into the error groups yet).
SELECT count(*) FROM {queue} WHERE seq > %(after_seq)s
