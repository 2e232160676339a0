-- The DDL of airflow-sqlqueue 0.1 (git 87b7bab .. 7f74bfe: airflow_sqlqueue/transport/sql/postgres.sql), kept as it was to
-- build tables of the old shape in the migration tests. {old_due_index} stands for the 0.1 name of the due index
-- (<endpoint>_due_ix), which the current dialect calls legacy_due.

-- create_queue_table --
-- The queue table: the exact shape NServiceBus.Transport.PostgreSql creates.
CREATE TABLE IF NOT EXISTS {queue} (
    id uuid NOT NULL,
    expires timestamp NULL,
    headers text NOT NULL,
    body bytea NULL,
    seq serial NOT NULL
);

-- create_queue_seq_index --
-- FIFO order index used by receive and peek.
CREATE INDEX IF NOT EXISTS {seq_index} ON {queue} (seq);

-- create_queue_expires_index --
-- Partial index used by purge of expired messages.
CREATE INDEX IF NOT EXISTS {expires_index} ON {queue} (expires) WHERE expires IS NOT NULL;

-- create_delayed_table --
-- The delayed-delivery store of an endpoint ("<endpoint>.Delayed").
CREATE TABLE IF NOT EXISTS {delayed} (
    headers text NOT NULL,
    body bytea NULL,
    due timestamp NOT NULL,
    seq serial NOT NULL
);

-- create_delayed_due_index --
-- Index used by the delayed-message mover.
CREATE INDEX IF NOT EXISTS {old_due_index} ON {delayed} (due);

