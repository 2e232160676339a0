"""``hooks.metadata``: Airflow connections read without Airflow (variables, the metadata database's table)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from cryptography.fernet import Fernet

from airflow_sqlqueue.hooks.metadata import connection_fields, queue_url


@pytest.fixture
def metadata(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> sqlite3.Connection:
    """A metadata database (SQLite) holding Airflow's connection table, configured through the environment."""
    for name in ("AIRFLOW__SECRETS__BACKEND", "AIRFLOW__CORE__FERNET_KEY"):
        monkeypatch.delenv(name, raising=False)
    path = tmp_path / "airflow.db"
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path))
    monkeypatch.setenv("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", f"sqlite:///{path}")
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("CREATE TABLE connection (conn_id TEXT, conn_type TEXT, host TEXT, schema TEXT, login TEXT, "
               "password TEXT, port INTEGER, extra TEXT, is_encrypted BOOLEAN, is_extra_encrypted BOOLEAN)")
    return db


def add(db: sqlite3.Connection, conn_id: str, password: str, extra: str | None = None, *,
        key: bytes | None = None) -> None:
    stored = Fernet(key).encrypt(password.encode()).decode() if key else password
    db.execute("INSERT INTO connection VALUES (?, 'postgres', 'db.example', 'sales', 'app', ?, 5432, ?, ?, 0)",
               (conn_id, stored, extra, key is not None))


def test_a_connection_made_with_airflow_connections_add_is_found(metadata: sqlite3.Connection) -> None:
    add(metadata, "sqlqueue_default", "p@ss/word")
    assert queue_url("sqlqueue_default") == "postgresql://app:p%40ss%2Fword@db.example:5432/sales"
    assert connection_fields("nowhere") is None


def test_encrypted_passwords_are_decrypted_with_the_fernet_key(metadata: sqlite3.Connection,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    key = Fernet.generate_key()
    add(metadata, "secret_db", "s3cret", key=key)
    assert connection_fields("secret_db") is None  # no key to decrypt it: Airflow's own lookup decides
    monkeypatch.setenv("AIRFLOW__CORE__FERNET_KEY", key.decode())
    assert connection_fields("secret_db")["password"] == "s3cret"


def test_libpq_options_are_kept_and_others_left_to_airflow(metadata: sqlite3.Connection) -> None:
    add(metadata, "tls_db", "pw", json.dumps({"sslmode": "require"}))
    add(metadata, "iam_db", "pw", json.dumps({"iam": True}))
    assert queue_url("tls_db").endswith("/sales?sslmode=require")
    assert queue_url("iam_db") is None


def test_a_variable_wins_and_a_secrets_backend_is_left_to_airflow(metadata: sqlite3.Connection,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    add(metadata, "sqlqueue_default", "from-db")
    monkeypatch.setenv("AIRFLOW_CONN_SQLQUEUE_DEFAULT", json.dumps({"conn_type": "sqlite", "host": "/tmp/q.db"}))
    assert queue_url("sqlqueue_default") == "sqlite:////tmp/q.db"
    monkeypatch.delenv("AIRFLOW_CONN_SQLQUEUE_DEFAULT")
    monkeypatch.setenv("AIRFLOW__SECRETS__BACKEND", "some.vault.Backend")
    assert connection_fields("sqlqueue_default") is None
