"""DAG params shared by the maintenance DAGs in ``airflow_sqlqueue/example_dags/``."""

from __future__ import annotations

from typing import Any

from airflow.sdk import Param


def target_params() -> dict[str, Param]:
    """``config``, ``connections`` and ``queues``: the params every maintenance DAG takes to pick its queues."""
    return {
        "config": Param(None, type=["null", "object"], title="Configuration override",
                        description="A maintenance configuration for this run (the format of the Variable "
                                    "sqlqueue_maintenance), limited to the connections the deployment "
                                    "configures; alert_callback and health_samples_conn_id always come from the "
                                    "deployment. Empty: the Variable, then the file named by "
                                    "$SQLQUEUE_MAINTENANCE_CONFIG, then discovery on sqlqueue_default."),
        "connections": Param(None, type=["null", "array"], items={"type": "string"}, title="Connections",
                             description="Only these Airflow connection ids (empty: every configured one)."),
        "queues": Param(None, type=["null", "array"], items={"type": "string"}, title="Queues",
                        description="Only these queues on each connection (empty: the configured ones, or every "
                                    "queue discovered)."),
    }


def label(target: dict[str, Any]) -> str:
    """A mapped task instance's label in the UI (used through ``map_index_template``)."""
    from airflow.sdk import get_current_context

    text = f"{target['conn_id']}: {target.get('queue') or target.get('error_queue')}"
    get_current_context()["sqlqueue_target"] = text  # type: ignore[typeddict-unknown-key]
    return text
