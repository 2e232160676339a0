-- What the raw-SQL baselines on SQLite need besides the provider's own statements: the backlog fill, the
-- key list of the purge baseline, dropping a queue, VACUUM. The baselines run the provider's statements
-- (send, receive_batch, lock_batch, delete_by_seqs, peek) as they stand in
-- airflow_sqlqueue/transport/dialects/sql/sqlite.sql: the same text, run by hand with the driver, no provider code.
-- %(name)s is a parameter, {queue} the quoted table.

-- expired_keys --
-- Keys of the expired rows (collected before the purge baseline, not timed).
SELECT seq FROM {queue} WHERE expires < strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now') ORDER BY seq

-- fill --
-- A backlog of %(count)s rows in one statement; expires %(expires_s)s seconds from now (NULL: never).
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < %(count)s)
INSERT INTO {queue} (id, expires, headers, body)
SELECT lower(hex(randomblob(16))),
       strftime('%%Y-%%m-%%d %%H:%%M:%%f', julianday('now') + %(expires_s)s / 86400.0),
       %(headers)s, %(body)s
FROM n

-- drop_queue --
-- Remove a bench queue table.
DROP TABLE IF EXISTS {queue}

-- vacuum --
-- Nothing to reclaim between repeats on SQLite (freed pages are reused).
SELECT 1
