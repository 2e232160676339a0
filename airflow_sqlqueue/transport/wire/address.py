"""Queue addresses: parse, validate and quote them per dialect.

* SQL Server: ``table@[schema]@[catalog]`` (brackets optional for plain names, ``]`` doubled inside them);
  schema defaults to ``dbo``, catalog to the connection's database; each part at most 128 characters.
* PostgreSQL: ``"schema"."table"`` (quotes optional for plain names, ``"`` doubled inside them); schema
  defaults to ``public``; the table name at most 55 bytes (so index names derived from it fit in 63).
* SQLite: the whole text is the table name.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ..common.errors import InvalidAddressError

MSSQL_MAX_IDENTIFIER = 128
POSTGRES_MAX_TABLE_BYTES = 55
POSTGRES_MAX_IDENTIFIER_BYTES = 63
SQLITE_MAX_TABLE = 128


@dataclass(frozen=True, order=True)
class QueueAddress:
    """A queue table: its name and, where the dialect has them, schema and catalog (None = default)."""

    table: str
    schema: str | None = None
    catalog: str | None = None


def _check_common(part: str, what: str, text: str) -> None:
    if part == "":
        raise InvalidAddressError(f"{what} in address {text!r} is empty; give a non-empty name")
    if "\x00" in part:
        raise InvalidAddressError(f"{what} in address {text!r} contains a NUL character, which no "
                                  "database allows in a name")
    if part != part.strip() and part.strip() == "":
        raise InvalidAddressError(f"{what} in address {text!r} is only whitespace")


def _read_delimited(text: str, pos: int, close: str) -> tuple[str, int] | None:
    """Read a delimited name starting at pos (its opening character) up to ``close``, where a doubled ``close`` is
    a literal one. Return (name, next pos), or None when it is never closed."""
    out = []
    i = pos + 1
    while i < len(text):
        ch = text[i]
        if ch == close:
            if i + 1 < len(text) and text[i + 1] == close:
                out.append(close)
                i += 2
                continue
            return "".join(out), i + 1
        out.append(ch)
        i += 1
    return None


def _read_bracketed(text: str, pos: int, full: str) -> tuple[str, int]:
    """Read ``[name]`` starting at pos (the ``[``); ``]]`` is a literal ``]``. Return (name, next pos)."""
    read = _read_delimited(text, pos, "]")
    if read is None:
        raise InvalidAddressError(f"address {full!r} has an unclosed '[': close it with ']' "
                                  "(write ']' inside a bracketed name as ']]')")
    return read


def parse_mssql(text: str) -> QueueAddress:
    """Parse ``table@[schema]@[catalog]``."""
    if not isinstance(text, str):
        raise InvalidAddressError(f"a queue address must be text, got {type(text).__name__}")
    if text == "":
        raise InvalidAddressError("the queue address is empty; give a table name such as 'orders'")
    if text.startswith("["):
        # a bracketed table part: [my table]@[dbo]
        table, end = _read_bracketed(text, 0, text)
        rest = text[end:]
        if rest and not rest.startswith("@"):
            raise InvalidAddressError(f"address {text!r}: unexpected text after ']' in the table name "
                                      "(form: table@[schema]@[catalog])")
        sep, rest = ("@", rest[1:]) if rest else ("", "")
    else:
        table, sep, rest = text.partition("@")
    parts = [table]
    pos = 0
    while sep:
        if rest.startswith("["):
            name, pos = _read_bracketed(rest, 0, text)
            rest = rest[pos:]
            parts.append(name)
            if rest == "":
                break
            if not rest.startswith("@"):
                raise InvalidAddressError(
                    f"address {text!r}: expected '@' after ']' (form: table@[schema]@[catalog])")
            rest = rest[1:]
            sep = "@"
        else:
            name, sep, rest = rest.partition("@")
            if "[" in name or "]" in name:
                raise InvalidAddressError(
                    f"address {text!r}: a schema or catalog with brackets must be written as [name]")
            parts.append(name)
    if len(parts) > 3:
        raise InvalidAddressError(
            f"address {text!r} has {len(parts)} parts; the form is table@[schema]@[catalog] and '@' is not "
            "allowed in a table name")
    if "@" in parts[0]:
        raise InvalidAddressError(f"table name in address {text!r} contains '@', which SQL Server queue addresses "
                                  "do not allow in a table name")
    names = ["table name", "schema", "catalog"]
    for part, what in zip(parts, names, strict=False):
        _check_common(part, what, text)
        if len(part) > MSSQL_MAX_IDENTIFIER:
            raise InvalidAddressError(
                f"{what} in address {text!r} is {len(part)} characters; SQL Server allows at most "
                f"{MSSQL_MAX_IDENTIFIER}")
    return QueueAddress(parts[0], parts[1] if len(parts) > 1 else None, parts[2] if len(parts) > 2 else None)


def validate_mssql(address: QueueAddress) -> QueueAddress:
    """Check an address object against the SQL Server rules (as parsing its text would)."""
    if "@" in address.table:
        raise InvalidAddressError(f"table name {address.table!r} contains '@', which SQL Server queue "
                                  "addresses do not allow in a table name (form: table@[schema]@[catalog])")
    for part, what in ((address.table, "table name"), (address.schema, "schema"), (address.catalog, "catalog")):
        if part is None:
            continue
        _check_common(part, what, format_mssql(address))
        if len(part) > MSSQL_MAX_IDENTIFIER:
            raise InvalidAddressError(f"{what} {part[:20]!r}... is {len(part)} characters; SQL Server allows at "
                                      f"most {MSSQL_MAX_IDENTIFIER}")
    return address


def format_mssql(address: QueueAddress) -> str:
    """Canonical text of an address: ``table``, ``table@[schema]`` or ``table@[schema]@[catalog]``."""
    text = address.table
    if text.startswith("["):
        text = "[" + text.replace("]", "]]") + "]"
    if address.schema is not None or address.catalog is not None:
        text += "@[" + (address.schema or "dbo").replace("]", "]]") + "]"
    if address.catalog is not None:
        text += "@[" + address.catalog.replace("]", "]]") + "]"
    return text


def _read_quoted(text: str, pos: int, full: str) -> tuple[str, int]:
    """Read ``"name"`` starting at pos (the ``"``); ``""`` is a literal ``"``. Return (name, next pos)."""
    read = _read_delimited(text, pos, '"')
    if read is None:
        raise InvalidAddressError(f'address {full!r} has an unclosed \'"\': close it (write " inside as "")')
    return read


def parse_postgres(text: str) -> QueueAddress:
    """Parse ``"schema"."table"``, ``schema.table`` or ``table`` (quotes needed for dots and quotes)."""
    if not isinstance(text, str):
        raise InvalidAddressError(f"a queue address must be text, got {type(text).__name__}")
    if text == "":
        raise InvalidAddressError("the queue address is empty; give a table name such as 'orders'")
    parts: list[str] = []
    pos = 0
    while True:
        if text.startswith('"', pos):
            name, pos = _read_quoted(text, pos, text)
        else:
            end = text.find(".", pos)
            end = len(text) if end < 0 else end
            name = text[pos:end]
            if '"' in name:
                raise InvalidAddressError(
                    f'address {text!r}: a name with \'"\' must be quoted, e.g. "my""table"')
            pos = end
        parts.append(name)
        if pos == len(text):
            break
        if text[pos] != ".":
            raise InvalidAddressError(f"address {text!r}: expected '.' between schema and table")
        pos += 1
    if len(parts) > 2:
        raise InvalidAddressError(
            f'address {text!r} has {len(parts)} parts; the form is "schema"."table" (quote a name that '
            "contains a dot)")
    schema, table = (parts[0], parts[1]) if len(parts) == 2 else (None, parts[0])
    _check_common(table, "table name", text)
    if len(table.encode()) > POSTGRES_MAX_TABLE_BYTES:
        raise InvalidAddressError(
            f"table name in address {text!r} is {len(table.encode())} bytes; PostgreSQL queue tables allow "
            f"at most {POSTGRES_MAX_TABLE_BYTES} (names longer than 63 bytes are silently truncated)")
    if schema is not None:
        _check_common(schema, "schema", text)
        if len(schema.encode()) > POSTGRES_MAX_IDENTIFIER_BYTES:
            raise InvalidAddressError(
                f"schema in address {text!r} is {len(schema.encode())} bytes; PostgreSQL allows at most "
                f"{POSTGRES_MAX_IDENTIFIER_BYTES}")
    return QueueAddress(table, schema)


def _pg_quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


@lru_cache(maxsize=1024)  # called per received row (ReceivedMessage.queue): the char-by-char check adds up
def format_postgres(address: QueueAddress) -> str:
    """Canonical text of an address: ``table`` or ``"schema"."table"``; quoted when needed."""

    def part(name: str) -> str:
        plain = name and all(ch.isalnum() or ch == "_" for ch in name)
        return name if plain else _pg_quote(name)

    if address.schema is None:
        return part(address.table)
    return part(address.schema) + "." + part(address.table)


def parse_sqlite(text: str) -> QueueAddress:
    """Parse a SQLite queue name: the whole text is the table name."""
    if not isinstance(text, str):
        raise InvalidAddressError(f"a queue address must be text, got {type(text).__name__}")
    _check_common(text, "table name", text)
    if len(text) > SQLITE_MAX_TABLE:
        raise InvalidAddressError(
            f"table name {text[:20]!r}... is {len(text)} characters; queue names allow at most {SQLITE_MAX_TABLE}")
    if text.lower().startswith("sqlite_"):
        raise InvalidAddressError(f"table name {text!r} starts with 'sqlite_', which SQLite reserves")
    return QueueAddress(text)


def format_sqlite(address: QueueAddress) -> str:
    """Canonical text of a SQLite address: the table name."""
    return address.table
