"""A draining process for the crash test: it dies by SIGKILL, at a chosen point or when the parent kills it.

usage: python crash_child.py URL QUEUE ERROR_QUEUE (drain|process) OUT_FILE BATCH_SIZE KILL_AT

drain:   ``transport.receiving()`` batches; each batch is appended to OUT_FILE as JSON lines and fsync'ed
         inside the block, before the receive transaction commits (the durable store of the drain operator).
process: ``transport.process()`` in RECEIVE_ONLY; the handler appends each body to OUT_FILE (flushed: a
         SIGKILL keeps what reached the OS) before the batch commits.

KILL_AT is ``timer`` (the parent kills the child after a random delay) or ``PHASE:BATCH:K``: the child sends
itself SIGKILL in batch number BATCH (0-based, of this run) at PHASE:
- ``mid-batch``: after K of the batch's messages were stored/handled (0 < K < BATCH_SIZE);
- ``stored-not-committed``: after the whole batch was stored (drain) or handled (process), before the commit;
- ``after-commit``: once the batch has committed, before anything of the next one is stored.
The child prints ``ready`` once connected, then drains until the queue is empty. Under ``timer`` it pauses
``TIMER_PACE`` seconds in each batch (inside its transaction, at a point that moves from batch to batch), so
that the parent's kill (at most 0.1 s after ``ready``) lands while it works however fast the machine is (the
queue is over 200 batches), and in every window.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import time

from airflow_sqlqueue.transport import SqlQueueTransport

TIMER_PACE = 0.002


def die() -> None:
    """SIGKILL ourselves: no cleanup, no rollback by the client, no atexit: the database must cope."""
    os.kill(os.getpid(), signal.SIGKILL)


def main(url: str, queue: str, error_queue: str, mode: str, out_path: str, batch_size: int, kill_at: str) -> None:
    logging.getLogger("airflow_sqlqueue").addHandler(logging.NullHandler())
    phase, kill_batch, kill_k = (None, -1, -1)
    pace = TIMER_PACE if kill_at == "timer" else 0.0
    if kill_at != "timer":
        phase, batch_text, k_text = kill_at.split(":")
        kill_batch, kill_k = int(batch_text), int(k_text)
    transport = SqlQueueTransport.from_url(url, error_queue=error_queue)
    transport.peek(queue)
    print("ready", flush=True)

    def record(message) -> str:
        return json.dumps({"id": str(message.id), "body": message.body.decode()}) + "\n"

    with open(out_path, "a", encoding="utf-8") as out:
        if mode == "drain":
            number = 0
            while True:
                with transport.receiving(queue, batch_size) as batch:
                    if not batch.messages:
                        break
                    if pace and number % 2 == 0:
                        time.sleep(pace)  # nothing of this batch stored yet
                    if phase == "mid-batch" and number == kill_batch:
                        out.write("".join(record(m) for m in batch.messages[:kill_k]))
                        out.flush()
                        os.fsync(out.fileno())
                        die()
                    out.write("".join(record(m) for m in batch.messages))
                    out.flush()
                    os.fsync(out.fileno())
                    if pace and number % 2 == 1:
                        time.sleep(pace)  # the batch stored, not committed
                    if phase == "stored-not-committed" and number == kill_batch:
                        die()
                    # the receive commits when this block ends
                if phase == "after-commit" and number == kill_batch:
                    die()
                number += 1
        else:
            calls = {"n": 0}

            def handler(message, context) -> None:
                number, position = divmod(calls["n"], batch_size)
                calls["n"] += 1
                if phase == "mid-batch" and (number, position) == (kill_batch, kill_k):
                    die()  # K messages of this batch handled, this one and the rest not
                if phase == "after-commit" and (number, position) == (kill_batch + 1, 0):
                    die()  # batch kill_batch committed; the next one has begun, nothing of it handled
                out.write(record(message))
                out.flush()
                if pace and position == number % batch_size:
                    time.sleep(pace)  # this batch handled up to here, not committed
                if phase == "stored-not-committed" and (number, position) == (kill_batch, batch_size - 1):
                    die()  # the whole batch handled, its delete not committed

            transport.process(queue, handler, mode="receive-only", batch_size=batch_size, immediate_retries=0)
    transport.close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], int(sys.argv[6]), sys.argv[7])
