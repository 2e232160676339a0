"""A million failed messages in a PostgreSQL error queue, made by one INSERT ... SELECT generate_series (about a
minute on a 2-core VM): 9 exception types, 5 failing queues, 7 message types, NServiceBus-shaped headers (about
1.2 KB with a stack trace) and a small JSON body; plus one group of 10 messages at the start (a rare group)."""

from __future__ import annotations

from typing import Any

EXCEPTIONS = ["System.TimeoutException", "System.InvalidOperationException", "System.ArgumentException",
              "System.NullReferenceException", "System.Data.SqlClient.SqlException", "System.IO.IOException",
              "Sales.OrderRejectedException", "Billing.LedgerClosedException", "System.FormatException"]
RARE = "Rare.OnlyTenException"


def seed_failed(cursor: Any, schema: str, error: str, queues: list[str], n: int) -> None:
    """``n`` failed messages into ``"schema"."error"`` (a queue table that exists), FailedQ one of ``queues``
    (wire addresses), the first ten of exception type ``RARE``."""
    cursor.execute(f"""
        INSERT INTO "{schema}"."{error}" (id, expires, headers, body)
        SELECT gen_random_uuid(), NULL,
               '{{"NServiceBus.MessageId":"' || md5(g::text) || '","NServiceBus.ConversationId":"' || md5((g / 3)::text)
               || '","NServiceBus.ContentType":"application\\/json","NServiceBus.EnclosedMessageTypes":"Sales.Message'
               || mod(g, 7) || ', Sales, Version=1.0.0.0","NServiceBus.FailedQ":"'
               || replace((%(queues)s::text[])[1 + mod(g, %(nq)s)], '"', '\\"')
               || '","NServiceBus.ExceptionInfo.ExceptionType":"'
               || CASE WHEN g <= 10 THEN %(rare)s ELSE (%(exceptions)s::text[])[1 + mod(g, 9)] END
               || '","NServiceBus.ExceptionInfo.Message":"failure number ' || g
               || '","NServiceBus.ExceptionInfo.StackTrace":"' || repeat('   at Sales.Handler.Handle(Message m) in '
               || 'C:\\\\src\\\\Sales\\\\Handler.cs:line 42\\r\\n', 12)
               || '","NServiceBus.TimeOfFailure":"'
               || to_char(timestamp '2026-11-01' + g * interval '1 second', 'YYYY-MM-DD HH24:MI:SS:US') || ' Z'
               || '","NServiceBus.ProcessingEndpoint":"Sales","NServiceBus.ProcessingMachine":"web-0' || mod(g, 4)
               || '"}}',
               convert_to('{{"order": ' || g || ', "city": "Zürich"}}', 'UTF8')
        FROM generate_series(1, %(n)s) AS g
    """, {"queues": queues, "nq": len(queues), "rare": RARE, "exceptions": EXCEPTIONS, "n": n})  # noqa: S608
