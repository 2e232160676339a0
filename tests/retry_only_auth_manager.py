"""An auth manager for the browser test of the page's buttons (tests/test_dashboard_actions_browser.py): Airflow's
Simple auth manager, except that the user ``retrier`` (role op) may not ``DELETE`` on connections. The Simple roles
give retry and delete together (both op's); this user has the one without the other, as a FAB or Keycloak role
can (docs/dashboard.md, "Who may do what")."""

from __future__ import annotations

from typing import Any

from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager

RETRY_ONLY_USER = "retrier"


class RetryOnlyAuthManager(SimpleAuthManager):
    """The Simple auth manager; ``retrier`` may retry (``PUT`` on connections) but not delete."""

    def is_authorized_connection(self, *, method: Any, user: Any, details: Any = None) -> bool:
        if user.get_name() == RETRY_ONLY_USER and method == "DELETE":
            return False
        return super().is_authorized_connection(method=method, user=user, details=details)
