"""The operators under the module path of the first releases (DAGs written for them keep working).

New code imports from ``airflow_sqlqueue.operators`` (or the module of each job: ``drain``, ``send``,
``maintenance``, ``publish``). This module re-exports the package's names and the drain constants it held.
"""

from __future__ import annotations

from . import *  # noqa: F403 - every public name of the package, as the first releases had them here
from . import __all__ as _package_names
from .drain import DEFAULT_BATCH_SIZE, DEFAULT_MAX_MESSAGES, DRAIN_SUMMARY_KEY, SPOOL_KEY
from .maintenance import SqlQueueCheckFailedError

__all__ = [*_package_names, "DEFAULT_BATCH_SIZE", "DEFAULT_MAX_MESSAGES", "DRAIN_SUMMARY_KEY", "SPOOL_KEY",
           "SqlQueueCheckFailedError"]
