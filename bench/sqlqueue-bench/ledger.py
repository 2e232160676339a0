"""Which messages this process sent and handled: one bit per sequence number, for exact lost/duplicate counts."""

from __future__ import annotations

import os
import threading

CHUNK = 1 << 16  # bytes the bitmaps grow by (524,288 messages); a million messages cost 125 KB per bitmap


class Ledger:
    """Bits of messages sent (confirmed stored), sent with an unknown outcome, and handled, by sequence number.
    A handled message seen again is a duplicate delivery. Thread-safe."""

    def __init__(self, journal: str | None = None) -> None:
        #: with ``journal`` (a file path) every event is also appended there, one line each, written before the
        #: receive commits: it survives a SIGKILL, so ``ledger_check.py`` can count across killed processes
        self._journal = os.open(journal, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644) if journal else None
        self._sent = bytearray()
        self._unknown = bytearray()
        self._handled = bytearray()
        self.duplicates = 0
        self._lock = threading.Lock()

    @staticmethod
    def _grow(bits: bytearray, seq: int) -> None:
        need = seq // 8 + 1
        if need > len(bits):
            bits.extend(bytes(max(CHUNK, need - len(bits))))

    def _set(self, bits: bytearray, seq: int) -> bool:
        self._grow(bits, seq)
        byte, mask = seq // 8, 1 << (seq % 8)
        was = bool(bits[byte] & mask)
        bits[byte] |= mask
        return was

    def _write(self, line: str) -> None:
        if self._journal is not None:
            os.write(self._journal, line.encode())

    def sent(self, first: int, n: int, *, unknown: bool = False, origin: str = "") -> None:
        self._write(f"{'u' if unknown else 's'} {origin} {first} {n}\n")
        with self._lock:
            for seq in range(first, first + n):
                self._set(self._unknown if unknown else self._sent, seq)

    def handled(self, seq: int, origin: str = "") -> None:
        self._write(f"h {origin} {seq}\n")
        with self._lock:
            if self._set(self._handled, seq):
                self.duplicates += 1

    @property
    def journaling(self) -> bool:
        return self._journal is not None

    def handled_elsewhere(self, seq: int, origin: str) -> None:
        """A message another process sent: journaled only."""
        self._write(f"h {origin} {seq}\n")

    def report(self) -> dict[str, int]:
        """Counts: confirmed, unknown outcome, handled (distinct), duplicates, confirmed but never handled."""
        with self._lock:
            size = max(len(self._sent), len(self._unknown), len(self._handled))
            sent, unknown, handled = (int.from_bytes(bytes(b) + bytes(size - len(b)), "little")
                                      for b in (self._sent, self._unknown, self._handled))
            return {"confirmed": sent.bit_count(), "unknown_outcome": unknown.bit_count(),
                    "handled": handled.bit_count(), "duplicates": self.duplicates,
                    "confirmed_not_handled": (sent & ~handled).bit_count(),
                    "unknown_outcome_handled": (unknown & handled).bit_count()}
