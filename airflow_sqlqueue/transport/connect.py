"""Connection URLs to DB-API connection factories (for the CLI, scripts and tests; Airflow uses hooks)."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from .errors import DatabaseConnectionError, SqlQueueError, UnsupportedConnectionError

SCHEMES = ("sqlite:///path.db", "postgresql://user:pass@host:5432/db", "mssql+pymssql://user:pass@host:1433/db",
           "mssql+pyodbc://user:pass@host:1433/db?driver=FreeTDS")


_QUERY_PASSWORD = re.compile(r"(?i)([?&;](?:password|pwd)=)[^&;#]*")
#: A URL starts with its scheme; a '://' further on may be inside a pasted password.
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")


def _password_span(url: str) -> tuple[int, int] | None:
    """Where the password of a URL is, read leniently: the user info ends at the last ``@``, so a password with
    an unencoded ``/``, ``?``, ``#`` or ``@`` (or in a URL with a typo in ``://``) is still found whole."""
    scheme = _SCHEME.match(url)
    start = scheme.end() if scheme else 0  # not a URL (a typo): any ':' before the '@' may start it
    at = url.rfind("@")
    colon = url.find(":", start, at) if at > start else -1
    if colon < 0 or "@" in url[start:colon]:  # no user info, or a user without a password
        return None
    return colon + 1, at


def redact(url: str) -> str:
    """The URL with its password (user part, or a ``password=``/``pwd=`` parameter) replaced by ``***``."""
    span = _password_span(url)
    return _QUERY_PASSWORD.sub(r"\1***", url if span is None else url[:span[0]] + "***" + url[span[1]:])


def connection_factory(url: str) -> tuple[Callable[[], Any], str]:
    """Return (a function opening a new connection, dialect name) for a URL; nothing is opened yet."""
    if not isinstance(url, str) or not _SCHEME.match(url):
        shown = redact(url) if isinstance(url, str) else type(url).__name__
        raise UnsupportedConnectionError(
            f"not a connection URL: {shown!r} (it must start with scheme://); use one of: {', '.join(SCHEMES)}")
    span = _password_span(url)
    if span is not None and any(ch in url[span[0]:span[1]] for ch in "/?#@[]"):
        raise UnsupportedConnectionError(
            f"the password in {redact(url)} contains '/', '?', '#', '@', '[' or ']' as it is; percent-encode it "
            "(urllib.parse.quote(password, safe=''))")
    refused: UnsupportedConnectionError | None = None
    try:
        urlsplit(url).port  # noqa: B018 - parses the host and port now: their errors may quote the URL
    except ValueError as exc:
        refused = UnsupportedConnectionError(f"{redact(url)} is not a valid URL ({_scrubbed(exc, url)}); "
                                             f"use one of: {', '.join(SCHEMES)}")
    if refused is not None:  # raised outside the handler: the parser's error (quoting the URL) is not its context
        raise refused
    scheme = url.split("://", 1)[0].lower()
    if scheme == "sqlite":
        return _sqlite(url), "sqlite"
    if scheme in ("postgresql", "postgres", "postgresql+psycopg", "postgresql+psycopg2"):
        return _postgres(url, scheme), "postgres"
    if scheme in ("mssql", "mssql+pymssql"):
        return _pymssql(url), "mssql"
    if scheme == "mssql+pyodbc":
        return _pyodbc(url), "mssql"
    raise UnsupportedConnectionError(
        f"unsupported URL scheme {scheme!r} in {redact(url)}; use one of: {', '.join(SCHEMES)}")


def _blanked(text: str, password: str | None) -> str:
    """``text`` with ``password`` blanked, as written and percent-decoded."""
    for secret in (password, unquote(password or "")):
        if secret:
            text = text.replace(secret, "***")
    return text


def _scrubbed(exc: Exception, url: str) -> str:
    """An error's text with the URL's password blanked."""
    span = _password_span(url)
    return _blanked(str(exc), None if span is None else url[span[0]:span[1]])


def _guard(open_connection: Callable[[], Any], url: str) -> Callable[[], Any]:
    parts = urlsplit(url)
    return guard_connect(open_connection, redact(url),
                         parts.password or {k.lower(): v for k, v in parse_qsl(parts.query)}.get("password"))


