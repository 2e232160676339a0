"""Code that runs in child processes of the reliability suite (kept free of pytest so that spawn is quick)."""

from __future__ import annotations

import json
import logging
import random
import threading
from collections import Counter

from airflow_sqlqueue.transport import SqlQueueTransport

#: Every message whose number is a multiple of this always fails (it must end in the error queue).
ALWAYS_FAILS_EVERY = 97


class InjectedFailure(Exception):
    """The failure a test handler raises on purpose."""


def should_fail(body: bytes, attempt: int, rate: float, seed: int) -> bool:
    """Deterministic failure decision for one attempt of one message."""
    if rate <= 0:
        return False
    if int(body.split(b"-")[1]) % ALWAYS_FAILS_EVERY == 0:
        return True
    return random.Random(f"{seed}:{body!r}:{attempt}").random() < rate


class CountingHandler:
    """Handler that records every attempt, sends one reply per attempt, and fails when told to."""

    def __init__(self, replies: str | None, rate: float, seed: int) -> None:
        self.replies = replies
        self.rate = rate
        self.seed = seed
        self.lock = threading.Lock()
        self.attempts: Counter[bytes] = Counter()
        self.succeeded: list[bytes] = []
        self.failures = 0
        self.threads: set[str] = set()  # receiver threads that handled something (proves they competed)

    def __call__(self, message, context) -> None:
        with self.lock:
            self.attempts[message.body] += 1
            attempt = self.attempts[message.body]
            self.threads.add(threading.current_thread().name)
        if self.replies is not None:
            context.send(self.replies, b"reply-" + message.body)
        if should_fail(message.body, attempt, self.rate, self.seed):
            with self.lock:
                self.failures += 1
            raise InjectedFailure(f"injected failure of {message.body!r} (attempt {attempt})")
        with self.lock:
            self.succeeded.append(message.body)


def process_in_child(url: str, queue: str, error_queue: str, replies: str | None, mode: str, rate: float,
                     seed: int, threads: int, retries: int, out_path: str, ready, start) -> None:
    """One competing consumer process: process the queue until empty, write what it saw to ``out_path``."""
    logging.getLogger("airflow_sqlqueue").addHandler(logging.NullHandler())  # the parent counts, no stderr noise
    transport = SqlQueueTransport.from_url(url, error_queue=error_queue)
    result: dict = {}
    try:
        transport.peek(queue)  # connected before the start signal
        ready.release()
        start.wait(120)
        handler = CountingHandler(replies, rate, seed)
        summary = transport.process(queue, handler, mode=mode, concurrency=threads, batch_size=25,
                                    immediate_retries=retries)
        result = {"ok": True, "succeeded": [b.decode() for b in handler.succeeded],
                  "attempts": {b.decode(): n for b, n in handler.attempts.items()},
                  "failures": handler.failures, "summary": summary.as_dict()}
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        result = {"ok": False, "error": repr(exc)}
    finally:
        transport.close()
        with open(out_path, "w", encoding="utf-8") as out:
            json.dump(result, out)
