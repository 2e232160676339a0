"""Browse error archives: list the archives at a location, read one's summary, page its messages.

A page never reads a body: each archived row carries its sizes and a body preview, and a later page skips the
Parquet row groups before it by the ``seq`` column's statistics. Previews are valid Unicode (see
``previews.clean_text``), so they can be sent as JSON; rows are untrusted and never executed.
"""

from __future__ import annotations

from typing import Any

from ..transport.errorqueue.previews import HEADERS_PREVIEW_CHARS, MAX_PAGE, FailedFilter, clean_text
from .store import ArchiveRefusedError, ArchiveStore, browse_columns


def summary(manifest: dict[str, Any]) -> dict[str, Any]:
    """A manifest without its per-message lists (what listings, logs and XCom carry)."""
    out = {k: v for k, v in manifest.items() if k not in ("seqs", "ids", "not_found", "restored", "restore_pending",
                                                          "skipped")}
    out["not_found"] = len(manifest.get("not_found", []))
    out["restored"] = len(manifest.get("restored", []))
    out["skipped"] = len(manifest.get("skipped", []))
    out["location"] = None
    return out


def list_archives(location: str, queue: str | None = None) -> list[dict[str, Any]]:
    """Summaries of the archives at ``location`` (only those of ``queue`` when given), newest first."""
    store = ArchiveStore.open(location)
    return [{**summary(m), "location": store.location} for m in store.manifests()
            if queue is None or m.get("queue") == queue]


def read_archive(location: str, archive_id: str) -> dict[str, Any]:
    """One archive's summary."""
    store = ArchiveStore.open(location)
    return {**summary(store.read_manifest(archive_id)), "location": store.location}


def _matches(row: dict[str, Any], after_seq: int, where: FailedFilter) -> bool:
    if row["seq"] <= after_seq:
        return False
    if not where.matches(row):
        return False
    if not where.search:
        return True  # an archive is searched in its headers and Ids (a browse never reads the bodies)
    return (any(form.encode("utf-8", "surrogatepass") in (row["headers"] or b"")
                for form in where.search_forms().values() if form)
            or where.search.lower() in str(row.get("id") or "").lower())


def _browse_row(row: dict[str, Any], restored: set[str], not_found: set[int]) -> dict[str, Any]:
    headers = row["headers"] or b""
    headers_text, _ = clean_text(headers[:HEADERS_PREVIEW_CHARS])
    preview = row["body_preview"] or b""
    try:
        body_text, binary = preview.decode("utf-8"), False
    except UnicodeDecodeError as exc:
        if exc.start >= len(preview) - 3 and row["body_length"] > len(preview):
            body_text, binary = preview[:exc.start].decode("utf-8"), False  # a character cut by the preview
        else:
            body_text, binary = preview[:512].hex(" "), True
    when = row["time_of_failure"]
    return {"id": clean_text(row["id"])[0], "seq": row["seq"], "failed_q": clean_text(row["failed_q"])[0],
            "exception_type": clean_text(row["exception_type"])[0],
            "message_type": clean_text(row["message_type"])[0],
            "time_of_failure": when.isoformat() if when is not None else None,
            "headers_preview": headers_text or "", "headers_length": row["headers_length"],
            "headers_truncated": row["headers_length"] > HEADERS_PREVIEW_CHARS,
            "body_preview": clean_text(body_text)[0] or "", "body_binary": binary, "body_length": row["body_length"],
            "body_truncated": row["body_length"] > len(preview),
            "restored": row["id"] in restored, "not_deleted": row["seq"] in not_found}


def _groups_after(reader: Any, after_seq: int) -> list[int]:
    """Row groups that may hold positions after ``after_seq`` (by the seq column's statistics): a later page skips
    the groups before it without reading them."""
    seq_column = reader.schema_arrow.get_field_index("seq")
    kept = []
    for index in range(reader.metadata.num_row_groups):
        stats = reader.metadata.row_group(index).column(seq_column).statistics
        if stats is None or not stats.has_min_max or stats.max > after_seq:
            kept.append(index)
    return kept


def archive_page(location: str, archive_id: str, *, after_seq: int = 0, limit: int = 50,
                 where: FailedFilter | None = None) -> list[dict[str, Any]]:
    """Up to ``limit`` archived messages after position ``after_seq``, in queue order, matching ``where``; headers
    and body cut to previews (bodies are never read: each row carries its preview)."""
    if not 1 <= limit <= MAX_PAGE:
        raise ArchiveRefusedError(f"limit must be between 1 and {MAX_PAGE}, got {limit}")
    store = ArchiveStore.open(location)
    manifest = store.read_manifest(archive_id)
    restored = set(manifest.get("restored", []))
    not_found = {int(s) for s, _ in manifest.get("not_found", [])}
    where = where or FailedFilter()
    out: list[dict[str, Any]] = []
    for entry in manifest.get("files", []):
        with store.parquet_file(archive_id, entry["path"]) as reader:
            groups = _groups_after(reader, after_seq)
            if not groups:
                continue
            for batch in reader.iter_batches(columns=browse_columns(), batch_size=512, row_groups=groups):
                for row in batch.to_pylist():
                    if _matches(row, after_seq, where):
                        out.append(_browse_row(row, restored, not_found))
                        if len(out) >= limit:
                            return out
    return out
