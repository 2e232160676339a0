"""Airflow plugins shipped with the provider (registered by the ``airflow.plugins`` entry point)."""
