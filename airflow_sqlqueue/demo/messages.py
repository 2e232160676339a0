"""The demo's traffic: NServiceBus-shaped messages of a few types, some short-lived, some poison."""

from __future__ import annotations

import json
import random
import uuid
from collections import Counter
from dataclasses import dataclass, field

from airflow_sqlqueue.transport import OutgoingMessage, SqlQueueTransport
from airflow_sqlqueue.transport.wire import headers as h

#: (message type, originating endpoint, intent, share of the regular messages)
TYPES = (
    ("Sales.Messages.Events.OrderPlaced", "Sales", "Publish", 0.40),
    ("Billing.Messages.Events.OrderBilled", "Billing", "Publish", 0.30),
    ("Shipping.Messages.Commands.ShipOrder", "Sales", "Send", 0.20),
    ("Billing.Messages.Events.InvoiceRendered", "Billing", "Publish", 0.10),  # binary (PDF-like) bodies
)
#: The short-lived type: sent with a time-to-be-received of EXPIRING_TTBR seconds.
EXPIRING_TYPE = ("Sales.Messages.Events.PriceQuoted", "Sales", "Publish")
EXPIRING_TTBR = 1.0
EXPIRING_SHARE = 0.05
POISON_SHARE = 0.01
POISON_HEADERS = "{NServiceBus.MessageId: not json"


@dataclass
class Traffic:
    """What the demo sent, counted as it was sent."""

    total: int = 0
    regular: int = 0
    expiring: int = 0
    poison: int = 0
    by_type: Counter = field(default_factory=Counter)


def enclosed(type_name: str) -> str:
    """``EnclosedMessageTypes`` as NServiceBus writes it: assembly-qualified, the type then its interfaces."""
    assembly = type_name.split(".Messages.")[0] + ".Messages"
    qualified = f"{type_name}, {assembly}, Version=1.0.0.0, Culture=neutral, PublicKeyToken=null"
    return f"{qualified};NServiceBus.IMessage, NServiceBus.Core, Version=9.0.0.0, Culture=neutral, " \
           "PublicKeyToken=9fc386479f8a226c"


def make_message(kind: tuple[str, str, str], order: int, rng: random.Random, *,
                 ttbr: float | None = None) -> OutgoingMessage:
    """One message with the headers an NServiceBus endpoint writes, and a JSON (or binary) body."""
    type_name, endpoint, intent = kind
    headers = {
        h.MESSAGE_ID: str(uuid.uuid4()),
        h.ENCLOSED_MESSAGE_TYPES: enclosed(type_name),
        h.CONVERSATION_ID: str(uuid.UUID(int=order + 1)),  # every message about one order: one conversation
        h.CORRELATION_ID: str(uuid.uuid4()),
        h.ORIGINATING_ENDPOINT: endpoint,
        h.MESSAGE_INTENT: intent,
        h.TIME_SENT: h.format_wire_time(),
        h.CONTENT_TYPE: "application/json",
    }
    if type_name.endswith("InvoiceRendered"):
        headers[h.CONTENT_TYPE] = "application/pdf"
        body = b"%PDF-1.7\n\xe2\xe3\xcf\xd3\n" + rng.randbytes(64)
    else:
        body = json.dumps({"OrderId": f"ORD-{order:06d}", "CustomerId": f"C-{rng.randrange(1000):04d}",
                           "Amount": round(rng.uniform(5, 500), 2), "Currency": "EUR"}).encode()
    if ttbr is not None:
        headers[h.TIME_TO_BE_RECEIVED] = f"00:00:{int(ttbr):02d}"
    return OutgoingMessage(body=body, headers=headers, time_to_be_received=ttbr)


def plan(total: int) -> tuple[int, int, int]:
    """``(regular, expiring, poison)`` counts adding up to ``total`` (at least one of each from 3 messages)."""
    expiring = max(1, round(total * EXPIRING_SHARE)) if total >= 3 else 0
    poison = max(1, round(total * POISON_SHARE)) if total >= 3 else 0
    return total - expiring - poison, expiring, poison


def send_expiring(transport: SqlQueueTransport, queue: str, count: int, traffic: Traffic, rng: random.Random) -> None:
    """Short-lived messages (time-to-be-received ``EXPIRING_TTBR`` s), in one batch."""
    transport.send_many(queue, [make_message(EXPIRING_TYPE, i, rng, ttbr=EXPIRING_TTBR) for i in range(count)])
    traffic.expiring += count
    traffic.by_type[EXPIRING_TYPE[0]] += count
    traffic.total += count


def send_regular(transport: SqlQueueTransport, queue: str, count: int, traffic: Traffic, rng: random.Random, *,
                 first_order: int = 0, chunk: int = 1000) -> None:
    """Regular messages of ``TYPES`` (by their shares) about orders from ``first_order`` on, in batches."""
    kinds = [t[:3] for t in TYPES]
    weights = [t[3] for t in TYPES]
    for start in range(first_order, first_order + count, chunk):
        batch = []
        for order in range(start, min(start + chunk, first_order + count)):
            kind = rng.choices(kinds, weights)[0]
            batch.append(make_message(kind, order, rng))
            traffic.by_type[kind[0]] += 1
        transport.send_many(queue, batch)
        traffic.regular += len(batch)
        traffic.total += len(batch)


def insert_poison(transport: SqlQueueTransport, queue: str, count: int, traffic: Traffic) -> None:
    """Rows whose headers are not JSON (as a broken sender would write), through the ``insert_raw`` statement."""
    dialect = transport.dialect
    identifiers = dialect.identifiers(transport.address(queue))

    def work(cursor: object) -> None:
        for _ in range(count):
            dialect.execute(cursor, "insert_raw", {"id": dialect.id_param(uuid.uuid4()), "headers": POISON_HEADERS,
                                                   "body": b'{"broken": true}'}, **identifiers)

    transport.run(work, what=f"insert poison rows into {queue!r}")
    traffic.poison += count
    traffic.total += count
