"""Sensors of the SQL queue provider."""

from airflow_sqlqueue.extras import needs_airflow  # noqa: F401  (Airflow installed, at its floor, or the fix)
