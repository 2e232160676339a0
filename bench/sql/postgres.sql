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

-- fill_typed --
-- %(count)s NServiceBus-shaped messages for the Spark pipeline: one of the %(types)s (text[]) in turn, its
-- endpoint from %(endpoints)s (text[], same order), a MessageId and ConversationId each, TimeSent now, and a
-- JSON body of about 200 bytes.
INSERT INTO {queue} (id, headers, body)
SELECT gen_random_uuid(),
       json_build_object(
           'NServiceBus.MessageId', gen_random_uuid()::text,
           'NServiceBus.MessageIntent', 'Publish',
           'NServiceBus.ConversationId', gen_random_uuid()::text,
           'NServiceBus.CorrelationId', gen_random_uuid()::text,
           'NServiceBus.OriginatingEndpoint', (%(endpoints)s::text[])[1 + g %% cardinality(%(endpoints)s::text[])],
           'NServiceBus.ContentType', 'application/json',
           'NServiceBus.EnclosedMessageTypes', (%(types)s::text[])[1 + g %% cardinality(%(types)s::text[])]
               || ', Messages, Version=1.0.0.0, Culture=neutral, PublicKeyToken=null',
           'NServiceBus.TimeSent', to_char(statement_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS:US') || ' Z'
       )::text,
       convert_to(json_build_object('OrderId', md5(g::text), 'CustomerId', 'customer-' || (g %% 9973),
                                    'Lines', json_build_array(json_build_object('Sku', 'SKU-' || (g %% 500), 'Qty', 1 + g %% 7),
                                                              json_build_object('Sku', 'SKU-' || (g %% 311), 'Qty', 2)),
                                    'Total', (g %% 100000) / 100.0, 'Currency', 'EUR')::text, 'UTF8')
FROM generate_series(1, %(count)s::integer) AS g

-- copy_typed --
-- The rows of the template queue {template} (filled once by fill_typed) into {queue}, in their order: a fresh queue
-- of the same messages for each contestant, without generating the JSON again (not timed).
INSERT INTO {queue} (id, headers, body)
SELECT id, headers, body FROM {template} ORDER BY seq

-- copy_typed_fresh --
-- The first %(count)s rows of the template queue {template} (filled once by fill_typed) into {queue}, in their
-- order, each with a new Id and a new NServiceBus.MessageId (the first header fill_typed writes: 36 characters
-- from the 29th), so that copies of one template are distinct messages to the Spark summary (not timed).
INSERT INTO {queue} (id, headers, body)
SELECT gen_random_uuid(), overlay(headers PLACING gen_random_uuid()::text FROM 29 FOR 36), body
FROM {template}
WHERE left(headers, 28) = '{"NServiceBus.MessageId" : "'
ORDER BY seq
LIMIT %(count)s

-- hand_receive --
-- The hand pipeline's receive: the provider's receive_batch, with the Id as text (no UUID object per row).
DELETE FROM {queue}
WHERE seq = ANY(ARRAY(SELECT seq FROM {queue} ORDER BY seq LIMIT %(batch_size)s FOR UPDATE SKIP LOCKED))
RETURNING id::text, seq, (expires IS NOT NULL AND expires <= (statement_timestamp() AT TIME ZONE 'UTC')) AS expired, headers, body
