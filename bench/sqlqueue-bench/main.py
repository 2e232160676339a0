#!/usr/bin/env python3
"""airflow-sqlqueue adapter for hardbyte/postgresql-job-queue-benchmarking (the long_horizon contract).

One long-running process: a producer sending through ``SqlQueueTransport.send``/``send_many`` at a fixed rate
(or to a depth target), ``WORKER_COUNT`` receivers through the public API (the handler pump, one per thread, in a
transaction mode; or the batch drain), woken by the queue's push wake-ups (LISTEN/NOTIFY), and JSONL samples on
stdout every ``SAMPLE_EVERY_S`` seconds, aligned to the wall clock. Logs go to stderr. SIGTERM stops it within
a few seconds with exit code 0.

Extra knobs (besides the contract's): ``SQLQUEUE_RECEIVER`` = ``pump`` (default) or ``drain``;
``SQLQUEUE_MODE`` the pump's transaction mode (default ``sends-atomic-with-receive``); ``SQLQUEUE_BATCH_SIZE``
rows per receive (default 1 for the pump, 32 for the drain); ``SQLQUEUE_NOTIFY`` = 1 (default) or 0;
``SQLQUEUE_POLL_S`` the fallback poll (default 1.0); ``SQLQUEUE_LEDGER_DIR`` a folder for per-process
journals of sends and handlings (checked across processes, killed ones too, by ``ledger_check.py``);
``SQLQUEUE_BENCH_QUEUE`` the queue (default ``portable_bench``).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from urllib.parse import urlparse

from latency import RollingHistogram
from ledger import Ledger

from airflow_sqlqueue import __version__
from airflow_sqlqueue.transport import OutgoingMessage, SendOutcomeUnknownError, SqlQueueTransport

SYSTEM = "sqlqueue"
QUEUE = os.environ.get("SQLQUEUE_BENCH_QUEUE") or "portable_bench"  # adapter.json names this table
ERROR_QUEUE = f"{QUEUE}_error"
OBSERVER_METRICS = frozenset({"queue_depth", "producer_target_rate"})

log = logging.getLogger("sqlqueue-bench")


def env_int(key: str, default: int) -> int:
    value = os.environ.get(key)
    return int(float(value)) if value not in (None, "") else default


def env_str(key: str, default: str) -> str:
    value = os.environ.get(key)
    return value if value not in (None, "") else default


@dataclass
class Config:
    """What the harness (and the extra knobs) ask for."""

    database_url: str
    instance_id: int = 0
    producer_mode: str = "fixed"
    producer_rate: int = 800
    rate_file: str = ""
    target_depth: int = 1000
    batch_max: int = 128
    batch_ms: int = 10
    workers: int = 32
    payload_bytes: int = 256
    work_ms: int = 1
    sample_every_s: int = 5
    receiver: str = "pump"
    mode: str = "sends-atomic-with-receive"
    batch_size: int = 1
    notify: bool = True
    poll_s: float = 1.0

    @classmethod
    def from_env(cls) -> Config:
        url = os.environ.get("DATABASE_URL")
        if not url:
            raise SystemExit("DATABASE_URL must be set")
        receiver = env_str("SQLQUEUE_RECEIVER", "pump")
        if receiver not in ("pump", "drain"):
            raise SystemExit(f"SQLQUEUE_RECEIVER must be pump or drain, not {receiver!r}")
        return cls(
            database_url=url, instance_id=env_int("BENCH_INSTANCE_ID", 0),
            producer_mode=env_str("PRODUCER_MODE", "fixed"), producer_rate=env_int("PRODUCER_RATE", 800),
            rate_file=env_str("PRODUCER_RATE_CONTROL_FILE", ""), target_depth=env_int("TARGET_DEPTH", 1000),
            batch_max=max(1, env_int("PRODUCER_BATCH_MAX", 128)), batch_ms=max(1, env_int("PRODUCER_BATCH_MS", 10)),
            workers=max(1, env_int("WORKER_COUNT", 32)), payload_bytes=max(0, env_int("JOB_PAYLOAD_BYTES", 256)),
            work_ms=max(0, env_int("JOB_WORK_MS", 1)), sample_every_s=max(1, env_int("SAMPLE_EVERY_S", 5)),
            receiver=receiver, mode=env_str("SQLQUEUE_MODE", "sends-atomic-with-receive"),
            batch_size=max(1, env_int("SQLQUEUE_BATCH_SIZE", 1 if receiver == "pump" else 32)),
            notify=env_str("SQLQUEUE_NOTIFY", "1") not in ("0", "false", "no"),
            poll_s=float(env_str("SQLQUEUE_POLL_S", "1.0")))

    def current_rate(self) -> float:
        """The offered rate now: the harness's control file (high-load phases) when present, else PRODUCER_RATE."""
        if self.rate_file:
            try:
                with open(self.rate_file) as fh:
                    return float(fh.read().strip())
            except (OSError, ValueError):
                pass
        return float(self.producer_rate)


