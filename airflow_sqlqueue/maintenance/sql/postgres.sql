-- Health samples (optional; written only when the maintenance configuration sets record_health_samples).

-- create_health_samples --
-- The samples table: one row per queue per health run.
CREATE TABLE IF NOT EXISTS {samples} (
    sampled_at timestamptz NOT NULL,
    queue_name text NOT NULL,
    depth bigint NOT NULL,
    oldest_age_seconds double precision NULL
)

-- insert_health_sample --
-- One sample.
INSERT INTO {samples} (sampled_at, queue_name, depth, oldest_age_seconds)
VALUES (%(sampled_at)s, %(queue_name)s, %(depth)s, %(oldest_age_seconds)s)
