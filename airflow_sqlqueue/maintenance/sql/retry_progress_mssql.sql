-- Progress and audit of batched retries (SQL Server; recorded_at is UTC), beside the health samples: one row
-- when a run starts, one per batch (returned per queue, left with reasons), one per cancel request, one when it
-- ends. {progress} is the table, {run_index} and {conn_index} its indexes (quoted by the dialect);
-- %(progress_name)s is the table's name as text, for OBJECT_ID.

-- create_retry_progress --
-- The progress table (idempotent).
IF OBJECT_ID(%(progress_name)s, 'U') IS NULL
    CREATE TABLE {progress} (
        run_id nvarchar(250) NOT NULL,
        conn_id nvarchar(250) NOT NULL,
        error_queue nvarchar(450) NOT NULL,
        kind nvarchar(20) NOT NULL,
        batch int NOT NULL,
        recorded_at datetime2 NOT NULL,
        user_name nvarchar(250) NULL,
        looked_at bigint NOT NULL,
        returned_total bigint NOT NULL,
        returned nvarchar(max) NOT NULL,
        left_count bigint NOT NULL,
        left_detail nvarchar(max) NOT NULL,
        detail nvarchar(max) NOT NULL
    )

-- create_retry_progress_run_index --
-- Serves "every row of run R" (progress, cancel requests).
IF NOT EXISTS (SELECT 1 FROM sys.indexes WHERE object_id = OBJECT_ID(%(progress_name)s) AND name = %(run_index_name)s)
    CREATE NONCLUSTERED INDEX {run_index} ON {progress} (run_id, kind)

-- create_retry_progress_conn_index --
-- Serves "the recent runs on connection C".
IF NOT EXISTS (SELECT 1 FROM sys.indexes WHERE object_id = OBJECT_ID(%(progress_name)s) AND name = %(conn_index_name)s)
    CREATE NONCLUSTERED INDEX {conn_index} ON {progress} (conn_id, kind, recorded_at)

-- insert_retry_progress --
-- One row: a run started, a batch done, a cancel asked for, a run ended.
INSERT INTO {progress} (run_id, conn_id, error_queue, kind, batch, recorded_at, user_name, looked_at,
                        returned_total, returned, left_count, left_detail, detail)
VALUES (%(run_id)s, %(conn_id)s, %(error_queue)s, %(kind)s, %(batch)s, %(recorded_at)s, %(user_name)s,
        %(looked_at)s, %(returned_total)s, %(returned)s, %(left_count)s, %(left_detail)s, %(detail)s)

-- retry_progress_of_run --
-- Every row of one run, in the order they were written.
SELECT kind, batch, recorded_at, user_name, looked_at, returned_total, returned, left_count, left_detail, detail
FROM {progress}
WHERE run_id = %(run_id)s
ORDER BY recorded_at, batch

-- retry_cancel_requested --
-- How many cancel requests run %(run_id)s has (the task asks before each batch).
SELECT count(*) FROM {progress} WHERE run_id = %(run_id)s AND kind = 'cancel'

-- recent_retry_runs --
-- The runs started on connection %(conn_id)s, newest first, at most %(n)s.
SELECT TOP (%(n)s) run_id FROM {progress}
WHERE conn_id = %(conn_id)s AND kind = 'start'
ORDER BY recorded_at DESC

-- create_retry_messages --
-- The messages each batch of a batched retry returned, one row each (a message's page lists its batched retries).
IF OBJECT_ID(%(messages_name)s, 'U') IS NULL
    CREATE TABLE {messages} (
        run_id nvarchar(250) NOT NULL,
        conn_id nvarchar(250) NOT NULL,
        error_queue nvarchar(450) NOT NULL,
        batch int NOT NULL,
        message_id nvarchar(100) NOT NULL,
        recorded_at datetime2 NOT NULL,
        user_name nvarchar(250) NULL
    )

-- create_retry_messages_index --
-- Serves "the batched retries of message M on connection C".
IF NOT EXISTS (SELECT 1 FROM sys.indexes WHERE object_id = OBJECT_ID(%(messages_name)s) AND name = %(messages_index_name)s)
    CREATE NONCLUSTERED INDEX {messages_index} ON {messages} (message_id, conn_id)

-- insert_retry_messages --
-- Every message one batch returned, in one statement (%(message_ids)s: a JSON array of native Ids; OPENJSON needs compatibility level 130).
INSERT INTO {messages} (run_id, conn_id, error_queue, batch, message_id, recorded_at, user_name)
SELECT %(run_id)s, %(conn_id)s, %(error_queue)s, %(batch)s, LOWER(m.message_id), %(recorded_at)s, %(user_name)s
FROM OPENJSON(%(message_ids)s) WITH (message_id nvarchar(100) '$') AS m

-- retry_messages_of --
-- The batched retries that returned message %(message_id)s (lower-case native Id) on connection %(conn_id)s.
SELECT TOP (100) run_id, batch, recorded_at, user_name FROM {messages}
WHERE message_id = %(message_id)s AND conn_id = %(conn_id)s
ORDER BY recorded_at
