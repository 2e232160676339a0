"""Load a dialect's ``.sql`` file of named statements.

Format (as procrastinate's ``queries.sql``)::

    -- receive_batch --
    -- Delete up to %(batch_size)s of the oldest unlocked rows and return them.
    DELETE FROM {queue} ...

Values are always parameters written ``%(name)s`` (``%(name)b``: sent in binary, psycopg 3 only); ``{name}``
marks an identifier that the dialect quotes before it is put into the text. Nothing else is ever formatted into SQL.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources

_HEADER = re.compile(r"^-- ([a-z_0-9]+) --\s*$")
_PARAM = re.compile(r"%\((\w+)\)[sb]|%%")


@dataclass(frozen=True)
class Statement:
    """One named statement: its SQL text (identifier slots unfilled) and description."""

    name: str
    description: str
    text: str

    def convert(self, sql: str, paramstyle: str) -> tuple[str, list[str] | None]:
        """Rewrite ``%(name)s`` (and ``%(name)b``) for the driver's paramstyle; return (sql, ordered names for
        qmark)."""
        if paramstyle == "pyformat":
            return sql, None
        names: list[str] = []

        def repl(match: re.Match[str]) -> str:
            if match.group(0) == "%%":
                return "%"
            names.append(match.group(1))
            return ":" + match.group(1) if paramstyle == "named" else "?"

        converted = _PARAM.sub(repl, sql)
        return converted, (names if paramstyle == "qmark" else None)


def load_statements(filename: str) -> dict[str, Statement]:
    """Read ``sql/<filename>`` from this package and return its statements by name."""
    text = resources.files(__package__).joinpath("sql", filename).read_text(encoding="utf-8")
    return parse_statements(text)


def parse_statements(text: str) -> dict[str, Statement]:
    """Split a statements file into named statements."""
    statements: dict[str, Statement] = {}
    name: str | None = None
    description: list[str] = []
    body: list[str] = []

    def flush() -> None:
        if name is not None:
            sql = "\n".join(body).strip().rstrip(";").strip()
            statements[name] = Statement(name, " ".join(description).strip(), sql)

    for line in text.splitlines():
        match = _HEADER.match(line)
        if match:
            flush()
            name, description, body = match.group(1), [], []
            if name in statements:
                raise ValueError(f"statement {name!r} is defined twice")
            continue
        if name is None:
            continue
        if not body and line.startswith("--"):
            description.append(line[2:].strip())
        else:
            body.append(line)
    flush()
    return statements
