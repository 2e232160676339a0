"""The provider's DAG files: maintenance, provisioning, the error queue's retries, and examples.

Add this folder to a DAG bundle (see docs/maintenance.md, "Installing"); its path is
``python -c "import airflow_sqlqueue.example_dags as d; print(d.__path__[0])"``.
"""