@dataclass
class Counters:
    """Shared counters (one lock; a few increments per message)."""

    enqueued: int = 0
    completed: int = 0
    send_unknown: int = 0
    depth: int = 0
    target_rate: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, name: str, n: int = 1) -> None:
        with self.lock:
            setattr(self, name, getattr(self, name) + n)


class Gate:
    """Wake-up tokens for idle receivers: each wake-up lets one receiver look; a token given while every receiver
    is busy is kept (capped), so no wake-up is lost between an empty receive and the next wait."""

    def __init__(self, cap: int) -> None:
        self._cond = threading.Condition()
        self._tokens = 0
        self._cap = cap

    def kick(self, n: int = 1) -> None:
        with self._cond:
            self._tokens = min(self._cap, self._tokens + n)
            self._cond.notify(n)

    def wait(self, timeout: float) -> None:
        with self._cond:
            if self._tokens == 0:
                self._cond.wait(timeout)
            if self._tokens:
                self._tokens -= 1

    def release_all(self) -> None:
        with self._cond:
            self._tokens = self._cap
            self._cond.notify_all()


def now_iso() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def emit(record: dict, instance_id: int) -> None:
    record.setdefault("instance_id", instance_id)
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


class Adapter:
    """Producer, receivers, waker, depth poller and sampler of one adapter process."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.stop = threading.Event()
        self.counters = Counters(target_rate=float(cfg.producer_rate))
        self.latency = RollingHistogram(30)
        self.gate = Gate(cfg.workers)
        self.transport = SqlQueueTransport.from_url(cfg.database_url, error_queue=ERROR_QUEUE,
                                                    endpoint="sqlqueue-bench")
        self.pad = "x" * cfg.payload_bytes
        self.origin = f"{cfg.instance_id}:{os.getpid()}"  # whose sequence numbers a body carries
        journal_dir = os.environ.get("SQLQUEUE_LEDGER_DIR")
        self.ledger = Ledger(os.path.join(journal_dir, f"{self.origin.replace(':', '-')}.log") if journal_dir else None)

    # -- setup -----------------------------------------------------------------------------------------------
    def provision(self) -> None:
        """Create the queues (idempotent; concurrent replicas are safe), with the wake-up trigger when asked."""
        deadline = time.monotonic() + 60
        while True:
            try:
                self.transport.create_queues([QUEUE, ERROR_QUEUE])
                if self.cfg.notify:
                    self.transport.enable_notifications(QUEUE)
                return
            except Exception as exc:  # noqa: BLE001 - the database may still be starting
                if time.monotonic() > deadline:
                    raise
                log.warning("provisioning failed (%s); retrying", exc)
                time.sleep(1)

    # -- the producer ----------------------------------------------------------------------------------------
    def _message(self, seq: int) -> OutgoingMessage:
        body = json.dumps({"seq": seq, "o": self.origin, "t": time.time(), "pad": self.pad}, separators=(",", ":"))
        return OutgoingMessage(body=body.encode())

    def _send(self, seq: int, n: int) -> None:
        messages = [self._message(seq + i) for i in range(n)]
        try:
            if n == 1:
                self.transport.send(QUEUE, messages[0])
            else:
                self.transport.send_many(QUEUE, messages)
            self.counters.add("enqueued", n)
            self.ledger.sent(seq, n, origin=self.origin)
        except SendOutcomeUnknownError:
            self.counters.add("send_unknown", n)  # stored or not: nobody knows; never counted as enqueued
            self.ledger.sent(seq, n, unknown=True, origin=self.origin)
            log.warning("send outcome unknown for %d message(s) (connection lost at commit)", n)
        except Exception as exc:  # noqa: BLE001 - database down: offered load is dropped, as the harness expects
            log.warning("send failed: %s", str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
            self.stop.wait(0.2)

    def producer(self) -> None:
        cfg, seq = self.cfg, 0
        credit, last = 0.0, time.monotonic()
        sent_since_poll = 0
        while not self.stop.is_set():
            if cfg.producer_mode == "depth-target":
                self.counters.target_rate = 0.0
                with self.counters.lock:
                    depth = self.counters.depth
                n = min(cfg.batch_max, cfg.target_depth - depth - sent_since_poll)
                if n <= 0:
                    self.stop.wait(0.02)
                    sent_since_poll = 0
                    continue
                self._send(seq, n)
                seq += n
                sent_since_poll += n
                continue
            rate = cfg.current_rate()
            self.counters.target_rate = rate
            if rate <= 0:
                credit, last = 0.0, time.monotonic()
                self.stop.wait(0.1)
                continue
            pause = cfg.batch_ms / 1000.0 - (time.monotonic() - last)
            if pause > 0:
                self.stop.wait(pause)
            now = time.monotonic()
            credit += rate * (now - last)  # credit on real elapsed time (the contract's pacing rule)
            last = now
            n = min(cfg.batch_max, int(credit))
            if n <= 0:
                continue
            credit -= n
            self._send(seq, n)
            seq += n

    # -- receivers -------------------------------------------------------------------------------------------
    def _took(self, body: bytes) -> None:
        try:
            payload = json.loads(body)
            self.latency.record(max(0.0, (time.time() - float(payload["t"])) * 1000.0))
            if payload.get("o") == self.origin:  # sent by this process: in the ledger
                self.ledger.handled(int(payload["seq"]), self.origin)
            elif self.ledger.journaling:  # another process's message: only the journal can tell
                self.ledger.handled_elsewhere(int(payload["seq"]), str(payload.get("o")))
        except (ValueError, KeyError, TypeError):
            pass

    def handler(self, message, context) -> None:  # noqa: ANN001 - the pump's handler signature
        self._took(message.body)
        if self.cfg.work_ms:
            time.sleep(self.cfg.work_ms / 1000.0)
        self.counters.add("completed")

    def sink(self, messages: list) -> int:
        for message in messages:
            self._took(message.body)
            if self.cfg.work_ms:
                time.sleep(self.cfg.work_ms / 1000.0)
        self.counters.add("completed", len(messages))
        return len(messages)

    def receiver(self) -> None:
        cfg = self.cfg
        pump = (self.transport.pump(QUEUE, self.handler, mode=cfg.mode, batch_size=cfg.batch_size)
                if cfg.receiver == "pump" else None)
        while not self.stop.is_set():
            try:
                if pump is not None:
                    seconds = pump.run(max_duration=1.0, stop_when_empty=True).seconds
                else:
                    seconds = self.transport.drain(QUEUE, self.sink, max_duration=1.0,
                                                   batch_size=cfg.batch_size).seconds
            except Exception as exc:  # noqa: BLE001 - e.g. the circuit breaker after 30 s down: keep trying
                log.warning("receiver stopped (%s: %s); starting again in 1 s", type(exc).__name__,
                            str(exc).splitlines()[0] if str(exc) else "")
                self.stop.wait(1.0)
                continue
            if seconds < 1.0:  # it ended on an empty receive: wait for a wake-up (or the fallback poll)
                self.gate.wait(max(cfg.poll_s, 0.05) * 4)

    def waker(self) -> None:
        """One LISTEN connection for the process: each wake-up (or fallback poll) lets one idle receiver look."""
        wakeups = self.transport.wakeups(QUEUE, self.cfg.poll_s, push=self.cfg.notify)
        retry_at = 0.0
        try:
            while not self.stop.is_set():
                try:
                    if self.cfg.notify and not wakeups.push and time.monotonic() >= retry_at:
                        retry_at = time.monotonic() + 2.0
                        wakeups.start()  # listen again after the database came back
                    wakeups.wait(True)
                except Exception as exc:  # noqa: BLE001 - database down: poll
                    log.warning("wake-ups: %s", str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
                    self.stop.wait(0.5)
                self.gate.kick(1)
        finally:
            wakeups.close()

    def depth_poller(self) -> None:
        while not self.stop.is_set():
            try:
                depth = self.transport.peek(QUEUE)
                with self.counters.lock:
                    self.counters.depth = depth
            except Exception:  # noqa: BLE001 - database down: keep the last reading
                pass
            self.stop.wait(0.2 if self.cfg.producer_mode == "depth-target" else 1.0)

    # -- samples ---------------------------------------------------------------------------------------------
    def sampler(self) -> None:
        every = self.cfg.sample_every_s
        next_tick = (int(time.time()) // every + 1) * every  # clock-aligned: on a multiple of SAMPLE_EVERY_S
        last_enq = last_cmp = 0
        last_tick = time.monotonic()
        while not self.stop.wait(max(0.0, next_tick - time.time())):
            elapsed = max(0.001, time.monotonic() - last_tick)
            last_tick = time.monotonic()
            with self.counters.lock:
                enq, cmp, depth = self.counters.enqueued, self.counters.completed, self.counters.depth
            p50, p95, p99 = self.latency.percentiles((0.50, 0.95, 0.99))
            stamp = now_iso()
            for metric, value, window in (
                ("claim_p50_ms", p50, 30.0), ("claim_p95_ms", p95, 30.0), ("claim_p99_ms", p99, 30.0),
                ("enqueue_rate", (enq - last_enq) / elapsed, float(every)),
                ("completion_rate", (cmp - last_cmp) / elapsed, float(every)),
                ("queue_depth", float(depth), 0.0),
                ("producer_target_rate", self.counters.target_rate, 0.0),
            ):
                if metric in OBSERVER_METRICS and self.cfg.instance_id != 0:
                    continue
                emit({"t": stamp, "system": SYSTEM, "kind": "adapter", "subject_kind": "adapter", "subject": "",
                      "metric": metric, "value": value, "window_s": window}, self.cfg.instance_id)
            last_enq, last_cmp = enq, cmp
            next_tick += every
            if next_tick <= time.time():  # after a stall: skip the missed ticks, stay on the boundaries
                next_tick = (int(time.time()) // every + 1) * every

    # -- lifecycle -------------------------------------------------------------------------------------------
    def run(self) -> None:
        cfg = self.cfg
        emit({"kind": "descriptor", "system": SYSTEM, "event_tables": [f"public.{QUEUE}"], "extensions": [],
              "version": __version__, "schema_version": "sqlqueue-postgres",
              "db_name": (urlparse(cfg.database_url).path or "/").lstrip("/") or "sqlqueue_bench",
              "started_at": now_iso(), "receiver": cfg.receiver, "mode": cfg.mode, "notify": cfg.notify},
             cfg.instance_id)
        self.provision()
        threads = [threading.Thread(target=self.waker, name="waker", daemon=True),
                   threading.Thread(target=self.depth_poller, name="depth", daemon=True),
                   threading.Thread(target=self.sampler, name="sampler", daemon=True)]
        threads += [threading.Thread(target=self.receiver, name=f"receiver-{i}", daemon=True)
                    for i in range(cfg.workers)]
        threads.append(threading.Thread(target=self.producer, name="producer", daemon=True))
        for thread in threads:
            thread.start()
        log.info("started: %s receivers (%s, %s), producer %s at %s/s, push wake-ups %s", cfg.workers,
                 cfg.receiver, cfg.mode, cfg.producer_mode, cfg.producer_rate, "on" if cfg.notify else "off")
        while not self.stop.is_set():
            self.stop.wait(1.0)
        self.gate.release_all()
        deadline = time.monotonic() + 3.5
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        stuck = [t.name for t in threads if t.is_alive()]
        if stuck:
            log.warning("exiting with %d thread(s) still in a database call: %s", len(stuck), ", ".join(stuck[:5]))
        with self.counters.lock:
            log.info("stopped: enqueued %d, completed %d, send outcome unknown %d", self.counters.enqueued,
                     self.counters.completed, self.counters.send_unknown)
        log.info("ledger: %s", json.dumps(self.ledger.report()))
        if not stuck:
            try:  # what SIGTERM left queued (rows in flight rolled back): not lost, still there
                log.info("left in the queue at exit (peek estimate): %d", self.transport.peek(QUEUE))
            except Exception as exc:  # noqa: BLE001 - the database is down: say so
                log.info("left in the queue at exit: unknown (%s)", type(exc).__name__)
        sys.stdout.flush()
        if not stuck:
            self.transport.close()


def main() -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="[sqlqueue] %(levelname)s %(message)s")
    adapter = Adapter(Config.from_env())
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: adapter.stop.set())
    if env_str("SCENARIO", "long_horizon") not in ("long_horizon", "worker_only"):
        log.warning("scenario %s is not implemented; running long_horizon", os.environ.get("SCENARIO"))
    adapter.run()
    sys.stdout.flush()
    os._exit(0)  # daemon threads may sit in a driver call: exit now, with code 0, as the contract asks


if __name__ == "__main__":
    sys.exit(main())
