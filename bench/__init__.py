"""Benchmarks of airflow-sqlqueue beside the raw-SQL floor and a peer (pgqueuer), in one run: python -m bench."""
