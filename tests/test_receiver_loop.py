"""The receive loop's end: a receiver that found the queue empty waits for the batches still in flight (they may
put rows back), receives once more when the last one ends, and the loop stops on an empty receive with nothing in
flight. No database: the batch function stands for one receive transaction."""

from __future__ import annotations

import threading

import pytest

from airflow_sqlqueue.transport.dialects import get_dialect
from airflow_sqlqueue.transport.processing import receivers
from airflow_sqlqueue.transport.processing.receivers import ReceiverLoop
from airflow_sqlqueue.transport.tables.session import RetryPolicy


class Backlog:
    """Rows handed out by batches; a held batch blocks until released, then may put its rows back."""

    def __init__(self, rows: int) -> None:
        self.rows = rows
        self.lock = threading.Lock()
        self.empty_receives = 0
        self.taken = 0
        self.hold_first = threading.Event()
        self.first_started = threading.Event()
        self.idle_seen = threading.Semaphore(0)
        self._first = True

    def batch(self, n: int) -> tuple[int, int]:
        with self.lock:
            first, self._first = self._first, False
            take = min(n, self.rows)
            self.rows -= take
            if take == 0:
                self.empty_receives += 1
        if take == 0:
            self.idle_seen.release()
            return 0, 0
        if first:
            self.first_started.set()
            assert self.hold_first.wait(30), "the test never released the held batch"
            with self.lock:  # the held batch rolls back: its rows return to the queue
                self.rows += take
            return 0, take
        with self.lock:
            self.taken += take
        return take, take


@pytest.fixture
def long_pause(monkeypatch):
    """An idle pause far longer than the test waits: only the wake-up can end the loop in time."""
    monkeypatch.setattr(receivers, "IDLE_PAUSE", 600.0)


def run_in_thread(loop: ReceiverLoop, backlog: Backlog) -> tuple[threading.Thread, list]:
    result: list = []
    thread = threading.Thread(target=lambda: result.append(loop.run(backlog.batch)), daemon=True)
    thread.start()
    return thread, result


@pytest.mark.usefixtures("long_pause")
def test_idle_receivers_wake_when_the_last_batch_in_flight_ends_and_take_the_rows_it_put_back():
    backlog = Backlog(rows=10)
    loop = ReceiverLoop(RetryPolicy(get_dialect("sqlite")), batch_size=10, concurrency=4)
    thread, result = run_in_thread(loop, backlog)
    assert backlog.first_started.wait(10)
    for _ in range(3):  # the three other receivers found nothing: the held batch has every row
        assert backlog.idle_seen.acquire(timeout=10)
    backlog.hold_first.set()  # it ends and puts its 10 rows back
    thread.join(20)
    assert not thread.is_alive(), "idle receivers slept through the end of the last batch in flight"
    assert result == [10] and backlog.taken == 10 and backlog.rows == 0
    # one empty receive each while the batch was held, then at most one each at the end
    assert backlog.empty_receives <= 3 + 4


@pytest.mark.usefixtures("long_pause")
def test_a_lone_empty_receive_stops_the_loop_at_once():
    backlog = Backlog(rows=0)
    loop = ReceiverLoop(RetryPolicy(get_dialect("sqlite")), batch_size=10, concurrency=4)
    thread, result = run_in_thread(loop, backlog)
    thread.join(20)
    assert not thread.is_alive()
    assert result == [0]
    assert 1 <= backlog.empty_receives <= 4
