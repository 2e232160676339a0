"""Connection URLs to DB-API connection factories (for the CLI, scripts and tests; Airflow uses hooks)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit

from ..common.errors import DatabaseConnectionError, SqlQueueError, UnsupportedConnectionError
from ..common.redaction import SCHEME, blank, blank_url_password, password_span, redact_url

SCHEMES = ("sqlite:///path.db", "postgresql://user:pass@host:5432/db", "mssql+pymssql://user:pass@host:1433/db",
           "mssql+pyodbc://user:pass@host:1433/db?driver=FreeTDS")


def redact(url: str) -> str:
    """The URL with its password (user part, or a ``password=``/``pwd=`` parameter) replaced by ``***``."""
    return redact_url(url)


def connection_factory(url: str) -> tuple[Callable[[], Any], str]:
    """Return (a function opening a new connection, dialect name) for a URL; nothing is opened yet."""
    if not isinstance(url, str) or not SCHEME.match(url):
        shown = redact(url) if isinstance(url, str) else type(url).__name__
        raise UnsupportedConnectionError(
            f"not a connection URL: {shown!r} (it must start with scheme://); use one of: {', '.join(SCHEMES)}")
    span = password_span(url)
    if span is not None and any(ch in url[span[0]:span[1]] for ch in "/?#@[]"):
        raise UnsupportedConnectionError(
            f"the password in {redact(url)} contains '/', '?', '#', '@', '[' or ']' as it is; percent-encode it "
            "(urllib.parse.quote(password, safe=''))")
    refused: UnsupportedConnectionError | None = None
    try:
        urlsplit(url).port  # noqa: B018 - parses the host and port now: their errors may quote the URL
    except ValueError as exc:
        refused = UnsupportedConnectionError(f"{redact(url)} is not a valid URL ({blank_url_password(str(exc), url)}); "
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
            failure = DatabaseConnectionError(f"cannot connect to {where}: {blank(text, password)}")
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


#: libpq keywords that may come with a PostgreSQL connection's options (an Airflow connection's extra).
LIBPQ_OPTIONS = frozenset({
    "sslmode", "sslcert", "sslkey", "sslrootcert", "sslcrl", "sslpassword", "sslcompression", "connect_timeout",
    "application_name", "options", "target_session_attrs", "keepalives", "keepalives_idle", "keepalives_interval",
    "keepalives_count", "client_encoding", "gssencmode", "channel_binding", "krbsrvname", "service"})


def url_from_fields(conn_type: str | None, host: str | None = None, port: int | None = None,
                    login: str | None = None, password: str | None = None, schema: str | None = None,
                    options: dict[str, Any] | None = None) -> str | None:
    """A connection URL from the fields of a connection (as Airflow stores them), or None when its driver needs
    more than a URL carries (ODBC, SQL Server options, PostgreSQL options that are not libpq keywords)."""
    kind = (conn_type or "").lower()
    options = dict(options or {})
    if kind == "sqlite":
        path = host or schema
        return f"sqlite:///{path}" if path and not options else None
    if kind in ("postgres", "postgresql"):
        scheme = "postgresql"
        if not set(options) <= LIBPQ_OPTIONS:
            return None
    elif kind == "mssql" and not options:
        scheme = "mssql+pymssql"
    else:
        return None
    auth = quote(login or "", safe="") + (":" + quote(password, safe="") if password else "")
    where = f"{host or 'localhost'}{f':{port}' if port else ''}"
    query = ("?" + urlencode({k: str(v) for k, v in options.items()})) if options else ""
    return f"{scheme}://{auth + '@' if auth else ''}{where}/{quote(schema or '', safe='')}{query}"
