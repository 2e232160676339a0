"""Data behind the "SQL Queues" page of the Airflow UI: queue overview, depth history, the error-queue browser.

Runs inside the Airflow API server (server-side reads of Variables and connections); the web layer is
``airflow_sqlqueue.plugins``. Nothing here returns a connection field other than its id.
"""
