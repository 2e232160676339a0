-- Every statement airflow-sqlqueue runs on SQL Server (wire-compatible with NServiceBus.Transport.SqlServer 9.x).
-- %(name)s is a parameter (bound by the driver, never formatted in); {name} is an identifier quoted by the
-- dialect: {queue} and {delayed} are [catalog].[schema].[table] names, {sys} is the sys schema of the
-- queue's database ([catalog].sys, or sys).
-- No statement holds a literal percent sign: pymssql passes a doubled one to the server unchanged and pyodbc
-- never sees one, so the modulo operator is written x - x / d * d (integer division) instead.
-- Batch send and batch delete use OPENJSON on SQL Server 2016+ at database compatibility level 130+; below
-- that (and on Babelfish) they use VALUES rows and IN lists in chunks (server_facts decides, per connection).
-- Sessions run READ COMMITTED (set_isolation): READPAST only skips locked rows under READ COMMITTED.

-- server_facts --
-- Read once per connection: the database's compatibility level (OPENJSON needs 130+) and @@VERSION (Babelfish names itself there).
SELECT (SELECT compatibility_level FROM sys.databases WHERE database_id = DB_ID()), @@VERSION

-- set_isolation --
-- Run once per connection: READPAST (receive, peek, purge) needs READ COMMITTED, whatever the server default.
SET TRANSACTION ISOLATION LEVEL READ COMMITTED

-- create_lock --
-- Serialize concurrent creators of one table (same resource name as NServiceBus: '<table>_lock'; released at commit).
EXEC sp_getapplock @Resource = %(lock_name)s, @LockMode = 'Exclusive', @LockOwner = 'Transaction'

-- schema_exists --
-- 1 when the schema exists (queues never create schemas implicitly).
SELECT COUNT(*) FROM {sys}.schemas WHERE name = %(schema_name)s

-- table_exists --
-- 1 when the table exists (%(object_name)s is the bracket-quoted qualified name, passed as a value).
SELECT COUNT(*) FROM {sys}.objects WHERE object_id = OBJECT_ID(%(object_name)s) AND type = 'U'

-- compatibility_level --
-- The compatibility level of the session's database: below 130 OPENJSON does not exist, and batch sends and deletes use one statement per row instead.
SELECT compatibility_level FROM sys.databases WHERE name = DB_NAME()

-- column_exists --
-- Whether a column exists (old queue tables lack Recoverable), and whether the table exists at all.
SELECT CASE WHEN COL_LENGTH(%(object_name)s, %(column_name)s) IS NULL THEN 0 ELSE 1 END,
       CASE WHEN OBJECT_ID(%(object_name)s, 'U') IS NULL THEN 0 ELSE 1 END

-- create_queue_table --
-- The queue table: the exact shape NServiceBus.Transport.SqlServer creates (a heap, no primary key).
CREATE TABLE {queue} (
    Id uniqueidentifier NOT NULL,
    CorrelationId varchar(255) NULL,
    ReplyToAddress varchar(255) NULL,
    Recoverable bit NOT NULL,
    Expires datetime NULL,
    Headers nvarchar(max) NOT NULL,
    Body varbinary(max) NULL,
    RowVersion bigint IDENTITY(1,1) NOT NULL
);

-- create_queue_seq_index --
-- FIFO order index used by receive and peek (NONCLUSTERED: a clustered one causes latch contention).
CREATE NONCLUSTERED INDEX {seq_index} ON {queue} (RowVersion);

-- create_queue_expires_index --
-- Filtered index used by purge of expired messages.
CREATE NONCLUSTERED INDEX {expires_index} ON {queue} (Expires) INCLUDE (Id, RowVersion) WHERE Expires IS NOT NULL;

-- create_delayed_table --
-- The delayed-delivery store of an endpoint ("<endpoint>.Delayed").
CREATE TABLE {delayed} (
    Headers nvarchar(max) NOT NULL,
    Body varbinary(max) NULL,
    Due datetime NOT NULL,
    RowVersion bigint IDENTITY(1,1) NOT NULL
);

-- create_delayed_due_index --
-- Index used by the delayed-message mover.
CREATE NONCLUSTERED INDEX {due_index} ON {delayed} (Due);

