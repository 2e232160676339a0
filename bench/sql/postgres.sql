-- The hand loops' own SQL on PostgreSQL: what a programmer who owns the table writes with psycopg, and the bench's
-- setup statements. None of it is the provider's: the provider's statements are in
-- airflow_sqlqueue/transport/dialects/sql/postgres.sql and no baseline runs them.
-- %(name)s is a parameter, {queue} the quoted table.

-- send --
-- One message, in autocommit: one statement, one round trip. No TTBR given, so no Expires.
INSERT INTO {queue} (id, headers, body) VALUES (%(id)s, %(headers)s, %(body)s)

-- send_many --
-- A batch in one statement (autocommit), the arrays bound in binary (psycopg's %b: bodies as bytes, not hex).
INSERT INTO {queue} (id, headers, body)
SELECT * FROM unnest(%(ids)b::uuid[], %(headers)b::text[], %(bodies)b::bytea[])

-- receive --
-- Take up to %(batch_size)s of the oldest rows no other receiver holds, in autocommit (one round trip); each row
-- says whether it expired (the loop drops those).
DELETE FROM {queue}
WHERE seq = ANY(ARRAY(SELECT seq FROM {queue} ORDER BY seq LIMIT %(batch_size)s FOR UPDATE SKIP LOCKED))
RETURNING id, seq, expires <= (now() AT TIME ZONE 'UTC') AS expired, headers, body

-- delete --
-- Delete rows by key (%(seqs)s: an array literal, '{1,2,3}').
DELETE FROM {queue} WHERE seq = ANY(%(seqs)s::bigint[])

-- peek --
-- Depth: newest minus oldest key + 1 (both ends of the seq index).
SELECT COALESCE(max(seq) - min(seq) + 1, 0) FROM {queue}

-- count --
-- Rows in the table (the paired run checks that every message was sent, or taken; not timed).
SELECT count(*) FROM {queue}

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
