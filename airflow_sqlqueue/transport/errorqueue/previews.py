"""How the error queue shows a failed message without loading it: previews cut in SQL, and text safe to send.

A page never loads a whole row: the database cuts headers and body to a preview and returns their sizes, and the
fields the browser groups by (FailedQ, exception type, message type, time of failure, exception message, stack
trace) are read from the headers in SQL. Rows are untrusted: no row, whatever it holds (bad JSON, a lone surrogate
escape, binary, a non-UUID Id), makes a page fail; such a row is listed with ``bad`` reasons. Every text returned
is valid Unicode (lone surrogates replaced), so it can be sent as JSON.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Any

from ..wire import headers as h
from ..wire.headers import PoisonHeadersError, parse_headers

#: Preview sizes: what a page holds of each message, at most.
HEADERS_PREVIEW_CHARS = 16_384
BODY_PREVIEW_BYTES = 4_096
MAX_PAGE = 10_000
MAX_GROUPS = 1_000
#: Spellings of one queue a FailedQ filter matches in one statement (``failed_q``, ``failed_q_2``...).
MAX_SPELLINGS = 8
_SURROGATE = re.compile("[\ud800-\udfff]")


def clean_text(value: Any) -> tuple[str | None, bool]:
    """A database value as printable-safe Unicode text, and whether it had to be repaired (invalid UTF-8 or a
    lone surrogate, each replaced by U+FFFD)."""
    if value is None:
        return None, False
    if isinstance(value, bytes | bytearray | memoryview):
        raw = bytes(value)
        text = raw.decode("utf-8", errors="replace")
        repaired = "\ufffd" in text and text.encode("utf-8") != raw
    else:
        text, repaired = str(value), False
    if _SURROGATE.search(text):
        return _SURROGATE.sub("\ufffd", text), True
    return text, repaired


#: The fields a page can be filtered by (and grouped by).
FILTER_FIELDS = ("failed_q", "exception_type", "message_type")


@dataclass(frozen=True)
class FailedFilter:
    """What a page or a group is limited to; None matches every row. ``search`` is text the headers contain (as
    displayed or as stored), part of the native Id (any case), or bytes of the body;
    ``missing`` names fields a row must not have (absent or empty: the "(none)" group of that field)."""

    failed_q: str | None = None
    exception_type: str | None = None
    message_type: str | None = None
    search: str | None = None
    missing: frozenset[str] = frozenset()
    #: Other spellings of ``failed_q`` that name the same queue (at most ``MAX_SPELLINGS - 1``).
    failed_q_also: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        unknown = set(self.missing) - set(FILTER_FIELDS)
        if unknown:
            raise ValueError(f"missing may name {', '.join(FILTER_FIELDS)}, not {', '.join(sorted(unknown))}")
        both = [name for name in self.missing if getattr(self, name)]
        if both:
            raise ValueError(f"{', '.join(sorted(both))}: a value and missing at once match nothing; give one")
        object.__setattr__(self, "missing", frozenset(self.missing))

    def search_forms(self) -> dict[str, str | None]:
        """``search`` as displayed (a header value parsed) and as it is stored in header JSON: as this provider and
        NServiceBus write it (``/`` as ``\\/``, upper-case ``\\uXXXX``), and as other JSON writers do (escapes
        with and without ASCII-only output), so ``application/json`` finds ``application\\/json``."""
        if not self.search:
            return {"search": None, "search_wire": None, "search_json": None, "search_ascii": None}
        wire = h.serialize_headers({"": self.search}, limit=None)[len('{"":"'):-len('"}')]
        forms = {"search": self.search, "search_wire": wire,
                 "search_json": json.dumps(self.search, ensure_ascii=False)[1:-1],
                 "search_ascii": json.dumps(self.search)[1:-1]}
        return {k: (v if not _SURROGATE.search(v) else self.search) for k, v in forms.items()}

    def body_forms(self) -> dict[str, bytes | None]:
        """``search`` as a body may hold it: its UTF-8 bytes, and as JSON written by NServiceBus (``/`` as ``\\/``);
        the database looks for these bytes in the body, whatever else the body holds (binary, invalid UTF-8)."""
        if not self.search:
            return {"search_body": None, "search_body_wire": None}
        forms = self.search_forms()
        return {"search_body": forms["search"].encode("utf-8", "replace"),
                "search_body_wire": (forms["search_wire"] or forms["search"]).encode("utf-8", "replace")}

    def params(self) -> dict[str, Any]:
        also = [t for t in self.failed_q_also if t and t != self.failed_q][:MAX_SPELLINGS - 1] if self.failed_q else []
        return {"failed_q": self.failed_q or None, "exception_type": self.exception_type or None,
                "message_type": self.message_type or None, **self.search_forms(), **self.body_forms(),
                **{f"failed_q_{n}": (also[n - 2] if n - 2 < len(also) else None) for n in range(2, MAX_SPELLINGS + 1)},
                **{f"{name}_missing": int(name in self.missing) for name in FILTER_FIELDS}}

    def described(self) -> dict[str, Any]:
        """The filter as it was asked for (its values, and ``missing`` when given), for records and logs."""
        out: dict[str, Any] = {k: v for k in (*FILTER_FIELDS, "search") if (v := getattr(self, k))}
        if self.missing:
            out["missing"] = sorted(self.missing)
        return out

    def matches(self, fields: dict[str, Any]) -> bool:
        """Whether a row (or a group) with these field values is one this filter keeps (search aside)."""
        for name in FILTER_FIELDS:
            wanted, value = getattr(self, name), fields.get(name)
            if name == "failed_q" and wanted and value in self.failed_q_also:
                continue
            if (wanted and value != wanted) or (name in self.missing and value):
                return False
        return True


@dataclass
class FailedPreview:
    """One failed message as a page shows it: grouping fields, previews and full sizes, and what is wrong."""

    id: str
    seq: int
    failed_q: str | None
    exception_type: str | None
    message_type: str | None
    time_of_failure: str | None
    exception_message: str | None
    stack_trace: str | None
    headers: dict[str, str | None] | None
    headers_preview: str
    headers_length: int
    headers_truncated: bool
    body_preview: str
    body_binary: bool
    body_length: int
    body_truncated: bool
    bad: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class Position:
    """A message in a queue by position and native Id (text, as a page lists it)."""

    seq: int
    id: str


def preview(dialect: Any, row: Any, headers_chars: int, body_bytes: int) -> FailedPreview:
    (raw_id, seq, failed_q, exception_type, message_type, time_of_failure, exception_message, stack_trace,
     headers_preview, headers_length, body_preview, body_length) = row[:12]
    headers_type = row[12] if len(row) > 12 else "text"  # SQLite's storage type; the other databases: text
    bad: list[str] = []
    if headers_type != "text":
        bad.append(f"the headers are stored as {'binary (a BLOB)' if headers_type == 'blob' else headers_type}, "
                   "not text: a retry refuses them (delete or archive this message)")
    fields = [dialect.header_field(v) for v in (failed_q, exception_type, message_type, time_of_failure,
                                                exception_message, stack_trace)]
    texts = [clean_text(v) for v in fields]
    if any(repaired for _, repaired in texts):
        bad.append("a header holds invalid Unicode (a lone surrogate or invalid UTF-8), shown replaced")
    id_text, id_repaired = clean_text(raw_id)
    id_text = id_text or ""
    try:
        uuid.UUID(id_text)
    except ValueError:
        bad.append("the Id is not a UUID")
    headers_length = int(headers_length or 0)
    truncated = headers_length > headers_chars
    headers_text, headers_repaired = clean_text(headers_preview)
    headers_text = headers_text or ""
    parsed: dict[str, str | None] | None = None
    if headers_repaired and not truncated:
        bad.append("the headers are not valid UTF-8 text")
    if not truncated:
        try:
            parsed = {clean_text(k)[0] or "": clean_text(v)[0] for k, v in parse_headers(headers_text).items()}
        except (PoisonHeadersError, RecursionError, ValueError):
            bad.append("the headers are not a JSON object of strings")
    if parsed is not None and h.RAW_HEADERS in parsed:
        bad.append("the original headers were not JSON (kept as airflow_sqlqueue.RawHeaders)")
    body = bytes(body_preview) if body_preview is not None else b""
    if not isinstance(body_preview, bytes | bytearray | memoryview | type(None)):
        body = str(body_preview).encode("utf-8", errors="replace")
        bad.append("the body is not binary (written by another program with a loose type)")
    body_length = int(body_length or 0)
    body_truncated = body_length > len(body)
    if _utf8_prefix(body) if body_truncated else _is_utf8(body):
        body_text, binary = body.decode("utf-8", errors="ignore"), False
    else:
        body_text, binary = body[:512].hex(" "), True
    body_text, _ = clean_text(body_text)
    failed_text, type_text, message_type_text, time_text, message_text, stack_text = (t for t, _ in texts)
    return FailedPreview(id_text, int(seq), failed_text, type_text, message_type_text, time_text, message_text,
                         stack_text, parsed, headers_text, headers_length, truncated, body_text or "", binary,
                         body_length, body_truncated, bad)


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def _utf8_prefix(data: bytes) -> bool:
    """Whether ``data`` is valid UTF-8 but for a character cut at its end (a preview cut mid-character)."""
    return any(_is_utf8(data[:len(data) - cut]) for cut in range(min(4, len(data) + 1)))
