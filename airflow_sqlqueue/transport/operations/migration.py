"""Online migration of queue tables made by airflow-sqlqueue 0.1 to the current shapes (``check --repair``).

0.1 made PostgreSQL queues without a primary key on id and without UNIQUE on seq, delayed stores with a seq
column and a due without time zone, and SQLite queues whose id was not unique. Each step here is one repair of
a finding of the schema check; each loses no row and lets senders and receivers go on:

- PostgreSQL keys are built with ``CREATE UNIQUE INDEX CONCURRENTLY`` (no lock that stops senders or
  receivers), then attached as the constraint in a brief transaction. Ids held twice get new ones first (a sender
  inserting a duplicate meanwhile makes the build fail: it is tried again).
- The PostgreSQL delayed store is rewritten in one transaction under an exclusive lock: senders and movers wait
  for it (a delayed store holds few rows), nothing is lost.
- SQLite: one transaction (SQLite has one writer; senders wait on its lock).
"""

from __future__ import annotations

import logging
from typing import Any

from ..common.errors import NameCollisionError, NotAQueueError
from ..tables.queue import TableQueue
from ..tables.session import Session

log = logging.getLogger(__name__)

#: Repair names of the findings this module handles.
MIGRATIONS = frozenset({"migrate_primary_key", "migrate_seq_unique", "migrate_delayed", "migrate_unique_id"})
#: Builds tried before giving up (a build fails when a duplicate Id arrives while it runs).
BUILD_ATTEMPTS = 5


def migrate(session: Session, queue: TableQueue, step: str) -> None:
    """Run one migration step (a finding's repair) on ``queue``."""
    if step == "migrate_primary_key":
        _unique_key(session, queue, "pkey", "migrate_build_id_index", "migrate_add_primary_key", dedupe=True)
    elif step == "migrate_seq_unique":
        _unique_key(session, queue, "seq_key", "migrate_build_seq_index", "migrate_add_seq_unique", dedupe=False)
        _drop_legacy_seq_index(session, queue)
    elif step == "migrate_delayed":
        session.run(lambda cur: _delayed(session, queue, cur), what=f"migrate the delayed store of {queue.name!r}")
    elif step == "migrate_unique_id":
        session.run(lambda cur: _sqlite_unique_id(session, queue, cur), what=f"migrate {queue.name!r}")
    else:
        raise ValueError(f"unknown migration step {step!r}")


def run_outside_transaction(session: Session, queue: TableQueue, statement: str, **extra: str) -> None:
    """Run a statement on an autocommit connection (CONCURRENTLY and VACUUM cannot run in a transaction)."""
    with session.connection() as conn:
        conn.autocommit = True
        try:
            cur = conn.cursor()
            try:
                session.dialect.execute(cur, statement, None, **{**queue.ids, **extra})
            finally:
                cur.close()
        finally:
            conn.autocommit = False


def _unique_key(session: Session, queue: TableQueue, kind: str, build: str, attach: str, dedupe: bool) -> None:
    """Build a unique index concurrently (again after an interrupted or failed build), then attach it."""
    dialect = session.dialect
    schema = queue.address.schema or dialect.default_schema
    name = dialect.index_name(queue.address, kind)
    qualified = dialect.quote(schema) + "." + dialect.quote(name)
    for attempt in range(1, BUILD_ATTEMPTS + 2):
        found = session.run(lambda cur: dialect.relation(cur, schema, name), what="migration", read_only=True)
        if found is not None:
            if found[0] != "i" or found[1] != queue.address.table:
                raise NameCollisionError(
                    f"migrating {queue.name!r} needs the index name {name!r}, which is taken by another object "
                    f"({found[0]} {found[1] or ''}); rename or drop it, then run check --repair again")
            if found[2]:
                break
            log.warning("dropping the invalid index %s left by an interrupted build", qualified)
            run_outside_transaction(session, queue, "migrate_drop_index", index=qualified)
        if attempt > BUILD_ATTEMPTS:
            raise RuntimeError(f"migrating {queue.name!r}: the {kind} index could not be built in "
                               f"{BUILD_ATTEMPTS} attempts (duplicate Ids keep arriving?)")
        if dedupe:
            renamed = session.run(lambda cur: dialect.execute(cur, "migrate_dedupe_ids", None, **queue.ids).rowcount,
                                  what=f"migrate {queue.name!r}")
            if renamed and renamed > 0:
                log.warning("%s: %d rows held an Id another row held; they got new Ids", queue.name, renamed)
        try:
            run_outside_transaction(session, queue, build)
        except Exception as exc:
            if not dialect.is_unique_violation(exc):
                raise
            log.warning("%s: a duplicate Id arrived during the index build; trying again", queue.name)
    session.run(lambda cur: dialect.execute(cur, attach, None, **queue.ids), what=f"migrate {queue.name!r}")


