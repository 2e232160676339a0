"""Database outage while draining: connections terminated under the receivers, and the circuit breaker.

The PostgreSQL server is shared with other engineers, so it is never restarted here: the outage is
``pg_terminate_backend`` of this test's own backends (found by a unique ``application_name``), several times
while a drain runs, and for a restart also refusing every new connection for a moment (the connect function
points at a closed port). The breaker's timing (arm at the first failure, 1 s back-off while armed, critical after
30 s, 10 s back-off once triggered) is checked with an injected clock.
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections import Counter

import psycopg
import pytest

from airflow_sqlqueue.transport import CircuitBreakerOpenError, SqlQueueTransport, TransactionMode
from airflow_sqlqueue.transport.dialects import get_dialect
from airflow_sqlqueue.transport.dialects.connect import guard_connect
from airflow_sqlqueue.transport.processing.receivers import ReceiverLoop
from airflow_sqlqueue.transport.tables.circuit_breaker import CircuitBreaker
from airflow_sqlqueue.transport.tables.session import RetryPolicy

from .helpers import (
    MESSAGES,
    SEED,
    bodies,
    count,
    duplicates,
    fill,
    lost,
    summary,
    terminate,
    wait_gone,
    with_application_name,
)

OUTAGE_MESSAGES = max(MESSAGES // 2, 100)
TERMINATIONS = 5
CLOSED_PORT_URL = "postgresql://postgres@127.0.0.1:1/test?connect_timeout=2"


class StoringSink:
    """A drain sink that keeps the body of every message it is given (the outage tests' durable store)."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self._lock = threading.Lock()

    def __call__(self, messages) -> int:
        time.sleep(0.002)  # a store takes a moment: terminations land mid-batch
        with self._lock:
            self.bodies.extend(m.body for m in messages)
        return len(messages)


class RecordingBreaker(CircuitBreaker):
    """The real breaker, with a record of what it was told."""

    def __init__(self, name: str, **kwargs) -> None:
        super().__init__(name, **kwargs)
        self.seen_failures = 0
        self.delays: list[float] = []
        self.successes_after_failure = 0
        self._lock = threading.Lock()

    def failure(self, exc: BaseException) -> float:
        with self._lock:
            self.seen_failures += 1
            delay = super().failure(exc)
            self.delays.append(delay)
            return delay

    def success(self) -> None:
        with self._lock:
            if self.failures:
                self.successes_after_failure += 1
            super().success()


def _pg_only(db) -> None:
    if db.kind != "postgres":
        pytest.skip("backends to terminate: PostgreSQL")


def _outage(db, app: str, run, down: threading.Event | None = None,
            rounds_wanted: int = TERMINATIONS) -> tuple[threading.Thread, list[BaseException], int]:
    """Run ``run()`` in a thread and terminate this test's backends ``rounds_wanted`` times while it runs; with
    ``down``, new connections are also refused for a moment each time (what a restart looks like)."""
    errors: list[BaseException] = []

    def target() -> None:
        try:
            run()
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    thread = threading.Thread(target=target, name="outage-drain")
    thread.start()
    rng = random.Random(f"{SEED}:outage:{app}")
    terminated = 0
    rounds = 0
    while thread.is_alive() and rounds < rounds_wanted:
        time.sleep(rng.uniform(0.05, 0.25))
        if down is not None:
            down.set()
        terminated += terminate(db, app)
        if down is not None:
            time.sleep(rng.uniform(1.2, 1.5))  # "restarting", longer than the 1 s back-off: reconnects are refused
            down.clear()
        rounds += 1
    thread.join(180)
    assert not thread.is_alive(), "the drain did not finish"
    return thread, errors, terminated


def _outage_queue(queues) -> tuple[str, str, set[bytes]]:
    """PostgreSQL only: the application name of this test's connections (the ones terminated or refused), and
    ``orders`` filled with OUTAGE_MESSAGES (their bodies)."""
    _pg_only(queues)
    q = queues.q("orders")
    return "sqlqueue_outage_" + uuid.uuid4().hex[:10], q, fill(queues, q, OUTAGE_MESSAGES)


def _check_breaker_recovered(breaker, terminated: int) -> None:
    """Terminations hit the receivers, the breaker armed with its 1 s back-off, and disarmed without triggering."""
    assert terminated > 0 and breaker.seen_failures > 0, "no termination hit the drain"
    assert not breaker.triggered and breaker.successes_after_failure > 0, "the breaker did not disarm"
    assert set(breaker.delays) == {1.0}, "armed back-off is 1 s per failure"


def _through_outage(queues, app: str, t: SqlQueueTransport, run, sent: set[bytes], got: list[bytes]) -> tuple[int, set]:
    """``run()`` while this test's backends are terminated, then ``t`` closed and its connections gone: how many
    terminations, and what of ``sent`` is not in ``got`` (nothing may be)."""
    try:
        _, errors, terminated = _outage(queues, app, run)
        assert not errors, errors
    finally:
        t.close()
    wait_gone(queues, app)
    missing = lost(sent, got)
    assert not missing, f"{len(missing)} lost"
    return terminated, missing


def test_terminated_backends_while_processing(queues):
    app, q, sent = _outage_queue(queues)
    t = SqlQueueTransport.from_url(with_application_name(queues.url, app), error_queue=queues.q("error"))
    handled: list[bytes] = []
    lock = threading.Lock()

    def handler(message, context):
        context.send(queues.q("replies"), b"reply-" + message.body)
        time.sleep(0.0002)  # long enough for the terminations to land mid-drain
        with lock:
            handled.append(message.body)

    breaker = RecordingBreaker(t.name(q))
    pump = t.pump(q, handler, mode=TransactionMode.SENDS_ATOMIC_WITH_RECEIVE, batch_size=20,
                       concurrency=4, immediate_retries=0, breaker=breaker)
    terminated, missing = _through_outage(queues, app, t, pump.run, sent, handled)
    assert count(queues, "orders") == 0 and count(queues, "error") == 0
    # sends are atomic with the receive: a rolled-back batch took its replies with it, so exactly one each
    assert Counter(bodies(queues, "replies")) == Counter(b"reply-" + b for b in sent)
    _check_breaker_recovered(breaker, terminated)
    summary("terminate_backend[process]", queues.kind, messages=OUTAGE_MESSAGES, faults=terminated,
            lost=len(missing), breaker_failures=breaker.seen_failures, redelivered=len(duplicates(handled)))


def test_terminated_backends_while_draining(queues):
    app, q, sent = _outage_queue(queues)
    t = SqlQueueTransport.from_url(with_application_name(queues.url, app), error_queue=queues.q("error"))
    sink = StoringSink()
    stored = sink.bodies

    breaker = RecordingBreaker(t.name(q))

    def run():
        t.drain(q, sink, max_messages=None, max_duration=None, batch_size=20, concurrency=4,
              breaker=breaker)

    terminated, missing = _through_outage(queues, app, t, run, sent, stored)
    assert count(queues, "orders") == 0  # one run drained everything: the receivers reconnected each time
    _check_breaker_recovered(breaker, terminated)
    summary("terminate_backend[drain]", queues.kind, messages=OUTAGE_MESSAGES, faults=terminated,
            lost=len(missing), breaker_failures=breaker.seen_failures, redelivered=len(stored) - len(set(stored)))


def test_restart_while_draining(queues):
    """The closest thing to a restart on a shared server: this test's backends are terminated and, for a moment,
    every new connection is refused; the receivers back off 1 s per failure and carry on, nothing is lost."""
    app, q, sent = _outage_queue(queues)
    down = threading.Event()
    refused = Counter()

    def connect():
        if down.is_set():
            refused["attempts"] += 1
            return psycopg.connect(CLOSED_PORT_URL)  # refused, as while PostgreSQL restarts
        return psycopg.connect(with_application_name(queues.url, app), autocommit=False)

    t = SqlQueueTransport(guard_connect(connect, "the test server", None), "postgres", error_queue=queues.q("error"))
    sink = StoringSink()
    stored = sink.bodies

    breaker = RecordingBreaker(t.name(q))
    try:
        _, errors, terminated = _outage(queues, app, lambda: t.drain(
            q, sink, max_messages=None, max_duration=None, batch_size=20, concurrency=4,
            breaker=breaker), down=down, rounds_wanted=2)
        assert not errors, errors
    finally:
        t.close()
    wait_gone(queues, app)
    missing = lost(sent, stored)
    assert not missing, f"{len(missing)} lost"
    assert count(queues, "orders") == 0
    assert refused["attempts"] > 0, "no connection attempt fell in a restart window"
    assert not breaker.triggered and breaker.successes_after_failure > 0, "the breaker did not disarm"
    assert set(breaker.delays) == {1.0}, "armed back-off is 1 s per failure"
    summary("restart_window[drain]", queues.kind, messages=OUTAGE_MESSAGES, faults=terminated + refused["attempts"],
            lost=len(missing), terminated=terminated, refused_connects=refused["attempts"],
            breaker_failures=breaker.seen_failures, redelivered=len(stored) - len(set(stored)))


# -- circuit breaker timing with an injected clock ----------------------------------------------------------
class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _fake_sleep(monkeypatch, clock: Clock) -> list[float]:
    """Make the receive loop's sleeps advance ``clock`` instead of waiting; return what it slept."""
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        clock.now += seconds

    monkeypatch.setattr("airflow_sqlqueue.transport.processing.receivers.time.sleep", sleep)
    return slept


def test_breaker_arms_backs_off_and_triggers_after_30s():
    clock = Clock()
    breaker = CircuitBreaker("q", clock=clock)
    boom = ConnectionError("down")
    assert breaker.failure(boom) == 1.0  # armed at the first failure
    for _ in range(29):
        clock.now += 1.0
        assert breaker.failure(boom) == 1.0
    clock.now += 0.999  # 29.999 s after arming: still armed
    assert breaker.failure(boom) == 1.0 and not breaker.triggered
    clock.now += 0.001
    with pytest.raises(CircuitBreakerOpenError, match="failed for 30 s") as info:
        breaker.failure(boom)
    assert info.value.__cause__ is boom and breaker.triggered


def test_breaker_on_critical_called_once_then_10s_backoff_and_disarm():
    clock = Clock()
    critical: list[BaseException] = []
    breaker = CircuitBreaker("q", clock=clock, on_critical=critical.append)
    boom = ConnectionError("down")
    breaker.failure(boom)
    clock.now += 30
    assert breaker.failure(boom) == 10.0 and critical == [boom]
    clock.now += 10
    assert breaker.failure(boom) == 10.0 and len(critical) == 1  # called once, not per failure
    breaker.success()
    assert not breaker.triggered and breaker.failures == 0
    clock.now += 100
    assert breaker.failure(boom) == 1.0  # re-armed from now: the old outage does not count
    clock.now += 29
    assert breaker.failure(boom) == 1.0 and len(critical) == 1


def test_receive_loop_sleeps_the_breaker_delays_then_raises(monkeypatch):
    clock = Clock()
    slept = _fake_sleep(monkeypatch, clock)
    breaker = CircuitBreaker("q", clock=clock)
    loop = ReceiverLoop(RetryPolicy(get_dialect("postgres"), breaker=breaker), batch_size=10, concurrency=1)

    def one_batch(n: int) -> tuple[int, int]:
        raise psycopg.OperationalError("server closed the connection unexpectedly")

    with pytest.raises(CircuitBreakerOpenError):
        loop.run(one_batch)
    assert slept == [1.0] * 30  # 1 s per failure while armed; the 31st failure, at 30 s, is critical


def test_receive_loop_recovers_when_the_database_returns(monkeypatch):
    clock = Clock()
    slept = _fake_sleep(monkeypatch, clock)
    breaker = CircuitBreaker("q", clock=clock)
    loop = ReceiverLoop(RetryPolicy(get_dialect("postgres"), breaker=breaker), batch_size=10, concurrency=1)
    outcomes = iter([psycopg.OperationalError("down")] * 12 + [(10, 10), (5, 5), (0, 0)])

    def one_batch(n: int) -> tuple[int, int]:
        outcome = next(outcomes)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    assert loop.run(one_batch) == 15
    assert slept == [1.0] * 12 and breaker.failures == 0 and not breaker.triggered


# -- the server refusing connections (what a restart looks like) ---------------------------------------------
def test_refused_connections_back_off_until_the_breaker_triggers(monkeypatch):
    """A server that refuses connections (a restart): 1 s back-off per attempt, critical error at 30 s."""
    clock = Clock()
    slept = _fake_sleep(monkeypatch, clock)
    transport = SqlQueueTransport.from_url(CLOSED_PORT_URL)
    breaker = CircuitBreaker(transport.name("orders"), clock=clock)
    pump = transport.pump("orders", lambda m, c: None, mode=TransactionMode.RECEIVE_ONLY,
                       breaker=breaker)
    with pytest.raises(CircuitBreakerOpenError, match="failed for 30 s") as info:
        pump.run()
    assert slept == [1.0] * 30 and breaker.failures == 31
    assert "cannot connect" in str(info.value.__cause__)


def test_refused_connections_with_on_critical_back_off_10s_once_triggered(monkeypatch):
    clock = Clock()
    slept = _fake_sleep(monkeypatch, clock)
    transport = SqlQueueTransport.from_url(CLOSED_PORT_URL)
    critical: list[BaseException] = []
    breaker = CircuitBreaker(transport.name("orders"), clock=clock, on_critical=critical.append)
    original = breaker.failure

    def failure(exc: BaseException) -> float:  # the loop would retry forever: stop it after three 10 s waits
        if len(slept) >= 33:
            raise CircuitBreakerOpenError("the test stops here")
        return original(exc)

    breaker.failure = failure
    pump = transport.pump("orders", lambda m, c: None, mode=TransactionMode.RECEIVE_ONLY,
                       breaker=breaker)
    with pytest.raises(CircuitBreakerOpenError, match="the test stops here"):
        pump.run()
    assert slept == [1.0] * 30 + [10.0] * 3 and len(critical) == 1


def test_process_survives_a_restart_window(queues, monkeypatch):
    _pg_only(queues)
    q = queues.q("orders")
    sent = fill(queues, q, 200)
    real = psycopg.connect
    refusals = {"left": 3}

    def connect():
        if refusals["left"]:
            refusals["left"] -= 1
            return real(CLOSED_PORT_URL)  # refused, as while PostgreSQL restarts
        return real(queues.url, autocommit=False)

    t = SqlQueueTransport(guard_connect(connect, "the test server", None), "postgres", error_queue=queues.q("error"))
    handled: list[bytes] = []
    clock = Clock()
    slept = _fake_sleep(monkeypatch, clock)
    breaker = CircuitBreaker("q", clock=clock)
    pump = t.pump(q, lambda m, c: handled.append(m.body), mode=TransactionMode.RECEIVE_ONLY,
                       breaker=breaker)
    try:
        pump.run()
    finally:
        t.close()
    assert sorted(handled) == sorted(sent), "each message handled exactly once after the restart window"
    assert slept == [1.0] * 3 and breaker.failures == 0, "three refusals, 1 s back-off each, then disarmed"
    assert count(queues, "orders") == 0
