"""One object per database (SQL Server, PostgreSQL, SQLite) owning its named-statement SQL file
(``sql/<dialect>.sql``), identifier quoting, paramstyle and error kinds; connection URLs to DB-API connection
factories. Dialects by name: ``mssql``, ``postgres``, ``sqlite``.

May import: common, wire.
"""

from __future__ import annotations

from .base import Dialect, Finding, RawRow
from .mssql import MssqlDialect
from .postgres import PostgresDialect
from .sqlite import SqliteDialect

DIALECT_NAMES = ("mssql", "postgres", "sqlite")


def get_dialect(name: str, paramstyle: str | None = None, default_catalog: str | None = None) -> Dialect:
    """The dialect called ``name``; ``paramstyle`` overrides the driver default (pyodbc: ``qmark``).

    ``default_catalog`` (SQL Server) is the connection's database, used in qualified names and lock names.
    """
    key = {"postgresql": "postgres", "sqlserver": "mssql", "sqlite3": "sqlite"}.get(name, name)
    if key == "postgres":
        return PostgresDialect(paramstyle or "pyformat")
    if key == "sqlite":
        return SqliteDialect(paramstyle or "named")
    if key == "mssql":
        return MssqlDialect(paramstyle or "pyformat", default_catalog=default_catalog)
    raise ValueError(f"unknown dialect {name!r}; choose one of {', '.join(DIALECT_NAMES)}")


__all__ = ["DIALECT_NAMES", "Dialect", "Finding", "RawRow", "get_dialect"]