def _drop_legacy_seq_index(session: Session, queue: TableQueue) -> None:
    """Drop the 0.1 index on seq, which the unique constraint replaces (only when it is an index of this table)."""
    dialect = session.dialect
    schema = queue.address.schema or dialect.default_schema
    name = dialect.index_name(queue.address, "seq")
    found = session.run(lambda cur: dialect.relation(cur, schema, name), what="migration", read_only=True)
    if found is not None and found[0] == "i" and found[1] == queue.address.table:
        run_outside_transaction(session, queue, "migrate_drop_index",
                                index=dialect.quote(schema) + "." + dialect.quote(name))


def _delayed(session: Session, queue: TableQueue, cur: Any) -> None:
    """Rewrite a 0.1 PostgreSQL delayed store to upstream's shape, in the caller's transaction, under a lock."""
    dialect = session.dialect
    ids = dialect.migration_identifiers(queue.address)
    delayed = dialect.delayed_address(queue.address)
    schema = delayed.schema or dialect.default_schema
    where = {"schema_name": schema, "table_name": delayed.table}
    dialect.execute(cur, "migrate_delayed_lock", None, **ids)
    columns = {name: data_type for name, data_type, _ in dialect.execute(cur, "list_columns", where)}
    if "id" not in columns:
        dialect.execute(cur, "migrate_delayed_add_id", None, **ids)
    if not any(row[5] and row[1] == "id" for row in dialect.execute(cur, "list_indexes", where).fetchall()):
        dialect.execute(cur, "migrate_delayed_primary_key", None, **ids)
    if columns.get("due") != "timestamp with time zone":
        dialect.execute(cur, "migrate_delayed_due_type", None, **ids)
    if "seq" in columns:
        dialect.execute(cur, "migrate_delayed_drop_seq", None, **ids)
    dialect.execute(cur, "migrate_delayed_fillfactor", None, **ids)
    taken = [t for t in dialect.taken_names(cur, queue.address, True) if t[0] == "due"]
    if taken:
        raise NameCollisionError(f"migrating the delayed store of {queue.name!r} needs the index name "
                                 f"{taken[0][1]!r}, which is taken by {taken[0][2]}; nothing was changed")
    dialect.execute(cur, "create_delayed_due_index", None, **ids)
    legacy = dialect.relation(cur, schema, dialect.index_name(queue.address, "legacy_due"))
    if legacy is not None and legacy[0] == "i" and legacy[1] == delayed.table:
        dialect.execute(cur, "migrate_delayed_drop_old_due_index", None, **ids)


def _sqlite_unique_id(session: Session, queue: TableQueue, cur: Any) -> None:
    """Give duplicated Ids new ones and add the unique index on id, in one transaction (SQLite)."""
    dialect = session.dialect
    found = dialect.not_a_queue(cur, queue.address)
    if found is not None:
        raise NotAQueueError(found)
    name = dialect.index_name(queue.address, "id")
    holder = dialect.object_named(cur, name)
    if holder is not None and not (holder[0] == "index" and holder[1] == queue.address.table):
        raise NameCollisionError(f"migrating {queue.name!r} needs the index name {name!r}, which is taken by the "
                                 f"{holder[0]} {name!r}; rename or drop it, then run check --repair again")
    renamed = dialect.execute(cur, "migrate_dedupe_ids", None, **queue.ids).rowcount
    if renamed and renamed > 0:
        log.warning("%s: %d rows held an Id another row held; they got new Ids", queue.name, renamed)
    dialect.execute(cur, "migrate_unique_id", None, **queue.ids)
