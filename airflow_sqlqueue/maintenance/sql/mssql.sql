-- Health samples (optional; written only when the maintenance configuration sets record_health_samples).

-- create_health_samples --
-- The samples table: one row per queue per health run.
IF OBJECT_ID(%(samples_name)s, 'U') IS NULL
    CREATE TABLE {samples} (
        sampled_at datetime2 NOT NULL,
        queue_name nvarchar(400) NOT NULL,
        depth bigint NOT NULL,
        oldest_age_seconds float NULL
    )

-- insert_health_sample --
-- One sample.
INSERT INTO {samples} (sampled_at, queue_name, depth, oldest_age_seconds)
VALUES (%(sampled_at)s, %(queue_name)s, %(depth)s, %(oldest_age_seconds)s)
