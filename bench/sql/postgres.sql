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

-- hand_receive --
-- The hand pipeline's receive: the provider's receive_batch, with the Id as text (no UUID object per row).
DELETE FROM {queue}
WHERE seq = ANY(ARRAY(SELECT seq FROM {queue} ORDER BY seq LIMIT %(batch_size)s FOR UPDATE SKIP LOCKED))
RETURNING id::text, seq, (expires IS NOT NULL AND expires <= (statement_timestamp() AT TIME ZONE 'UTC')) AS expired, headers, body
