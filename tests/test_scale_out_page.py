"""docs/scale-out.md agrees with the deployment that checks it (tests/deployment/test_scale_out_guide.py): every
setting of its table is set by the harness to the value the page's "checked with" column shows, the settings a
Celery deployment needs are all on the page, and the page's code blocks make a DAG file that compiles."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.deployment import guide

#: Settings the harness sets that a user does not need from this page (test plumbing, or Airflow's defaults).
HARNESS_ONLY = {
    "AIRFLOW__CORE__DAGS_FOLDER", "AIRFLOW__CORE__LOAD_EXAMPLES", "AIRFLOW__CORE__PARALLELISM",
    "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS", "AIRFLOW__API__HOST", "AIRFLOW__API__PORT",
    "AIRFLOW__API__WORKERS", "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL",
    "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL", "AIRFLOW__DAG_PROCESSOR__PARSING_PROCESSES",
    "AIRFLOW__LOGGING__LOGGING_LEVEL",
    # free ports, so that several test deployments on one machine do not collide (Airflow's defaults serve a user)
    "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT", "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT",
}


@pytest.mark.parametrize("broker", ["redis", "rabbitmq"])
def test_settings_table_is_what_the_deployment_sets(tmp_path: Path, broker: str) -> None:
    table = guide.settings_table(guide.page_text())
    env = guide.normalized_env(guide.deployment(tmp_path, broker, "postgresql://postgres@metadata-db.example:5432/airflow"))
    for name, (_, checked) in table.items():
        assert name in env, f"the page lists {name}, which the test deployment does not set"
        assert env[name] in guide.checked_values(checked), f"{name}: the deployment sets {env[name]!r}, the " \
                                                           f"page says {checked!r}"
    missing = set(env) - set(table) - HARNESS_ONLY
    assert not missing, f"the test deployment sets {sorted(missing)}, which docs/scale-out.md does not list"


def test_page_blocks_make_a_dag_file(tmp_path: Path) -> None:
    source = guide.dag_source(guide.page_text(), str(tmp_path / "lake"))
    compile(source, "scale_out_guide.py", "exec")
    for dag_id in (guide.DRAIN_DAG, guide.HANDLE_DAG, guide.PARTITION_DAG):
        assert f'"{dag_id}"' in source
    assert ".expand(max_concurrency=[2] * 4)" in source and 'mode="transaction-scope"' in source
    assert "s3://" not in source and "context.cursor.execute" in source
