"""Bounded-memory claim-latency percentiles over a rolling window (HDR-style buckets, 3 significant figures)."""

from __future__ import annotations

import threading
import time

#: Values below this many microseconds are kept exactly; above, each power of two is split into SUB_BUCKETS/2
#: buckets: a relative error under 1/1024 (3 significant figures), at most ~18,000 buckets up to a day.
SUB_BUCKETS = 2048


def bucket_of(micros: int) -> int:
    """The bucket key of a latency in microseconds."""
    if micros < SUB_BUCKETS:
        return max(0, micros)
    shift = micros.bit_length() - SUB_BUCKETS.bit_length() + 1
    return shift * SUB_BUCKETS + (micros >> shift)


def value_of(key: int) -> float:
    """The middle of a bucket, in microseconds."""
    shift, mantissa = divmod(key, SUB_BUCKETS)
    if shift == 0:
        return float(mantissa)
    return float((mantissa << shift) + (1 << (shift - 1)))


class RollingHistogram:
    """Latencies of the last ``window_s`` seconds in one sparse histogram per second: memory is bounded by the
    bucket count times the window, whatever the rate. Thread-safe."""

    def __init__(self, window_s: int = 30) -> None:
        self.window_s = window_s
        self._slots: list[tuple[int, dict[int, int]]] = [(-1, {}) for _ in range(window_s)]
        self._lock = threading.Lock()

    def record(self, latency_ms: float, now: float | None = None) -> None:
        """Add one latency (milliseconds)."""
        second = int(time.monotonic() if now is None else now)
        key = bucket_of(int(latency_ms * 1000.0))
        index = second % self.window_s
        with self._lock:
            stamp, counts = self._slots[index]
            if stamp != second:
                counts = {}
                self._slots[index] = (second, counts)
            counts[key] = counts.get(key, 0) + 1

    def percentiles(self, quantiles: tuple[float, ...], now: float | None = None) -> list[float]:
        """The quantiles (0..1) of the window, in milliseconds (0.0 each when the window is empty)."""
        second = int(time.monotonic() if now is None else now)
        merged: dict[int, int] = {}
        with self._lock:
            for stamp, counts in self._slots:
                if second - self.window_s < stamp <= second:
                    for key, count in counts.items():
                        merged[key] = merged.get(key, 0) + count
        total = sum(merged.values())
        if not total:
            return [0.0 for _ in quantiles]
        keys = sorted(merged)
        out: list[float] = []
        for q in quantiles:
            rank = max(1, int(q * total + 0.999999))  # the smallest value with at least q of the samples at or below
            seen = 0
            for key in keys:
                seen += merged[key]
                if seen >= rank:
                    out.append(round(value_of(key) / 1000.0, 3))
                    break
        return out
