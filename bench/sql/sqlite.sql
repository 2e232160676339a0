-- The raw-SQL baselines on SQLite: the statements the provider runs, written out by hand (plus the fill and
-- key-delete statements the bench needs). Run with sqlite3, no provider code. %(name)s is a parameter,
-- {queue} the quoted table.

-- send --
-- One message (same text as the provider's send).
INSERT INTO {queue} (id, expires, headers, body)
VALUES (
    %(id)s,
    CASE WHEN %(ttbr_ms)s IS NULL THEN NULL
         ELSE strftime('%%Y-%%m-%%d %%H:%%M:%%f', julianday('now') + %(ttbr_ms)s / 86400000.0) END,
    %(headers)s,
    %(body)s)

-- receive_batch --
-- Delete up to %(batch_size)s of the oldest rows and return them.
DELETE FROM {queue}
WHERE seq IN (SELECT seq FROM {queue} ORDER BY seq LIMIT %(batch_size)s)
RETURNING id, seq, (expires IS NOT NULL AND expires < strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now')) AS expired,
          headers, body

-- lock_batch --
-- Read up to %(batch_size)s of the oldest rows under the write lock of BEGIN IMMEDIATE.
SELECT id, seq, (expires IS NOT NULL AND expires < strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now')) AS expired,
       headers, body
FROM {queue} ORDER BY seq LIMIT %(batch_size)s

-- delete_by_seqs --
-- Delete rows by key (%(seqs)s is a JSON array of integers).
DELETE FROM {queue} WHERE seq IN (SELECT value FROM json_each(%(seqs)s))

-- peek --
-- Depth estimate from both ends of the rowid.
SELECT COALESCE((SELECT max(seq) FROM {queue}) - (SELECT min(seq) FROM {queue}) + 1, 0)

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
