"""A draining process for the crash test: the parent kills it with SIGKILL at a random moment.

usage: python crash_child.py URL QUEUE ERROR_QUEUE (drain|process) OUT_FILE BATCH_SIZE

drain:   ``transport.receiving()`` batches; each batch is appended to OUT_FILE as JSON lines and fsync'ed
         inside the block, before the receive transaction commits (the durable store of the drain operator).
process: ``transport.process()`` in RECEIVE_ONLY; the handler appends each body to OUT_FILE (flushed: a
         SIGKILL keeps what reached the OS) before the batch commits.
The child prints ``ready`` once connected, then drains until the queue is empty.
"""

from __future__ import annotations

import json
import logging
import os
import sys

from airflow_sqlqueue.transport import SqlQueueTransport


def main(url: str, queue: str, error_queue: str, mode: str, out_path: str, batch_size: int) -> None:
    logging.getLogger("airflow_sqlqueue").addHandler(logging.NullHandler())
    transport = SqlQueueTransport.from_url(url, error_queue=error_queue)
    transport.peek(queue)
    print("ready", flush=True)
    with open(out_path, "a", encoding="utf-8") as out:
        if mode == "drain":
            while True:
                with transport.receiving(queue, batch_size) as batch:
                    if not batch.messages:
                        break
                    out.write("".join(json.dumps({"id": str(m.id), "body": m.body.decode()}) + "\n"
                                      for m in batch.messages))
                    out.flush()
                    os.fsync(out.fileno())
                    # the receive commits when this block ends: a kill from here on is "stored, not committed"
        else:
            def handler(message, context) -> None:
                out.write(json.dumps({"id": str(message.id), "body": message.body.decode()}) + "\n")
                out.flush()

            transport.process(queue, handler, mode="receive-only", batch_size=batch_size, immediate_retries=0)
    transport.close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], int(sys.argv[6]))