def guard_connect(open_connection: Callable[[], Any], where: str, password: str | None) -> Callable[[], Any]:
    """Wrap a connection factory: a failure becomes one line naming ``where``, with the password blanked."""

    def connect() -> Any:
        try:
            return open_connection()
        except SqlQueueError:
            raise
        except Exception as exc:
            text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            failure = DatabaseConnectionError(f"cannot connect to {where}: {_blanked(text, password)}")
        # raised outside the handler: the driver's error (which may quote the password) is not even its context
        raise failure

    return connect


def _sqlite(url: str) -> Callable[[], Any]:
    path = url[len("sqlite:///"):] if url.lower().startswith("sqlite:///") else ""
    if not path:
        raise UnsupportedConnectionError(f"a SQLite URL needs a file path: sqlite:///relative.db or "
                                         f"sqlite:////absolute/path.db (got {redact(url)!r})")
    if path == ":memory:":
        raise UnsupportedConnectionError(
            "sqlite:///:memory: gives every connection its own empty database; use a file path")
    path = unquote(path.split("?", 1)[0])

    def connect() -> sqlite3.Connection:
        return sqlite3.connect(path, timeout=60, isolation_level=None, check_same_thread=False)

    return _guard(connect, url)


def _postgres(url: str, scheme: str) -> Callable[[], Any]:
    dsn = "postgresql://" + url.split("://", 1)[1]
    if scheme != "postgresql+psycopg2":
        try:
            import psycopg

            return _guard(lambda: psycopg.connect(dsn, autocommit=False), url)
        except ImportError:
            pass
    try:
        import psycopg2
    except ImportError:
        raise UnsupportedConnectionError(
            "PostgreSQL needs psycopg (v3) or psycopg2: pip install 'airflow-provider-sqlqueue[postgres]'") from None
    return _guard(lambda: psycopg2.connect(dsn), url)


def _mssql_parts(url: str) -> dict[str, Any]:
    parts = urlsplit(url)
    return {
        "host": parts.hostname or "localhost",
        "port": parts.port or 1433,
        "user": unquote(parts.username or ""),
        "password": unquote(parts.password or ""),
        "database": unquote(parts.path.lstrip("/")),
        "query": dict(parse_qsl(parts.query)),
    }


def _pymssql(url: str) -> Callable[[], Any]:
    try:
        import pymssql
    except ImportError:
        raise UnsupportedConnectionError(
            "SQL Server over pymssql needs: pip install 'airflow-provider-sqlqueue[mssql]'") from None
    p = _mssql_parts(url)
    return _guard(lambda: pymssql.connect(server=p["host"], port=str(p["port"]), user=p["user"],
                                          password=p["password"], database=p["database"] or None,
                                          autocommit=False), url)


def _pyodbc(url: str) -> Callable[[], Any]:
    try:
        import pyodbc
    except ImportError:
        raise UnsupportedConnectionError(
            "SQL Server over pyodbc needs pyodbc and unixODBC (apt-get install unixodbc tdsodbc): "
            "pip install 'airflow-provider-sqlqueue[odbc]'") from None
    p = _mssql_parts(url)
    driver = p["query"].pop("driver", "FreeTDS")
    fields = {"DRIVER": "{" + driver + "}", "SERVER": p["host"], "PORT": str(p["port"]), "UID": p["user"],
              "PWD": p["password"], "DATABASE": p["database"], **p["query"]}
    conn_str = ";".join(f"{k}={v}" for k, v in fields.items() if v)
    return _guard(lambda: pyodbc.connect(conn_str, autocommit=False), url)


def paramstyle_of(url: str) -> str | None:
    """The paramstyle of the driver a URL selects (pyodbc differs from pymssql)."""
    return "qmark" if url.lower().startswith("mssql+pyodbc") else None


def default_catalog_of(url: str) -> str | None:
    """The database named in a SQL Server URL (the default catalog of its queue addresses)."""
    if not url.lower().startswith("mssql"):
        return None
    return _mssql_parts(url)["database"] or None
