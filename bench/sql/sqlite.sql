-- The hand loops' own SQL on SQLite: what a programmer who owns the table writes with sqlite3, and the bench's
-- setup statements. None of it is the provider's: the provider's statements are in
-- airflow_sqlqueue/transport/dialects/sql/sqlite.sql and no baseline runs them.
-- %(name)s is a parameter, {queue} the quoted table.

-- send --
-- One message, in autocommit (one statement, its own transaction). No TTBR given, so no Expires.
INSERT INTO {queue} (id, headers, body) VALUES (%(id)s, %(headers)s, %(body)s)

-- receive --
-- Take up to %(batch_size)s of the oldest rows (one statement: autocommit, or inside the caller's BEGIN
-- IMMEDIATE); each row says whether it expired (Expires as the provider and NServiceBus write it: text that
-- sorts as time; the loop drops those).
DELETE FROM {queue}
WHERE seq IN (SELECT seq FROM {queue} ORDER BY seq LIMIT %(batch_size)s)
RETURNING id, seq, expires <= strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now') AS expired, headers, body

-- receive_one --
-- One message: the oldest row by its key as a scalar (min of the rowid), no list of keys; expired as above.
DELETE FROM {queue}
WHERE seq = (SELECT min(seq) FROM {queue})
RETURNING id, seq, expires <= strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now') AS expired, headers, body

-- delete --
-- Delete rows by key (%(seqs)s: a JSON array of integers).
DELETE FROM {queue} WHERE seq IN (SELECT value FROM json_each(%(seqs)s))

-- peek --
-- Depth: newest minus oldest key + 1 (each end its own subquery: both ends of the rowid).
SELECT COALESCE((SELECT max(seq) FROM {queue}) - (SELECT min(seq) FROM {queue}) + 1, 0)

-- count --
-- Rows in the table (the paired run checks that every message was sent, or taken; not timed).
SELECT count(*) FROM {queue}

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
