"""The partitioned drain in real ``dag.test()`` runs, on SQLite and PostgreSQL: a plan task, mapped drains over
disjoint ranges, one try that dies before its commit and a retry that resumes from the manifest in the task
state store. Every message is counted by Id.
"""

from __future__ import annotations  # noqa: I001  (tests.airflow_env must be imported before airflow)

import tests.airflow_env as airflow_env
from tests.airflow_env import airflow_db  # noqa: F401  (fixture)

import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from airflow_sqlqueue.operators import SqlQueuePartitionDrainOperator, SqlQueuePlanPartitionsOperator
from airflow_sqlqueue.operators.partition import MANIFEST_KEY
from airflow_sqlqueue.transport import Partition
from airflow_sqlqueue.transport.processing.claim import Claim

DAG_FILE = "sqlqueue_partition_drain.py"


def _manifests_left(dag_run) -> int:
    from airflow.models.task_state_store import TaskStateStoreModel
    from airflow.utils.session import create_session
    from sqlalchemy import func, select

    with create_session() as session:
        return session.scalar(select(func.count()).select_from(TaskStateStoreModel).where(
            TaskStateStoreModel.run_id == dag_run.run_id, TaskStateStoreModel.key == MANIFEST_KEY))


def _try_numbers(dag_run) -> dict[int, int]:
    from airflow.utils.session import create_session

    with create_session() as session:
        return {ti.map_index: ti.try_number for ti in dag_run.get_task_instances(session=session)
                if ti.task_id == "drain"}


def test_partitioned_drain_resumes_a_crashed_partition_from_its_manifest(
        airflow_db, db, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    """3 partitions of 600 messages, two receivers each. Partition 1's first try dies after storing (file and
    manifest) its second batch, before that batch commits; Airflow retries it and the retry resumes from the
    manifest. Every message is in a stored file, each from its own partition's range; the only duplicates are the
    uncommitted batch, with the same Ids; the queue is empty and no manifest is left."""
    t, queue, error = db.transport, db.q("audit"), db.q("error")
    t.create_queues([queue, error])
    sent = {str(i) for i in t.send_many(queue, [b'{"n": %d}' % i for i in range(600)])}
    plan = t.plan_partitions(queue, partitions=3)  # what the plan task will compute: nothing changes before it
    victim = plan[1].seq_range
    commits = {"n": 0}
    crashed: list[str] = []
    original = Claim.commit

    def commit(self: Claim) -> None:
        if self.within == victim and not crashed:
            commits["n"] += 1
            if commits["n"] == 2:  # its file is written and in the manifest; the rows are not deleted yet
                crashed.extend(str(m.id) for m in self.messages)
                self.abandon()  # what the database does when the worker dies: roll the receive back
                raise RuntimeError("worker lost before the commit")
        original(self)

    monkeypatch.setattr(Claim, "commit", commit)
    if db.kind == "sqlite":
        conn_id = airflow_env.sqlite_connection("sqlqueue_partition_q", db.url[len("sqlite:///"):])
    else:
        conn_id = airflow_env.postgres_connection("sqlqueue_partition_q")
    out = tmp_path / "batches"

    dag = airflow_env.load_dag("sqlqueue_partition_drain", DAG_FILE)
    dag_run = dag.test(run_conf={"conn_id": conn_id, "queue": queue, "error_queue": error, "output": str(out),
                                 "partitions": 3})

    assert str(dag_run.state) == "success", airflow_env.task_states(dag_run)
    assert len(crashed) == 25 and _try_numbers(dag_run) == {0: 1, 1: 2, 2: 1}  # partition 1 ran twice
    assert [Partition.from_dict(p) for p in airflow_env.xcom_value(dag_run, "plan")] == plan
    files = airflow_env.xcom_value(dag_run, "drain")  # per partition, the files of every try
    assert sorted(f for part in files for f in part) == sorted(str(p) for p in out.glob("*.parquet"))
    delivered: list[str] = []
    for index, part in enumerate(files):
        for path in part:
            assert re.search(rf"-p{index}-[0-9a-f]+\.parquet$", path)
            table = pq.read_table(path).to_pylist()
            assert all(row["seq"] in plan[index].seq_range for row in table)  # disjoint: each from its own range
            delivered.extend(row["id"] for row in table)
    assert set(delivered) == sent  # nothing lost
    duplicates = sorted(i for i in set(delivered) if delivered.count(i) > 1)
    assert duplicates == sorted(crashed) and len(delivered) == 600 + 25  # only the uncommitted batch, same Ids
    assert t.browse(queue, limit=10) == [] and t.peek(error) == 0
    print(f"figures: {db.kind} partitions=3 messages={len(sent)} faults=1 lost={len(sent - set(delivered))} "
          f"duplicates={len(delivered) - len(set(delivered))}")
    assert _manifests_left(dag_run) == 0
    assert [len(part) for part in files] == [8, 9, 8]  # 200 rows each in batches of 25, one batch stored twice
    retry = airflow_env.xcom_value(dag_run, "drain", key="drain_summary")[1]
    assert retry["partition"] == plan[1].as_dict()
    assert 0 < retry["delivered"] < 200 and retry["delivered"] % 25 == 0  # the resumed try drained the rest only


def test_partition_drain_operators_refuse_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="needs output_path"):
        SqlQueuePartitionDrainOperator(task_id="d", queue_name="q", partition={}, output_path=None)
    with pytest.raises(ValueError, match="takes no handler"):
        SqlQueuePartitionDrainOperator(task_id="d", queue_name="q", partition={}, output_path=str(tmp_path),
                                       handler=lambda m, c: None)
    op = SqlQueuePartitionDrainOperator(task_id="d", queue_name="q", output_path=str(tmp_path),
                                        partition={"queue": "q", "index": 0})
    with pytest.raises(ValueError, match="a dict with the keys"):
        op.execute({})
    plan = SqlQueuePlanPartitionsOperator(task_id="p", queue_name="q", max_partitions=5000)
    with pytest.raises(ValueError, match="max_map_length"):
        plan.execute({})
