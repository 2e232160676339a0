-- The DDL of airflow-sqlqueue 0.1 (git 87b7bab .. 7f74bfe: airflow_sqlqueue/transport/sql/sqlite.sql), kept as it was to
-- build tables of the old shape in the migration tests. {old_due_index} stands for the 0.1 name of the due index
-- (<endpoint>_due_ix), which the current dialect calls legacy_due.

-- create_queue_table --
-- The queue table; seq is the rowid (never reused thanks to AUTOINCREMENT), so FIFO order is an index.
CREATE TABLE IF NOT EXISTS {queue} (
    id TEXT NOT NULL,
    expires TEXT NULL,
    headers TEXT NOT NULL,
    body BLOB NULL,
    seq INTEGER PRIMARY KEY AUTOINCREMENT
);

-- create_queue_expires_index --
-- Partial index used by purge of expired messages.
CREATE INDEX IF NOT EXISTS {expires_index} ON {queue} (expires) WHERE expires IS NOT NULL;

-- create_delayed_table --
-- The delayed-delivery store of an endpoint ("<endpoint>.Delayed").
CREATE TABLE IF NOT EXISTS {delayed} (
    headers TEXT NOT NULL,
    body BLOB NULL,
    due TEXT NOT NULL,
    seq INTEGER PRIMARY KEY AUTOINCREMENT
);

-- create_delayed_due_index --
-- Index used by the delayed-message mover.
CREATE INDEX IF NOT EXISTS {old_due_index} ON {delayed} (due);

