"""Tables the maintenance layer keeps in a queue database (health samples, batch-retry progress): their named
statements, read from ``sql/<file>.sql`` beside this module, run with identifiers quoted by the dialect and
values as parameters, and times written the way each dialect's column stores them (UTC)."""

from __future__ import annotations

from datetime import datetime, timezone
from functools import cache
from importlib import resources
from typing import Any

from airflow_sqlqueue.transport.dialects import Dialect
from airflow_sqlqueue.transport.dialects.sqlfile import Statement, parse_statements
from airflow_sqlqueue.transport.wire.address import QueueAddress

SQLITE_TIME = "%Y-%m-%d %H:%M:%S.%f"


@cache
def statements(file_stem: str) -> dict[str, Statement]:
    """The named statements of ``sql/<file_stem>.sql``."""
    text = resources.files(__package__).joinpath("sql", f"{file_stem}.sql").read_text(encoding="utf-8")
    return parse_statements(text)


class DialectTable:
    """One table on one database: its parsed address, its quoted identifiers and its named statements.

    :param setting: the configuration key the table name came from (named when the name is not valid).
    """

    #: ``sql/<file_stem % dialect>.sql`` holds the statements.
    file_stem = "{dialect}"

    def __init__(self, dialect: Dialect, table: str, setting: str) -> None:
        self.dialect = dialect
        try:
            self.address: QueueAddress = dialect.parse_address(table)
        except ValueError as exc:
            raise ValueError(f"{setting} {table!r} is not a valid table name: {exc}") from None
        self.name = dialect.format_address(self.address)
        self.identifiers: dict[str, str] = {}
        self.names: dict[str, Any] = {}

    def statements(self) -> dict[str, Statement]:
        return statements(self.file_stem.format(dialect=self.dialect.name))

    def execute(self, cursor: Any, name: str, params: dict[str, Any] | None = None) -> Any:
        """Run one named statement (identifiers quoted, values as parameters); the dialect runs it, so the
        table's name reaches each driver exactly as the queue names do."""
        statement = self.statements()[name]
        values = {**self.names, **(params or {})}
        used = set(statement.params)
        return self.dialect.execute_statement(cursor, statement, {k: v for k, v in values.items() if k in used},
                                              self.identifiers)

    def time_param(self, when: datetime) -> Any:
        """A UTC time as the column stores it."""
        when = when.astimezone(timezone.utc)
        if self.dialect.name == "sqlite":
            return when.strftime(SQLITE_TIME)
        if self.dialect.name == "mssql":
            return when.replace(tzinfo=None)
        return when


def as_time(value: Any) -> datetime:
    """A time read from such a column, as an aware UTC datetime."""
    if isinstance(value, str):
        value = datetime.strptime(value, SQLITE_TIME)
    return value if value.tzinfo is not None else value.replace(tzinfo=timezone.utc)
