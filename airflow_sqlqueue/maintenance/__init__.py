"""Shared code of the maintenance DAGs in ``example_dags/``: configuration, queue health, and the task bodies.

The DAG files stay thin: each task calls one function here. See ``docs/maintenance.md``.
"""

from .config import CONFIG_ENV, VARIABLE, MaintenanceConfig, Target, load_config

__all__ = ["CONFIG_ENV", "VARIABLE", "MaintenanceConfig", "Target", "load_config"]
