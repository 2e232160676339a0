"""Provider registration: read by Airflow through the ``apache_airflow_provider`` entry point.

No new connection type: the provider runs on the existing ``mssql``, ``odbc``, ``postgres`` and ``sqlite``
connections, so ``connection-types`` is left out on purpose.
"""

from __future__ import annotations

from typing import Any

from airflow_sqlqueue import __version__

INTEGRATION = "SQL Queue"


def get_provider_info() -> dict[str, Any]:
    """The provider dictionary (validated by Airflow against ``provider_info.schema.json``)."""
    return {
        "package-name": "airflow-provider-sqlqueue",
        "name": "SQL Queue",
        "description": "SQL queue tables (the NServiceBus SQL Server and PostgreSQL transport design) as a "
                       "first-class Airflow provider: sensor, triggers, asset watchers, drain and maintenance "
                       "operators, on existing mssql, odbc, postgres and sqlite connections.",
        "versions": [__version__],
        "integrations": [
            {
                "integration-name": INTEGRATION,
                "tags": ["software"],
            }
        ],
        "hooks": [{"integration-name": INTEGRATION, "python-modules": ["airflow_sqlqueue.hooks.sqlqueue"]}],
        "operators": [{"integration-name": INTEGRATION,
                       "python-modules": ["airflow_sqlqueue.operators.drain", "airflow_sqlqueue.operators.partition",
                                          "airflow_sqlqueue.operators.send",
                                          "airflow_sqlqueue.operators.publish",
                                          "airflow_sqlqueue.operators.maintenance",
                                          "airflow_sqlqueue.operators.retry",
                                          "airflow_sqlqueue.operators.archive"]}],
        "sensors": [{"integration-name": INTEGRATION, "python-modules": ["airflow_sqlqueue.sensors.sqlqueue"]}],
        "triggers": [{"integration-name": INTEGRATION, "python-modules": ["airflow_sqlqueue.triggers.sqlqueue"]}],
        "queues": ["airflow_sqlqueue.queues.sqlqueue.SqlQueueMessageQueueProvider"],
        "config": {
            "sqlqueue": {
                "description": "Options of the SQL Queue provider (read by the API server for the Queues page).",
                "options": {
                    "dashboard_edit_retry": {
                        "description": "Show the Queues page's Edit and retry action (change a failed message's "
                                       "headers or body, then send the edited copy to its queue). Off by default. "
                                       "When on, only users who may edit the SQL Queues view and the "
                                       "connection (PUT) use it, and each edit is written to Airflow's audit "
                                       "log. Set it on the API server.",
                        "version_added": "0.1.0",
                        "type": "boolean",
                        "example": "True",
                        "default": "False",
                    },
                },
            },
        },
    }
