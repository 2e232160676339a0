"""Native message Ids: time-ordered UUIDs (the UUIDv7 layout of RFC 9562).

A random UUIDv4 lands anywhere in an index on Id, so every insert touches a random page of PostgreSQL's primary
key (and of any index on Id in SQL Server): on a long queue that is a page read and a dirtied page per message.
A UUIDv7 starts with the Unix time in milliseconds, so consecutive sends append to the right edge of the index.
It is still a valid, unique UUID for every reader (.NET's Guid, Npgsql's uuid, SQLite text): only its order
changes. Within one millisecond the 74 random bits keep Ids unique.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator

_UUID = uuid.UUID
_time_ns = time.time_ns
_urandom = os.urandom
_VERSION_7 = 0x7 << 76
_VARIANT = 0b10 << 62
_RAND_A = (1 << 12) - 1
_RAND_B = (1 << 62) - 1


_BLOCK = 256
_new_object = object.__new__
_set_slot = object.__setattr__
_UNKNOWN = uuid.SafeUUID.unknown


def new_id() -> uuid.UUID:
    """A new time-ordered UUID (version 7): 48 bits of Unix milliseconds, then 74 random bits."""
    rand = int.from_bytes(_urandom(10), "big")
    made = _new_object(_UUID)  # what UUID(int=value) does, without re-checking a value built in range
    _set_slot(made, "int", (_time_ns() // 1_000_000) << 80 | _VERSION_7 | ((rand >> 64) & _RAND_A) << 64 | _VARIANT
              | (rand & _RAND_B))
    _set_slot(made, "is_safe", _UNKNOWN)
    return made


def id_stream() -> Iterator[uuid.UUID]:
    """New Ids for a batch, as :func:`new_id` makes them, drawn in blocks (1, 2, 4, ... up to 256 Ids): one clock
    reading and one ``urandom`` call a block (a block's Ids share their millisecond; their 74 random bits keep them
    unique). A send of one message draws one Id's worth of randomness."""
    block = 1
    while True:
        millis = (_time_ns() // 1_000_000) << 80 | _VERSION_7 | _VARIANT
        rand = _urandom(10 * block)
        for offset in range(0, 10 * block, 10):
            bits = int.from_bytes(rand[offset:offset + 10], "big")
            value = millis | ((bits >> 64) & _RAND_A) << 64 | (bits & _RAND_B)
            made = _new_object(_UUID)  # what UUID(int=value) does, without re-checking a value built in range
            _set_slot(made, "int", value)
            _set_slot(made, "is_safe", _UNKNOWN)
            yield made
        block = min(block * 2, _BLOCK)
