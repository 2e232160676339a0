-- What the raw-SQL baselines on PostgreSQL need besides the provider's own statements: the backlog fill, the
-- key list of the purge baseline, dropping a queue, VACUUM. The baselines run the provider's statements
-- (send, receive_batch, lock_batch, delete_by_seqs, peek, send_many) as they stand in
-- airflow_sqlqueue/transport/dialects/sql/postgres.sql: the same text, run by hand with the driver, no provider code.
-- %(name)s is a parameter, {queue} the quoted table.

-- expired_keys --
-- Keys of the expired rows (collected before the purge baseline, not timed).
SELECT seq FROM {queue} WHERE expires < (statement_timestamp() AT TIME ZONE 'UTC') ORDER BY seq

-- fill --
-- A backlog of %(count)s rows in one statement; expires %(expires_s)s seconds from now (NULL: never).
INSERT INTO {queue} (id, expires, headers, body)
SELECT gen_random_uuid(),
       (statement_timestamp() AT TIME ZONE 'UTC') + %(expires_s)s::float8 * INTERVAL '1 second',
       %(headers)s, %(body)s
FROM generate_series(1, %(count)s::integer)

-- drop_queue --
-- Remove a bench queue table.
DROP TABLE IF EXISTS {queue}

-- vacuum --
-- Reclaim the dead rows of earlier repeats so that each repeat starts alike (outside a transaction).
VACUUM (ANALYZE) {queue}
