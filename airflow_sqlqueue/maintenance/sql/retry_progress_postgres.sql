-- Progress and audit of batched retries (PostgreSQL), beside the health samples: one row when a run starts,
-- one per batch (returned per queue, left with reasons), one per cancel request, one when it ends.
-- {progress} is the table, {run_index} and {conn_index} its indexes (quoted by the dialect).

-- create_retry_progress --
-- The progress table (idempotent).
CREATE TABLE IF NOT EXISTS {progress} (
    run_id text NOT NULL,
    conn_id text NOT NULL,
    error_queue text NOT NULL,
    kind text NOT NULL,
    batch integer NOT NULL,
    recorded_at timestamptz NOT NULL,
    user_name text NULL,
    looked_at bigint NOT NULL,
    returned_total bigint NOT NULL,
    returned text NOT NULL,
    left_count bigint NOT NULL,
    left_detail text NOT NULL,
    detail text NOT NULL
)

-- create_retry_progress_run_index --
-- Serves "every row of run R" (progress, cancel requests).
CREATE INDEX IF NOT EXISTS {run_index} ON {progress} (run_id, kind)

-- create_retry_progress_conn_index --
-- Serves "the recent runs on connection C".
CREATE INDEX IF NOT EXISTS {conn_index} ON {progress} (conn_id, kind, recorded_at)

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
SELECT run_id FROM {progress}
WHERE conn_id = %(conn_id)s AND kind = 'start'
ORDER BY recorded_at DESC
LIMIT %(n)s

-- create_retry_messages --
-- The messages each batch of a batched retry returned, one row each (a message's page lists its batched retries).
CREATE TABLE IF NOT EXISTS {messages} (
    run_id text NOT NULL,
    conn_id text NOT NULL,
    error_queue text NOT NULL,
    batch integer NOT NULL,
    message_id text NOT NULL,
    recorded_at timestamptz NOT NULL,
    user_name text NULL
)

-- create_retry_messages_index --
-- Serves "the batched retries of message M on connection C".
CREATE INDEX IF NOT EXISTS {messages_index} ON {messages} (message_id, conn_id)

-- insert_retry_messages --
-- Every message one batch returned, in one statement (%(message_ids)s: a JSON array of native Ids).
INSERT INTO {messages} (run_id, conn_id, error_queue, batch, message_id, recorded_at, user_name)
SELECT %(run_id)s, %(conn_id)s, %(error_queue)s, %(batch)s, lower(m), %(recorded_at)s, %(user_name)s
FROM jsonb_array_elements_text(%(message_ids)s::jsonb) AS m

-- retry_messages_of --
-- The batched retries that returned message %(message_id)s (lower-case native Id) on connection %(conn_id)s.
SELECT run_id, batch, recorded_at, user_name FROM {messages}
WHERE message_id = %(message_id)s AND conn_id = %(conn_id)s
ORDER BY recorded_at
LIMIT 100
