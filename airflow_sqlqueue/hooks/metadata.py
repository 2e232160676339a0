"""An Airflow connection read without Airflow: from an ``AIRFLOW_CONN_<ID>`` variable or straight from the
metadata database's ``connection`` table (this module imports nothing of Airflow).

Two users: the command line's ``--conn-id`` (importing Airflow costs seconds of start-up, over a minute on a
loaded machine; this costs a query), and the event trigger in the triggerer, where Airflow's own lookup of a
connection stored in the metadata database goes through the triggerer's supervisor, whose first lookup starts
its in-process API client and stalls every trigger for tens of seconds ("event loop appears deadlocked").

Anything this module does not understand for certain (a secrets backend, a metadata database other than
PostgreSQL or SQLite, a ``*_cmd``/``*_secret`` setting, an ``odbc`` connection, connection extras) returns
``None``, and the caller asks Airflow itself.
"""

from __future__ import annotations

import configparser
import json
import os
import sqlite3
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from airflow_sqlqueue.transport.dialects.connect import url_from_fields
from airflow_sqlqueue.transport.dialects.sqlfile import parse_statements

_STATEMENTS = parse_statements(resources.files(__package__).joinpath("sql", "airflow_metadata.sql")
                               .read_text(encoding="utf-8"))
_URI_TYPES = {"postgresql": "postgres", "postgres": "postgres", "sqlite": "sqlite", "mssql": "mssql"}


def connection_fields(conn_id: str) -> dict[str, Any] | None:
    """The fields of Airflow connection ``conn_id`` (``conn_type``, ``host``, ``port``, ``login``, ``password``,
    ``schema``, ``extra`` as a dict), or None when only Airflow can resolve it. Blocking: call it in a thread
    from async code."""
    fields = _from_variable(conn_id)
    if fields is None:
        fields = _from_metadata(conn_id)
    if fields is None:
        return None
    extra = fields.get("extra")
    if isinstance(extra, str):
        extra = json.loads(extra) if extra.strip() else {}
    return {**fields, "extra": extra or {}}


def queue_url(conn_id: str) -> str | None:
    """A ``sqlqueue`` URL for Airflow connection ``conn_id``, or None when only Airflow can resolve it."""
    fields = connection_fields(conn_id)
    return None if fields is None else _url(fields)


def _from_variable(conn_id: str) -> dict[str, Any] | None:
    value = os.environ.get("AIRFLOW_CONN_" + conn_id.upper())
    if not value:
        return None
    value = value.strip()
    if value.startswith("{"):
        return json.loads(value)
    parts = urlsplit(value)
    return {"conn_type": _URI_TYPES.get(parts.scheme.lower(), parts.scheme), "host": unquote(parts.hostname or ""),
            "login": unquote(parts.username or ""), "password": unquote(parts.password or ""),
            "port": parts.port, "schema": unquote(parts.path.lstrip("/")), "extra": dict(parse_qsl(parts.query))}


def _setting(section: str, key: str, default: str | None = None) -> str | None:
    """An Airflow setting from its variable or ``airflow.cfg``; None if set through ``_cmd``/``_secret``."""
    name = f"AIRFLOW__{section.upper()}__{key.upper()}"
    if os.environ.get(name + "_CMD") or os.environ.get(name + "_SECRET"):
        raise LookupError(name)
    if name in os.environ:
        return os.environ[name]
    cfg = Path(os.environ.get("AIRFLOW_HOME") or Path.home() / "airflow") / "airflow.cfg"
    if cfg.is_file():
        parser = configparser.ConfigParser(interpolation=None)
        parser.read(cfg)
        if parser.has_option(section, key + "_cmd") or parser.has_option(section, key + "_secret"):
            raise LookupError(name)
        if parser.has_option(section, key):
            return parser.get(section, key)
    return default


def _from_metadata(conn_id: str) -> dict[str, Any] | None:
    try:
        if _setting("secrets", "backend"):
            return None  # a secrets backend is searched before the database: Airflow's own lookup
        home = os.environ.get("AIRFLOW_HOME") or str(Path.home() / "airflow")
        url = _setting("database", "sql_alchemy_conn", f"sqlite:///{home}/airflow.db") or ""
        fernet_key = _setting("core", "fernet_key", "") or ""
    except LookupError:
        return None
    scheme = url.split("://", 1)[0].lower()
    sql = _STATEMENTS["connection_by_id"].text
    if scheme.startswith("postgresql"):
        import psycopg

        with psycopg.connect("postgresql://" + url.split("://", 1)[1], connect_timeout=10) as conn:
            row = conn.execute(sql, {"conn_id": conn_id}).fetchone()
    elif scheme == "sqlite":
        path = url[len("sqlite:///"):].split("?", 1)[0]
        if not Path(path).is_file():
            return None
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
            row = conn.execute(sql.replace("%(conn_id)s", "?"), (conn_id,)).fetchone()
    else:
        return None
    if row is None:
        return None
    conn_type, host, schema, login, password, port, extra, encrypted, extra_encrypted = row
    if (encrypted and password) or (extra_encrypted and extra):
        if not fernet_key:
            return None
        from cryptography.fernet import Fernet, MultiFernet

        fernet = MultiFernet([Fernet(k.strip().encode()) for k in fernet_key.split(",") if k.strip()])
        password = fernet.decrypt(password.encode()).decode() if encrypted and password else password
        extra = fernet.decrypt(extra.encode()).decode() if extra_encrypted and extra else extra
    return {"conn_type": conn_type, "host": host, "schema": schema, "login": login, "password": password,
            "port": port, "extra": extra}


def _url(fields: dict[str, Any]) -> str | None:
    return url_from_fields(fields.get("conn_type"), fields.get("host"), fields.get("port"), fields.get("login"),
                           fields.get("password"), fields.get("schema"), fields.get("extra") or {})
