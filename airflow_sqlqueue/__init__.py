"""airflow-sqlqueue: SQL queue tables (the NServiceBus SQL transport design) as an Apache Airflow provider."""

__version__ = "0.2.0"
