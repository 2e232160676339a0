"""What the wake-up trigger costs PostgreSQL a send: server time per committed one-row INSERT, no client in it.

``python -m bench.trigger_cost [--rounds 12] [--inserts 10000] [--pg-url URL]``

One backend runs ``--inserts`` one-row INSERTs in a ``DO`` block, each committed on its own (``COMMIT`` in the
loop, ``synchronous_commit = off`` so that the WAL flush does not hide the CPU), into each of six queues made by
the provider, taking turns round by round (order reversed every other round): no trigger; the wake-up trigger as
installed (``AFTER INSERT ... FOR EACH STATEMENT``, nobody waiting: a shared take of the wake-up lock); the same
function fired ``BEFORE INSERT``; the same with the lock's test in the trigger's ``WHEN`` clause (no plpgsql call
while nobody waits); an empty plpgsql trigger, ``AFTER`` and ``BEFORE`` (what calling a plpgsql trigger costs).
Reported: microseconds per INSERT and commit (median of the rounds) and, round by round, each set-up minus no
trigger (median): the trigger's own cost a send, in server time.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid

from .databases import DEFAULT_PG_URL

#: set-up: (table, (timing, function, with the wake-up lock's test in a WHEN clause) or None: no trigger)
SETUPS = {"no trigger": ("plain", None), "wake-up trigger, AFTER": ("after", ("AFTER", "sqlqueue_wake", False)),
          "wake-up trigger, BEFORE": ("before", ("BEFORE", "sqlqueue_wake", False)),
          "wake-up lock in WHEN, AFTER": ("when_after", ("AFTER", "sqlqueue_wake", True)),
          "empty trigger, AFTER": ("empty_after", ("AFTER", "empty_wake", False)),
          "empty trigger, BEFORE": ("empty_before", ("BEFORE", "empty_wake", False))}
#: The wake-up lock's key (``create_wake_function`` in the PostgreSQL ``.sql``), for the WHEN set-up.
WAKE_LOCK_KEY = 1644256948
LOOP = '''DO $$ BEGIN FOR i IN 1..{n} LOOP
INSERT INTO "{schema}"."{table}" (id, headers, body) VALUES (gen_random_uuid(), '{{}}', '\\x7b7d'); COMMIT;
END LOOP; END $$'''


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.trigger_cost", description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--inserts", type=int, default=10000)
    parser.add_argument("--pg-url", default=DEFAULT_PG_URL)
    args = parser.parse_args(argv)

    import psycopg

    from airflow_sqlqueue.transport import SqlQueueTransport

    schema = "bench_trigger_" + uuid.uuid4().hex[:8]
    with psycopg.connect(args.pg_url, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
        try:
            transport = SqlQueueTransport.from_url(args.pg_url, error_queue=f'"{schema}"."error"')
            try:
                for table, _ in SETUPS.values():
                    transport.create_queue(f'"{schema}"."{table}"', notify=table == "after")
            finally:
                transport.close()
            conn.execute(f'CREATE FUNCTION "{schema}".empty_wake() RETURNS trigger LANGUAGE plpgsql '
                         'AS $f$ BEGIN RETURN NULL; END $f$')
            for table, trigger in SETUPS.values():
                if trigger:
                    timing, function, in_when = trigger
                    conn.execute(f'DROP TRIGGER IF EXISTS "{table}_notify" ON "{schema}"."{table}"')
                    when = (f"WHEN (NOT pg_try_advisory_xact_lock_shared({WAKE_LOCK_KEY}, "
                            f"'\"{schema}\".\"{table}\"'::regclass::oid::integer))" if in_when else "")
                    conn.execute(f'CREATE TRIGGER "{table}_notify" {timing} INSERT ON "{schema}"."{table}" '
                                 f'FOR EACH STATEMENT {when} EXECUTE FUNCTION "{schema}".{function}()')
            conn.execute("SET synchronous_commit = off")
            per_insert: dict[str, list[float]] = {setup: [] for setup in SETUPS}
            for round_no in range(args.rounds):
                order = list(SETUPS) if round_no % 2 == 0 else list(reversed(SETUPS))
                for setup in order:
                    table = SETUPS[setup][0]
                    conn.execute(f'TRUNCATE "{schema}"."{table}"')
                    began = time.perf_counter()
                    conn.execute(LOOP.format(n=args.inserts, schema=schema, table=table))
                    per_insert[setup].append((time.perf_counter() - began) / args.inserts * 1e6)
            print(f"{args.rounds} rounds of {args.inserts} committed one-row INSERTs (one backend, "
                  "synchronous_commit off)")
            print("set-up | us per INSERT and commit (median) | minus no trigger, round by round (median)")
            plain = per_insert["no trigger"]
            for setup, values in per_insert.items():
                extra = statistics.median(v - p for v, p in zip(values, plain, strict=True))
                print(f"{setup} | {statistics.median(values):.2f} | {extra:+.2f}")
        finally:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


if __name__ == "__main__":
    main()
