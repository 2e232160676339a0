-- The raw-SQL baselines on PostgreSQL: the statements the provider runs, written out by hand (plus the fill
-- and key-delete statements the bench needs). Run with psycopg 3, no provider code. %(name)s is a parameter,
-- {queue} the quoted, schema-qualified table.

-- send --
-- One message (same text as the provider's send).
INSERT INTO {queue} (id, expires, headers, body)
VALUES (
    %(id)s::uuid,
    CASE WHEN %(ttbr_ms)s::bigint IS NULL THEN NULL
         ELSE (statement_timestamp() AT TIME ZONE 'UTC') + %(ttbr_ms)s::bigint * INTERVAL '1 millisecond' END,
    %(headers)s,
    %(body)s)

-- send_many --
-- A batch in one statement and one round trip, in list order; arrays bound in binary (the fastest plain SQL
-- we found: COPY ... FORMAT BINARY was no faster for batches of 100 and 1,000).
INSERT INTO {queue} (id, expires, headers, body)
SELECT m.id,
       CASE WHEN m.ttbr_ms IS NULL THEN NULL
            ELSE (statement_timestamp() AT TIME ZONE 'UTC') + m.ttbr_ms * INTERVAL '1 millisecond' END,
       m.headers,
       m.body
FROM unnest(%(ids)b::uuid[], %(ttbr_ms)b::bigint[], %(headers)b::text[], %(bodies)b::bytea[])
     WITH ORDINALITY AS m(id, ttbr_ms, headers, body, ord)
ORDER BY m.ord

-- receive_batch --
-- Delete up to %(batch_size)s of the oldest unlocked rows and return them.
DELETE FROM {queue}
WHERE seq = ANY(ARRAY(SELECT seq FROM {queue} ORDER BY seq LIMIT %(batch_size)s FOR UPDATE SKIP LOCKED))
RETURNING id, seq, (expires IS NOT NULL AND expires <= (statement_timestamp() AT TIME ZONE 'UTC')) AS expired, headers, body

-- lock_batch --
-- Lock up to %(batch_size)s of the oldest unlocked rows (the handler path deletes them at the end).
SELECT id, seq, (expires IS NOT NULL AND expires <= (statement_timestamp() AT TIME ZONE 'UTC')) AS expired, headers, body
FROM {queue} ORDER BY seq LIMIT %(batch_size)s FOR UPDATE SKIP LOCKED

-- delete_by_seqs --
-- Delete rows by key (the handler path's batch delete, and the purge baseline).
DELETE FROM {queue} WHERE seq = ANY(%(seqs)s::integer[])

-- peek --
-- Depth estimate from both ends of the seq index.
SELECT COALESCE(
    (SELECT seq FROM {queue} ORDER BY seq DESC LIMIT 1 FOR UPDATE SKIP LOCKED)
  - (SELECT seq FROM {queue} ORDER BY seq LIMIT 1 FOR UPDATE SKIP LOCKED) + 1, 0)

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