-- send --
-- Insert one message; Expires = UTC now + TTBR in ms (database clock; whole days added first so a TTBR over 24.8 days does not overflow DATEADD's int).
INSERT INTO {queue} (Id, CorrelationId, ReplyToAddress, Recoverable, Expires, Headers, Body)
VALUES (
    %(id)s,
    NULL,
    NULL,
    1,
    CASE WHEN %(ttbr_ms)s IS NULL THEN NULL
         ELSE DATEADD(ms, CAST(%(ttbr_ms)s AS bigint) - CAST(%(ttbr_ms)s AS bigint) / 86400000 * 86400000,
                      DATEADD(day, CAST(%(ttbr_ms)s AS bigint) / 86400000, GETUTCDATE())) END,
    %(headers)s,
    CAST(%(body)s AS varbinary(max)))

-- send_no_recoverable --
-- send, for an old queue table without the Recoverable column.
INSERT INTO {queue} (Id, CorrelationId, ReplyToAddress, Expires, Headers, Body)
VALUES (
    %(id)s,
    NULL,
    NULL,
    CASE WHEN %(ttbr_ms)s IS NULL THEN NULL
         ELSE DATEADD(ms, CAST(%(ttbr_ms)s AS bigint) - CAST(%(ttbr_ms)s AS bigint) / 86400000 * 86400000,
                      DATEADD(day, CAST(%(ttbr_ms)s AS bigint) / 86400000, GETUTCDATE())) END,
    %(headers)s,
    CAST(%(body)s AS varbinary(max)))

-- send_many --
-- Insert a batch in one statement and one round trip: %(rows)s is a JSON array of {"n", "id", "ttbr_ms", "headers", "body" (base64)}; RowVersion follows n.
INSERT INTO {queue} (Id, CorrelationId, ReplyToAddress, Recoverable, Expires, Headers, Body)
SELECT m.id,
       NULL,
       NULL,
       1,
       CASE WHEN m.ttbr_ms IS NULL THEN NULL
            ELSE DATEADD(ms, m.ttbr_ms - m.ttbr_ms / 86400000 * 86400000,
                        DATEADD(day, m.ttbr_ms / 86400000, GETUTCDATE())) END,
       m.headers,
       CAST(N'' AS XML).value('xs:base64Binary(sql:column("m.body"))', 'varbinary(max)')
FROM OPENJSON(CAST(%(rows)s AS nvarchar(max)))
     WITH (n int '$.n', id uniqueidentifier '$.id', ttbr_ms bigint '$.ttbr_ms',
           headers nvarchar(max) '$.headers', body varchar(max) '$.body') AS m
ORDER BY m.n

-- send_many_no_recoverable --
-- send_many, for an old queue table without the Recoverable column.
INSERT INTO {queue} (Id, CorrelationId, ReplyToAddress, Expires, Headers, Body)
SELECT m.id,
       NULL,
       NULL,
       CASE WHEN m.ttbr_ms IS NULL THEN NULL
            ELSE DATEADD(ms, m.ttbr_ms - m.ttbr_ms / 86400000 * 86400000,
                        DATEADD(day, m.ttbr_ms / 86400000, GETUTCDATE())) END,
       m.headers,
       CAST(N'' AS XML).value('xs:base64Binary(sql:column("m.body"))', 'varbinary(max)')
FROM OPENJSON(CAST(%(rows)s AS nvarchar(max)))
     WITH (n int '$.n', id uniqueidentifier '$.id', ttbr_ms bigint '$.ttbr_ms',
           headers nvarchar(max) '$.headers', body varchar(max) '$.body') AS m
ORDER BY m.n

-- send_many_values --
-- send_many without OPENJSON (compatibility level below 130, Babelfish): {rows} is one send_many_row per message, at most 400 per statement (5 parameters each, under SQL Server's 2100); RowVersion follows n.
INSERT INTO {queue} (Id, CorrelationId, ReplyToAddress, Recoverable, Expires, Headers, Body)
SELECT m.id,
       NULL,
       NULL,
       1,
       CASE WHEN m.ttbr_ms IS NULL THEN NULL
            ELSE DATEADD(ms, m.ttbr_ms - m.ttbr_ms / 86400000 * 86400000,
                        DATEADD(day, m.ttbr_ms / 86400000, GETUTCDATE())) END,
       m.headers,
       m.body
FROM (VALUES
{rows}
) AS m (n, id, ttbr_ms, headers, body)
ORDER BY m.n

-- send_many_values_no_recoverable --
-- send_many_values, for an old queue table without the Recoverable column.
INSERT INTO {queue} (Id, CorrelationId, ReplyToAddress, Expires, Headers, Body)
SELECT m.id,
       NULL,
       NULL,
       CASE WHEN m.ttbr_ms IS NULL THEN NULL
            ELSE DATEADD(ms, m.ttbr_ms - m.ttbr_ms / 86400000 * 86400000,
                        DATEADD(day, m.ttbr_ms / 86400000, GETUTCDATE())) END,
       m.headers,
       m.body
FROM (VALUES
{rows}
) AS m (n, id, ttbr_ms, headers, body)
ORDER BY m.n

-- send_many_row --
-- One message of send_many_values (a fragment, never run alone): position, Id, TTBR in ms, headers, body.
(CAST(%(n)s AS int), CAST(%(id)s AS uniqueidentifier), CAST(%(ttbr_ms)s AS bigint), CAST(%(headers)s AS nvarchar(max)), CAST(%(body)s AS varbinary(max)))

-- insert_raw --
-- Copy a row unchanged (same Id, no Expires): error queue moves and retries.
INSERT INTO {queue} (Id, CorrelationId, ReplyToAddress, Recoverable, Expires, Headers, Body)
VALUES (%(id)s, NULL, NULL, 1, NULL, %(headers)s, CAST(%(body)s AS varbinary(max)))

-- insert_raw_no_recoverable --
-- insert_raw, for an old queue table without the Recoverable column.
INSERT INTO {queue} (Id, CorrelationId, ReplyToAddress, Expires, Headers, Body)
VALUES (%(id)s, NULL, NULL, NULL, %(headers)s, CAST(%(body)s AS varbinary(max)))

-- send_delayed --
-- Store a message in the delayed table, due after %(delay_ms)s milliseconds (database clock, UTC).
INSERT INTO {delayed} (Headers, Body, Due)
VALUES (
    %(headers)s,
    CAST(%(body)s AS varbinary(max)),
    DATEADD(ms, CAST(%(delay_ms)s AS bigint) - CAST(%(delay_ms)s AS bigint) / 86400000 * 86400000,
            DATEADD(day, CAST(%(delay_ms)s AS bigint) / 86400000, GETUTCDATE())))

-- receive_batch --
-- Delete up to %(batch_size)s of the oldest rows no other receiver holds, and return them (id, seq, expired, headers, body).
WITH message AS (
    SELECT TOP (%(batch_size)s) *
    FROM {queue} WITH (UPDLOCK, READPAST, ROWLOCK)
    ORDER BY RowVersion)
DELETE FROM message
OUTPUT deleted.Id,
       deleted.RowVersion,
       CASE WHEN deleted.Expires IS NULL THEN 0 WHEN deleted.Expires <= GETUTCDATE() THEN 1 ELSE 0 END,
       deleted.Headers,
       deleted.Body

-- receive_range --
-- Delete up to %(batch_size)s of the oldest rows with %(first_seq)s <= RowVersion <= %(last_seq)s that no other
-- receiver holds, and return them: one partition of a partitioned drain (the range keeps partitions disjoint).
WITH message AS (
    SELECT TOP (%(batch_size)s) *
    FROM {queue} WITH (UPDLOCK, READPAST, ROWLOCK)
    WHERE RowVersion BETWEEN %(first_seq)s AND %(last_seq)s
    ORDER BY RowVersion)
DELETE FROM message
OUTPUT deleted.Id,
       deleted.RowVersion,
       CASE WHEN deleted.Expires IS NULL THEN 0 WHEN deleted.Expires <= GETUTCDATE() THEN 1 ELSE 0 END,
       deleted.Headers,
       deleted.Body

-- seq_bounds --
-- Oldest and newest RowVersion, skipping rows held by receivers (two index seeks; NULLs when empty): what a
-- partitioned drain splits.
SELECT MIN(RowVersion), MAX(RowVersion)
FROM {queue} WITH (READPAST, READCOMMITTEDLOCK)

-- lock_batch --
-- Lock (without deleting) up to %(batch_size)s of the oldest rows no other receiver holds; locks last until commit.
SELECT TOP (%(batch_size)s)
       Id,
       RowVersion,
       CASE WHEN Expires IS NULL THEN 0 WHEN Expires <= GETUTCDATE() THEN 1 ELSE 0 END,
       Headers,
       Body
FROM {queue} WITH (UPDLOCK, READPAST, ROWLOCK)
ORDER BY RowVersion

-- lock_after --
-- Lock rows after a position, oldest first (walks a queue without taking rows others hold).
SELECT TOP (%(batch_size)s)
       Id,
       RowVersion,
       CASE WHEN Expires IS NULL THEN 0 WHEN Expires <= GETUTCDATE() THEN 1 ELSE 0 END,
       Headers,
       Body
FROM {queue} WITH (UPDLOCK, READPAST, ROWLOCK)
WHERE RowVersion > %(after_seq)s
ORDER BY RowVersion

-- browse --
-- Read rows after a position without deleting them (READPAST: rows in flight are skipped, not waited for).
SELECT TOP (%(batch_size)s)
       Id,
       RowVersion,
       CASE WHEN Expires IS NULL THEN 0 WHEN Expires <= GETUTCDATE() THEN 1 ELSE 0 END,
       Headers,
       Body
FROM {queue} WITH (READPAST)
WHERE RowVersion > %(after_seq)s
ORDER BY RowVersion

-- delete_by_seq --
-- Delete one locked row.
DELETE FROM {queue} WHERE RowVersion = %(seq)s

-- delete_by_id --
-- Delete a message by its native Id (the error-queue browser's delete action).
DELETE FROM {queue} WHERE Id = %(id)s

-- delete_by_seqs --
-- Delete the locked rows a batch finished with, in one statement (%(seqs)s is a JSON array of integers).
DELETE FROM {queue}
WHERE RowVersion IN (SELECT CAST([value] AS bigint) FROM OPENJSON(CAST(%(seqs)s AS nvarchar(max))))

-- delete_by_seq_list --
-- delete_by_seqs without OPENJSON (compatibility level below 130, Babelfish): {seqs} is one seq_item per row, at most 1000 per statement.
DELETE FROM {queue}
WHERE RowVersion IN ({seqs})

-- seq_item --
-- One position of delete_by_seq_list (a fragment, never run alone).
CAST(%(seq)s AS bigint)

-- peek --
-- Depth estimate: newest minus oldest RowVersion + 1, skipping rows held by receivers (two index seeks).
SELECT COALESCE(MAX(RowVersion) - MIN(RowVersion) + 1, 0)
FROM {queue} WITH (READPAST, READCOMMITTEDLOCK)

-- sent_position --
-- The last RowVersion the identity handed out (NULL before the first send; IDENT_CURRENT would give the seed
-- there, the same as after one send): how many messages were ever sent to the queue, whatever was received
-- since. Two readings a minute apart give the send rate.
SELECT CAST(last_value AS bigint) FROM sys.identity_columns WHERE object_id = OBJECT_ID(%(qualified_name)s)

-- purge_expired --
-- Delete up to %(batch_size)s expired rows by RowVersion (not by Expires, to avoid deadlocks with receivers); READPAST on both sides: rows a receiver holds are skipped, never waited for.
DELETE FROM {queue} WITH (READPAST)
WHERE RowVersion IN (SELECT TOP (%(batch_size)s) RowVersion
                     FROM {queue} WITH (READPAST)
                     WHERE Expires < GETUTCDATE())

-- move_due_delayed --
-- Move up to %(batch_size)s due delayed messages into the endpoint's input queue (new Id, Recoverable 1), oldest due first. The table variable lets the INSERT keep due order (OUTPUT ... INTO does not order).
DECLARE @moved TABLE (Headers nvarchar(max) NOT NULL, Body varbinary(max) NULL, Due datetime NOT NULL,
                      RowVersion bigint NOT NULL);
WITH due AS (
    SELECT TOP (%(batch_size)s) *
    FROM {delayed} WITH (UPDLOCK, READPAST, ROWLOCK)
    WHERE Due < GETUTCDATE()
    ORDER BY Due)
DELETE FROM due
OUTPUT deleted.Headers, deleted.Body, deleted.Due, deleted.RowVersion INTO @moved;
INSERT INTO {queue} (Id, CorrelationId, ReplyToAddress, Recoverable, Expires, Headers, Body)
SELECT NEWID(), NULL, NULL, 1, NULL, m.Headers, m.Body FROM @moved AS m ORDER BY m.Due, m.RowVersion

-- move_due_delayed_no_recoverable --
-- move_due_delayed, for an old input queue table without the Recoverable column.
DECLARE @moved TABLE (Headers nvarchar(max) NOT NULL, Body varbinary(max) NULL, Due datetime NOT NULL,
                      RowVersion bigint NOT NULL);
WITH due AS (
    SELECT TOP (%(batch_size)s) *
    FROM {delayed} WITH (UPDLOCK, READPAST, ROWLOCK)
    WHERE Due < GETUTCDATE()
    ORDER BY Due)
DELETE FROM due
OUTPUT deleted.Headers, deleted.Body, deleted.Due, deleted.RowVersion INTO @moved;
INSERT INTO {queue} (Id, CorrelationId, ReplyToAddress, Expires, Headers, Body)
SELECT NEWID(), NULL, NULL, NULL, m.Headers, m.Body FROM @moved AS m ORDER BY m.Due, m.RowVersion

-- savepoint --
-- Mark a point to undo one message's work.
SAVE TRANSACTION {savepoint}

-- rollback_to_savepoint --
-- Undo one message's work, keeping the rest of the transaction.
ROLLBACK TRANSACTION {savepoint}

-- release_savepoint --
-- SQL Server has no RELEASE SAVEPOINT: a savepoint lasts until the transaction ends. Never sent (the dialect skips it); kept so every dialect has the same statement names.
SELECT 1 WHERE 1 = 0

-- discover_queues --
-- Every table in the database with the queue shape (the 8 columns; Recoverable may be missing on old tables).
SELECT s.name, t.name
FROM sys.tables AS t
JOIN sys.schemas AS s ON s.schema_id = t.schema_id
JOIN sys.columns AS c ON c.object_id = t.object_id
WHERE t.is_ms_shipped = 0
GROUP BY s.name, t.name
HAVING COUNT(CASE WHEN c.name IN ('Id', 'CorrelationId', 'ReplyToAddress', 'Expires', 'Headers', 'Body',
                                  'RowVersion') THEN 1 END) = 7
ORDER BY s.name, t.name

-- list_columns --
-- Columns of a table: name, type name, max_length in bytes (-1 = max), nullable.
SELECT c.name, ty.name, c.max_length, c.is_nullable
FROM {sys}.columns AS c
JOIN {sys}.types AS ty ON ty.user_type_id = c.user_type_id
JOIN {sys}.tables AS t ON t.object_id = c.object_id
JOIN {sys}.schemas AS s ON s.schema_id = t.schema_id
WHERE s.name = %(schema_name)s AND t.name = %(table_name)s
ORDER BY c.column_id

-- list_indexes --
-- Indexes of a table: name, first key column (matched by column, not by name), CLUSTERED/NONCLUSTERED, filtered.
SELECT i.name, c.name, i.type_desc, i.has_filter
FROM {sys}.indexes AS i
JOIN {sys}.tables AS t ON t.object_id = i.object_id
JOIN {sys}.schemas AS s ON s.schema_id = t.schema_id
LEFT JOIN {sys}.index_columns AS ic
  ON ic.object_id = i.object_id AND ic.index_id = i.index_id AND ic.key_ordinal = 1
LEFT JOIN {sys}.columns AS c ON c.object_id = ic.object_id AND c.column_id = ic.column_id
WHERE s.name = %(schema_name)s AND t.name = %(table_name)s AND i.type > 0
ORDER BY i.name

-- catalog_view_exists --
-- 1 when the catalog view %(view_name)s ([catalog].sys.<view> of the queue's database) exists, else 0: an engine without one (Babelfish has no sys.allocation_units) gets a "not checked" finding instead of an error.
SELECT CASE WHEN OBJECT_ID(%(view_name)s) IS NULL THEN 0 ELSE 1 END

-- heap_bloat --
-- Rows and in-row data pages of a heap (catalog views: no VIEW DATABASE STATE needed); no row when the table is not a heap.
SELECT SUM(p.rows), SUM(au.used_pages)
FROM {sys}.partitions AS p
JOIN {sys}.allocation_units AS au ON au.container_id = p.partition_id AND au.type = 1
JOIN {sys}.tables AS t ON t.object_id = p.object_id
JOIN {sys}.schemas AS s ON s.schema_id = t.schema_id
WHERE s.name = %(schema_name)s AND t.name = %(table_name)s AND p.index_id = 0
GROUP BY p.object_id

-- table_bloat --
-- Rows and pages reserved by a table with all its indexes and LOB data (size report).
SELECT SUM(CASE WHEN p.index_id IN (0, 1) AND au.type = 1 THEN p.rows ELSE 0 END), SUM(au.total_pages)
FROM {sys}.partitions AS p
JOIN {sys}.allocation_units AS au ON au.container_id = p.partition_id
JOIN {sys}.tables AS t ON t.object_id = p.object_id
JOIN {sys}.schemas AS s ON s.schema_id = t.schema_id
WHERE s.name = %(schema_name)s AND t.name = %(table_name)s
GROUP BY p.object_id

-- rebuild_heap --
-- Rewrite the heap and its indexes, returning the empty pages receives leave behind (takes a schema lock while it runs).
ALTER TABLE {queue} REBUILD

-- vacuum_table --
-- Compact the indexes of a queue and clean up ghost rows left by receives (online, light; rebuild_heap reclaims heap pages).
ALTER INDEX ALL ON {queue} REORGANIZE

-- migrate_rowversion_index --
-- Turn a CLUSTERED Index_RowVersion (tables made before 2020) into the NONCLUSTERED one; one batch, one transaction.
DROP INDEX {seq_index} ON {queue};
CREATE NONCLUSTERED INDEX {seq_index} ON {queue} (RowVersion)

-- create_subscription_table --
-- The subscription table shared by every endpoint (native publish/subscribe, NServiceBus.Transport.SqlServer's shape; {table} is its name). Run only after table_exists said no; a concurrent creator's 2714 counts as created.
CREATE TABLE {table} (
    QueueAddress nvarchar(200) NOT NULL,
    Endpoint nvarchar(200) NOT NULL,
    Topic nvarchar(200) NOT NULL,
    PRIMARY KEY (Endpoint, Topic)
)

-- subscribe --
-- Subscribe an endpoint's queue to a topic: a MERGE under an exclusive table lock (as upstream), updating the queue address of an existing (Endpoint, Topic).
MERGE {table} WITH (HOLDLOCK, TABLOCKX) AS target
USING (SELECT %(queue_address)s AS QueueAddress, %(topic)s AS Topic, %(endpoint)s AS Endpoint) AS source
ON target.Endpoint = source.Endpoint AND target.Topic = source.Topic
WHEN MATCHED AND target.QueueAddress <> source.QueueAddress THEN
    UPDATE SET QueueAddress = source.QueueAddress
WHEN NOT MATCHED THEN
    INSERT (QueueAddress, Topic, Endpoint) VALUES (source.QueueAddress, source.Topic, source.Endpoint);

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
-- The inbox (deduplication) table: one row per (Consumer, MessageId) a consumer finished, written in the same transaction as the consumer's own work (as NServiceBus's outbox records handled messages). Run only after table_exists said no; a concurrent creator's 2714 counts as created.
CREATE TABLE {table} (
    Consumer nvarchar(200) NOT NULL,
    MessageId nvarchar(200) NOT NULL,
    ProcessedAt datetime2 NOT NULL DEFAULT SYSUTCDATETIME(),
    PRIMARY KEY (Consumer, MessageId)
)

-- create_inbox_index --
-- Index used by the inbox's retention purge (run right after the table was created).
CREATE NONCLUSTERED INDEX {inbox_index} ON {table} (ProcessedAt)

-- inbox_mark --
-- Record one message as handled by a consumer; inserts nothing (rowcount 0) when a committed transaction already did. The key-range lock makes a concurrent insert of the same key wait for this transaction's outcome.
INSERT INTO {table} (Consumer, MessageId)
SELECT %(consumer)s, %(message_id)s
WHERE NOT EXISTS (SELECT 1 FROM {table} WITH (UPDLOCK, HOLDLOCK) WHERE Consumer = %(consumer)s AND MessageId = %(message_id)s)

-- inbox_handled --
-- Whether a consumer already handled one message (1 or 0).
SELECT COUNT(*) FROM {table} WHERE Consumer = %(consumer)s AND MessageId = %(message_id)s

-- purge_inbox --
-- Delete up to %(batch_size)s inbox rows older than %(older_than_s)s seconds (database clock).
DELETE TOP (%(batch_size)s) FROM {table} WHERE ProcessedAt < DATEADD(second, -%(older_than_s)s, SYSUTCDATETIME())

-- count_rows --
-- Exact number of rows (the error queue's depth on the page: the peek estimate counts gaps left by retries).
SELECT COUNT_BIG(*) FROM {queue} WITH (READPAST)

-- failed_page --
-- One page of an error queue after a position (and up to %(through_seq)s), for the browser. Headers and body are cut to a preview here
-- (never sent whole); grouping fields are read only from valid JSON (ISJSON) of at most one Mi characters, so no
-- row can make the statement fail or run long. Filters: NULL matches any row; %(search)s is text the headers contain;
-- <field>_missing = 1 matches only rows without that field (absent or empty).
-- The search is also looked for as header JSON stores it: %(search_wire)s (as NServiceBus writes it, '/' as '\/'),
-- %(search_json)s and %(search_ascii)s (JSON escapes, raw and ASCII-only non-ASCII); in the Id (as text, the collation's case); and in the body's bytes (%(search_body)s and %(search_body_wire)s: the search's UTF-8 bytes, plain and as NServiceBus writes JSON).
-- FailedQ: any of %(failed_q)s and failed_q_2 to failed_q_8 (spellings of one queue; NULL where unused).
SELECT TOP (%(batch_size)s) f.Id, f.RowVersion, f.failed_q, f.exception_type, f.message_type, f.time_of_failure,
       LEFT(f.exception_message, 2000), LEFT(f.stack_trace, 8000), f.headers_preview, f.headers_length,
       f.body_preview, f.body_length
FROM (
    SELECT Id, RowVersion, Headers, Body,
           CASE WHEN LEN(Headers) <= 1048576 AND ISJSON(Headers) = 1 THEN JSON_VALUE(Headers, '$."NServiceBus.FailedQ"') END AS failed_q,
           CASE WHEN LEN(Headers) <= 1048576 AND ISJSON(Headers) = 1 THEN JSON_VALUE(Headers, '$."NServiceBus.ExceptionInfo.ExceptionType"') END
               AS exception_type,
           CASE WHEN LEN(Headers) <= 1048576 AND ISJSON(Headers) = 1 THEN LEFT(JSON_VALUE(Headers, '$."NServiceBus.EnclosedMessageTypes"'), 300)
           END AS message_type,
           CASE WHEN LEN(Headers) <= 1048576 AND ISJSON(Headers) = 1 THEN JSON_VALUE(Headers, '$."NServiceBus.TimeOfFailure"') END
               AS time_of_failure,
           CASE WHEN LEN(Headers) <= 1048576 AND ISJSON(Headers) = 1 THEN JSON_VALUE(Headers, '$."NServiceBus.ExceptionInfo.Message"') END
               AS exception_message,
           CASE WHEN LEN(Headers) <= 1048576 AND ISJSON(Headers) = 1 THEN JSON_VALUE(Headers, '$."NServiceBus.ExceptionInfo.StackTrace"') END
               AS stack_trace,
           LEFT(Headers, %(headers_chars)s) AS headers_preview, LEN(Headers) AS headers_length,
           SUBSTRING(Body, 1, %(body_bytes)s) AS body_preview, DATALENGTH(Body) AS body_length
    FROM {queue} WITH (READPAST)
    WHERE RowVersion > %(after_seq)s AND RowVersion <= %(through_seq)s
) AS f
WHERE (%(failed_q)s IS NULL OR f.failed_q IN (%(failed_q)s, %(failed_q_2)s, %(failed_q_3)s, %(failed_q_4)s,
       %(failed_q_5)s, %(failed_q_6)s, %(failed_q_7)s, %(failed_q_8)s))
  AND (%(exception_type)s IS NULL OR f.exception_type = %(exception_type)s)
  AND (%(message_type)s IS NULL OR f.message_type = %(message_type)s)
  AND (%(search)s IS NULL OR CHARINDEX(%(search)s, f.Headers) > 0 OR CHARINDEX(%(search_wire)s, f.Headers) > 0
       OR CHARINDEX(%(search_json)s, f.Headers) > 0 OR CHARINDEX(%(search_ascii)s, f.Headers) > 0
       OR CHARINDEX(%(search)s, CONVERT(nvarchar(36), f.Id)) > 0
       OR CHARINDEX(CAST(%(search_body)s AS varbinary(max)), f.Body) > 0
       OR CHARINDEX(CAST(%(search_body_wire)s AS varbinary(max)), f.Body) > 0)
  AND (%(failed_q_missing)s = 0 OR f.failed_q IS NULL OR f.failed_q = '')
  AND (%(exception_type_missing)s = 0 OR f.exception_type IS NULL OR f.exception_type = '')
  AND (%(message_type_missing)s = 0 OR f.message_type IS NULL OR f.message_type = '')
ORDER BY f.RowVersion

-- failed_groups --
-- Only rows after %(after_seq)s up to %(through_seq)s (a range of positions: the page keeps groups per range).
-- Failed messages counted by the queue they failed in, exception type and message type, with the first and
-- last failure (valid JSON only, as failed_page); largest groups first.
SELECT TOP (%(batch_size)s) f.failed_q, f.exception_type, f.message_type, COUNT_BIG(*), MIN(f.time_of_failure),
       MAX(f.time_of_failure)
FROM (
    SELECT CASE WHEN LEN(Headers) <= 1048576 AND ISJSON(Headers) = 1 THEN JSON_VALUE(Headers, '$."NServiceBus.FailedQ"') END AS failed_q,
           CASE WHEN LEN(Headers) <= 1048576 AND ISJSON(Headers) = 1 THEN JSON_VALUE(Headers, '$."NServiceBus.ExceptionInfo.ExceptionType"') END
               AS exception_type,
           CASE WHEN LEN(Headers) <= 1048576 AND ISJSON(Headers) = 1 THEN LEFT(JSON_VALUE(Headers, '$."NServiceBus.EnclosedMessageTypes"'), 300)
           END AS message_type,
           CASE WHEN LEN(Headers) <= 1048576 AND ISJSON(Headers) = 1 THEN JSON_VALUE(Headers, '$."NServiceBus.TimeOfFailure"') END
               AS time_of_failure
    FROM {queue} WITH (READPAST)
    WHERE RowVersion > %(after_seq)s AND RowVersion <= %(through_seq)s
) AS f
GROUP BY f.failed_q, f.exception_type, f.message_type
ORDER BY COUNT_BIG(*) DESC, f.failed_q, f.exception_type, f.message_type

-- lock_position --
-- Lock one row addressed by position and Id (an index seek on RowVersion; the Id guards against a reused one).
SELECT Id, RowVersion, 0, Headers, Body
FROM {queue} WITH (UPDLOCK, ROWLOCK)
WHERE RowVersion = %(seq)s AND Id = TRY_CAST(%(id)s AS uniqueidentifier)

-- delete_position --
-- Delete one row addressed by position and Id (an index seek on RowVersion).
DELETE FROM {queue} WHERE RowVersion = %(seq)s AND Id = TRY_CAST(%(id)s AS uniqueidentifier)

-- head_time_sent --
-- TimeSent of the oldest row no receiver holds (valid JSON only): the age of the queue without reading the whole
-- headers of a row that may be huge or not JSON.
SELECT TOP (1) CASE WHEN LEN(Headers) <= 1048576 AND ISJSON(Headers) = 1 THEN JSON_VALUE(Headers, '$."NServiceBus.TimeSent"') END
FROM {queue} WITH (READPAST) ORDER BY RowVersion

-- connection_limit --
-- Connections the server allows at once (the 'user connections' setting; 32,767 when it is 0, the default).
SELECT @@MAX_CONNECTIONS

-- archive_rows --
-- Whole rows after position %(after_seq)s up to %(through_seq)s, oldest first, for the error archive (rows other
-- sessions hold locked are skipped and stay for the next run). Expires as ISO 8601 text.
SELECT CONVERT(varchar(36), Id), CorrelationId, ReplyToAddress, Recoverable, CONVERT(varchar(30), Expires, 126),
       'text', Headers, CASE WHEN Body IS NULL THEN 'null' ELSE 'blob' END, Body, RowVersion
FROM {queue} WITH (READPAST)
WHERE RowVersion > %(after_seq)s AND RowVersion <= %(through_seq)s
ORDER BY RowVersion

-- restore_row --
-- Put an archived row back with every column it had (same Id; a NULL body is written as empty bytes). The table
-- has no key on Id: the archive's manifest (and id_present for a batch a crash left unsure) keeps it once.
INSERT INTO {queue} (Id, CorrelationId, ReplyToAddress, Recoverable, Expires, Headers, Body)
VALUES (CAST(%(id)s AS uniqueidentifier), %(correlation_id)s, %(reply_to_address)s,
        COALESCE(CAST(%(recoverable)s AS bit), 1), CAST(%(expires)s AS datetime), %(headers)s,
        COALESCE(CAST(%(body)s AS varbinary(max)), CAST('' AS varbinary(max))))

-- id_present --
-- 1 when the table holds a row with this Id (a scan: the table has no index on Id; used only for a batch a crash
-- left unsure).
SELECT COUNT(*) FROM {queue} WHERE Id = TRY_CAST(%(id)s AS uniqueidentifier)

-- create_redirect_table --
-- Retry redirects (an airflow-sqlqueue extra, beside the error queue): the messages that failed in SourceQueue go back to TargetQueue when retried, by every retry path. Names are canonical queue names; one redirect per source. Run only after table_exists said no; a concurrent creator's 2714 counts as created.
CREATE TABLE {table} (
    SourceQueue nvarchar(450) NOT NULL PRIMARY KEY,
    TargetQueue nvarchar(450) NOT NULL,
    CreatedBy nvarchar(200) NULL,
    CreatedAt datetime2 NOT NULL DEFAULT SYSUTCDATETIME()
)

-- list_redirects --
-- Every retry redirect, by source queue.
SELECT SourceQueue, TargetQueue, CreatedBy, CONVERT(nvarchar(40), CreatedAt, 127) + 'Z' FROM {table} ORDER BY SourceQueue

-- insert_redirect --
-- Add one retry redirect; inserts nothing (rowcount 0) when that source already has one (the key-range lock makes a concurrent insert of the same source wait).
INSERT INTO {table} (SourceQueue, TargetQueue, CreatedBy)
SELECT %(source_queue)s, %(target_queue)s, %(created_by)s
WHERE NOT EXISTS (SELECT 1 FROM {table} WITH (UPDLOCK, HOLDLOCK) WHERE SourceQueue = %(source_queue)s)

-- delete_redirect --
-- Remove the retry redirect of one source queue.
DELETE FROM {table} WHERE SourceQueue = %(source_queue)s

-- position_of_id --
-- The position of the row with this Id, if any (a scan: the table has no index on Id; one message page, not a loop).
SELECT TOP (1) RowVersion FROM {queue} WHERE Id = TRY_CAST(%(id)s AS uniqueidentifier)

-- estimate_rows --
-- The rows of a table as its partitions count them (sys.partitions, heap or clustered index; no scan): what the error queue's depth shows above a threshold, instead of counting a million rows.
SELECT SUM(p.rows) FROM sys.partitions AS p WHERE p.object_id = OBJECT_ID(%(qualified_name)s) AND p.index_id IN (0, 1)

-- scan_end --
-- The position %(batch_size)s rows after %(after_seq)s (NULL when fewer rows follow): a filtered page reads at most the rows up to it, so a rare group or a search costs the same on any queue size.
SELECT RowVersion FROM {queue} WITH (READPAST) WHERE RowVersion > %(after_seq)s ORDER BY RowVersion OFFSET %(batch_size)s - 1 ROWS FETCH NEXT 1 ROWS ONLY

-- range_counts --
-- Rows per range of %(batch_size)s positions (the RowVersion index, no row read): which ranges changed since their groups were counted (rows are only ever taken out of a range: a new row gets a new, higher position).
SELECT RowVersion / %(batch_size)s, COUNT_BIG(*) FROM {queue} WITH (READPAST) GROUP BY RowVersion / %(batch_size)s

-- count_and_last --
-- Rows and the newest position: unchanged both, no row came or went (a new row gets a higher position).
SELECT COUNT_BIG(*), MAX(RowVersion) FROM {queue} WITH (READPAST)

-- create_error_groups_table --
-- Error groups summary (an airflow-sqlqueue extra beside the error queue, like SqlQueueRetryRedirects): the group counts of each error queue, so the page reads a few rows instead of every failed message. SqlQueueErrorGroups holds one row per (error queue, FailedQ, exception type, message type) with its count and first and last failure; SqlQueueErrorGroupsState one row per error queue with the highest RowVersion counted (HighWater). Rows above HighWater are counted by a catch-up; a retry, delete or archive by this provider takes its rows out in its own transaction. A rebuild clears and counts again.
-- Group counts of the error queues of this schema (no key: rows are added only under the state row's lock). Run only after table_exists said no; a concurrent creator's 2714 counts as created.
CREATE TABLE {groups} (
    ErrorQueue nvarchar(450) NOT NULL,
    FailedQ nvarchar(4000) NULL,
    ExceptionType nvarchar(4000) NULL,
    MessageType nvarchar(4000) NULL,
    MessageCount bigint NOT NULL,
    FirstSeq bigint NULL,
    LastSeq bigint NULL,
    FirstFailure nvarchar(4000) NULL,
    LastFailure nvarchar(4000) NULL
)

-- create_error_groups_index --
-- The group rows of one error queue (made with the table).
CREATE INDEX {groups_index} ON {groups} (ErrorQueue)

-- create_error_groups_state_table --
-- One row per error queue: the highest RowVersion counted into its groups, when they were last rebuilt and caught up, and when the groups were last compared with an exact count of the queue (the drift check) and what it found. Run only after table_exists said no.
CREATE TABLE {state} (
    ErrorQueue nvarchar(450) NOT NULL PRIMARY KEY,
    HighWater bigint NOT NULL,
    RebuiltAt datetime2 NOT NULL DEFAULT SYSUTCDATETIME(),
    CaughtUpAt datetime2 NULL,
    CheckedAt datetime2 NULL,
    Drift bigint NULL
)

-- error_groups_state_insert --
-- The state row of an error queue (nothing counted yet); nothing when it exists (the key-range lock makes a concurrent insert wait).
INSERT INTO {state} (ErrorQueue, HighWater)
SELECT %(error_queue)s, 0
WHERE NOT EXISTS (SELECT 1 FROM {state} WITH (UPDLOCK, HOLDLOCK) WHERE ErrorQueue = %(error_queue)s)

-- error_groups_state_lock --
-- The high water, locked for a catch-up or rebuild (retries and deletes of counted rows wait, and it waits for them).
SELECT HighWater FROM {state} WITH (UPDLOCK, ROWLOCK, HOLDLOCK) WHERE ErrorQueue = %(error_queue)s

-- error_groups_state_share --
-- The high water, held shared by a retry or delete until it commits (a catch-up waits for it; they never wait for each other).
SELECT HighWater FROM {state} WITH (REPEATABLEREAD, ROWLOCK) WHERE ErrorQueue = %(error_queue)s

-- error_groups_state_read --
-- The high water, when the groups were last rebuilt and caught up, when they were last compared with an exact count, the drift that count found and its age in seconds (no lock).
SELECT HighWater, CONVERT(nvarchar(19), RebuiltAt, 126) + 'Z', CONVERT(nvarchar(19), CaughtUpAt, 126) + 'Z',
       CONVERT(nvarchar(19), CheckedAt, 126) + 'Z', Drift,
       CAST(DATEDIFF(second, CheckedAt, SYSUTCDATETIME()) AS float)
FROM {state} WHERE ErrorQueue = %(error_queue)s

-- error_groups_state_set --
-- Everything up to %(high_water)s is counted.
UPDATE {state} SET HighWater = %(high_water)s, CaughtUpAt = SYSUTCDATETIME() WHERE ErrorQueue = %(error_queue)s

-- error_groups_state_rebuilt --
-- A rebuild starts: nothing counted (so nothing counted wrongly: no drift as of now).
UPDATE {state} SET HighWater = 0, RebuiltAt = SYSUTCDATETIME(), CaughtUpAt = NULL, CheckedAt = SYSUTCDATETIME(), Drift = 0
WHERE ErrorQueue = %(error_queue)s

-- error_groups_checked --
-- The groups were just compared with an exact count of the queue: the rows they miss (%(drift)s, 0: they agree).
UPDATE {state} SET CheckedAt = SYSUTCDATETIME(), Drift = %(drift)s WHERE ErrorQueue = %(error_queue)s

-- error_groups_check --
-- The drift check, one statement: the queue's rows (a count of every row: never on a page's path), the rows its groups count, and the rows above the high water (READPAST as count_and_last).
SELECT (SELECT COUNT_BIG(*) FROM {queue} WITH (READPAST)),
       (SELECT COALESCE(SUM(MessageCount), 0) FROM {groups} WHERE ErrorQueue = %(error_queue)s AND MessageCount > 0),
       (SELECT COUNT_BIG(*) FROM {queue} WITH (READPAST)
        WHERE RowVersion > (SELECT HighWater FROM {state} WHERE ErrorQueue = %(error_queue)s))

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
WHERE ErrorQueue = %(error_queue)s
  AND (FailedQ = %(failed_q)s OR (FailedQ IS NULL AND %(failed_q)s IS NULL))
  AND (ExceptionType = %(exception_type)s OR (ExceptionType IS NULL AND %(exception_type)s IS NULL))
  AND (MessageType = %(message_type)s OR (MessageType IS NULL AND %(message_type)s IS NULL))

-- error_groups_insert --
-- A new group of one error queue.
INSERT INTO {groups} (ErrorQueue, FailedQ, ExceptionType, MessageType, MessageCount, FirstFailure, LastFailure,
                      FirstSeq, LastSeq)
VALUES (%(error_queue)s, %(failed_q)s, %(exception_type)s, %(message_type)s, %(message_count)s, %(first_failure)s, %(last_failure)s, %(first_seq)s, %(last_seq)s)

-- error_groups_forget --
-- One counted message left the error queue: its group counts one less.
UPDATE {groups} SET MessageCount = MessageCount - 1
WHERE ErrorQueue = %(error_queue)s
  AND (FailedQ = %(failed_q)s OR (FailedQ IS NULL AND %(failed_q)s IS NULL))
  AND (ExceptionType = %(exception_type)s OR (ExceptionType IS NULL AND %(exception_type)s IS NULL))
  AND (MessageType = %(message_type)s OR (MessageType IS NULL AND %(message_type)s IS NULL))
  AND MessageCount > 0

-- error_groups_range --
-- The groups of the rows after %(after_seq)s up to %(through_seq)s (what a catch-up or rebuild counts), the fields read exactly as failed_groups reads them. No READPAST: a row another session is still inserting is waited for, not skipped past.
SELECT f.failed_q, f.exception_type, f.message_type, COUNT_BIG(*), MIN(f.time_of_failure), MAX(f.time_of_failure),
       MIN(f.seq), MAX(f.seq)
FROM (
    SELECT RowVersion AS seq, CASE WHEN LEN(Headers) <= 1048576 AND ISJSON(Headers) = 1 THEN JSON_VALUE(Headers, '$."NServiceBus.FailedQ"') END AS failed_q,
           CASE WHEN LEN(Headers) <= 1048576 AND ISJSON(Headers) = 1 THEN JSON_VALUE(Headers, '$."NServiceBus.ExceptionInfo.ExceptionType"') END
               AS exception_type,
           CASE WHEN LEN(Headers) <= 1048576 AND ISJSON(Headers) = 1 THEN LEFT(JSON_VALUE(Headers, '$."NServiceBus.EnclosedMessageTypes"'), 300)
           END AS message_type,
           CASE WHEN LEN(Headers) <= 1048576 AND ISJSON(Headers) = 1 THEN JSON_VALUE(Headers, '$."NServiceBus.TimeOfFailure"') END
               AS time_of_failure
    FROM {queue}
    WHERE RowVersion > %(after_seq)s AND RowVersion <= %(through_seq)s
) AS f
GROUP BY f.failed_q, f.exception_type, f.message_type

-- error_group_of --
-- The group of one row addressed by position and Id (fields as error_groups_range reads them), the row locked: the retry or delete about to take it out says which group counts one less.
SELECT CASE WHEN LEN(Headers) <= 1048576 AND ISJSON(Headers) = 1 THEN JSON_VALUE(Headers, '$."NServiceBus.FailedQ"') END,
       CASE WHEN LEN(Headers) <= 1048576 AND ISJSON(Headers) = 1 THEN JSON_VALUE(Headers, '$."NServiceBus.ExceptionInfo.ExceptionType"') END,
       CASE WHEN LEN(Headers) <= 1048576 AND ISJSON(Headers) = 1 THEN LEFT(JSON_VALUE(Headers, '$."NServiceBus.EnclosedMessageTypes"'), 300) END
FROM {queue} WITH (UPDLOCK, ROWLOCK)
WHERE RowVersion = %(seq)s AND Id = TRY_CAST(%(id)s AS uniqueidentifier)

-- count_above --
-- Rows above a RowVersion (an index walk of the positions not counted into the error groups yet).
SELECT COUNT_BIG(*) FROM {queue} WHERE RowVersion > %(after_seq)s
