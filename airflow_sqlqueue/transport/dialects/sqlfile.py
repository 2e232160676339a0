"""Load a dialect's ``.sql`` file of named statements, and turn a statement into the text a driver receives.

Format (as procrastinate's ``queries.sql``)::

    -- receive_batch --
    -- Delete up to %(batch_size)s of the oldest unlocked rows and return them.
    DELETE FROM {queue} ...

Values are always parameters written ``%(name)s`` (``%(name)b``: bound in binary, psycopg 3 only); ``{name}``
marks an identifier that the dialect quotes before it is put into the text. Nothing else is ever formatted into SQL.

Order matters: parameter markers are converted to the driver's style (``%(name)s``, ``:name`` or ``?``)
*before* the identifier slots are filled (:meth:`Statement.compile`), so a quoted identifier is never read as
a marker, whatever characters it holds.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

_HEADER = re.compile(r"^-- ([a-z_0-9]+) --\s*$")
_PARAM = re.compile(r"%\((\w+)\)[sb]|%%")
_BINARY_PARAM = re.compile(r"%\((\w+)\)b")
_SLOT = re.compile(r"\{(\w+)\}")


@dataclass(frozen=True)
class Compiled:
    """A statement in one paramstyle, identifier slots still open.

    :param parts: literal SQL around the slots (markers already converted); one more than ``slots``.
    :param slots: the identifier slot names, in text order.
    :param order: parameter names in marker order (qmark), else None.
    """

    parts: tuple[str, ...]
    slots: tuple[str, ...]
    order: tuple[str, ...] | None

    def fill(self, identifiers: Mapping[str, str], literal: Callable[[str], str] | None = None) -> str:
        """The final text: each slot replaced by its quoted identifier, verbatim.

        ``literal`` (optional) maps each literal part first: a dialect that formats parameter values into the
        text itself (pymssql with an identifier holding ``%``) passes its substitution here, so values are put
        into the SQL parts and never into, or next to, an identifier.
        """
        parts = self.parts if literal is None else tuple(literal(p) for p in self.parts)
        out = [parts[0]]
        for slot, part in zip(self.slots, parts[1:], strict=True):
            out.append(identifiers[slot])
            out.append(part)
        return "".join(out)


@dataclass(frozen=True)
class Statement:
    """One named statement: its SQL text (identifier slots unfilled) and description."""

    name: str
    description: str
    text: str

    @property
    def params(self) -> tuple[str, ...]:
        """Parameter names in marker order (repeats kept)."""
        return tuple(m.group(1) for m in _PARAM.finditer(self.text) if m.group(1))

    @property
    def slot_names(self) -> frozenset[str]:
        """The identifier slots of the text."""
        return frozenset(_SLOT.findall(self.text))

    def compile(self, paramstyle: str) -> Compiled:
        """Convert the markers for ``paramstyle`` (``pyformat``, ``named``, ``qmark``), slots left open."""
        return _compile(self, paramstyle)

    def convert(self, sql: str, paramstyle: str) -> tuple[str, list[str] | None]:
        """Rewrite ``%(name)s`` in ``sql`` for the driver's paramstyle; return (sql, ordered names for qmark)."""
        converted, names = _convert(sql, paramstyle)
        return converted, names

    def with_text_parameters(self) -> Statement:
        """This statement with every ``%(name)b`` (bound in binary) written ``%(name)s``, for a driver that binds
        only text (psycopg 2)."""
        return Statement(self.name, self.description, _BINARY_PARAM.sub(r"%(\1)s", self.text))

    def repeated(self, slot: str, fragment: Statement, count: int, separator: str = ",\n") -> Statement:
        """This statement with ``{slot}`` replaced by ``count`` copies of ``fragment`` (a list of rows or values).

        Each copy's parameters are renamed ``<name>_<i>``, so copy ``i`` takes its values from those keys
        (see :func:`numbered`).
        """
        if count < 1:
            raise ValueError(f"{self.name}: at least one {fragment.name} is needed, got {count}")
        copies = [_PARAM.sub(lambda m, i=i: f"%({m.group(1)}_{i})s" if m.group(1) else m.group(0), fragment.text)
                  for i in range(count)]
        text = self.text.replace("{" + slot + "}", separator.join(copies))
        return Statement(f"{self.name}[{count}]", self.description, text)


    def filled(self, slot: str, fragment: Statement) -> Statement:
        """This statement with ``{slot}`` replaced by the text of ``fragment`` verbatim (its markers kept: the
        statement and the fragment share their parameters). For a fragment written once and used by several
        statements of the file (see ``Dialect.fragment_slots``)."""
        if "{" + slot + "}" not in self.text:
            raise ValueError(f"{self.name}: no {{{slot}}} slot to fill with {fragment.name}")
        return Statement(self.name, self.description, self.text.replace("{" + slot + "}", fragment.text))


def numbered(rows: list[Mapping[str, object]]) -> dict[str, object]:
    """The parameters of a :meth:`Statement.repeated` statement: row ``i``'s ``name`` as ``name_i``."""
    return {f"{key}_{i}": value for i, row in enumerate(rows) for key, value in row.items()}


@lru_cache(maxsize=512)
def _compile(statement: Statement, paramstyle: str) -> Compiled:
    pieces = _SLOT.split(statement.text)  # literal, slot, literal, slot, ..., literal
    literals, slots = pieces[0::2], pieces[1::2]
    names: list[str] = []
    parts = []
    for literal in literals:
        converted, order = _convert(literal, paramstyle)
        parts.append(converted)
        names.extend(order or ())
    return Compiled(tuple(parts), tuple(slots), tuple(names) if paramstyle == "qmark" else None)


def _convert(sql: str, paramstyle: str) -> tuple[str, list[str] | None]:
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


def load_statements(filename: str, package: str | None = None) -> dict[str, Statement]:
    """Read ``sql/<filename>`` from ``package`` (default: this one) and return its statements by name."""
    text = resources.files(package or __package__).joinpath("sql", filename).read_text(encoding="utf-8")
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
