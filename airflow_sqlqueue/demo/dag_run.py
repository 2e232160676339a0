"""Child process of ``sqlqueue demo``: migrate a throw-away Airflow metadata DB and run the example DAG once.

``python -m airflow_sqlqueue.demo.dag_run SPEC.json``. The parent sets ``AIRFLOW_HOME``, the DAGs folder and the
queue connection (``AIRFLOW_CONN_*``) in this process's environment before Airflow is imported, and reads the
result file named in the spec: the run's state, each task's state and duration, and the summary task's XCom.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any


def _task_instances(dag_run: Any) -> dict[str, dict[str, Any]]:
    from airflow.utils.session import create_session

    with create_session() as session:
        tis = dag_run.get_task_instances(session=session)
        return {(ti.task_id if ti.map_index < 0 else f"{ti.task_id}[{ti.map_index}]"):
                {"state": str(ti.state), "seconds": round(ti.duration or 0.0, 3)} for ti in tis}


def _xcom(dag_run: Any, task_id: str) -> Any:
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = session.scalars(XComModel.get_many(run_id=dag_run.run_id, key="return_value",
                                                  dag_ids=dag_run.dag_id, task_ids=task_id)).all()
        return XComModel.deserialize_value(rows[0]) if rows else None


def main(argv: list[str]) -> int:
    with open(argv[0], encoding="utf-8") as f:
        spec = json.load(f)
    phases: dict[str, float] = {}
    started = time.monotonic()
    from airflow.utils import db

    db.resetdb()
    phases["airflow_db"] = time.monotonic() - started

    from airflow.dag_processing.dagbag import DagBag

    mark = time.monotonic()
    bag = DagBag(dag_folder=spec["dag_file"])
    if bag.import_errors or spec["dag_id"] not in bag.dags:
        raise SystemExit(f"the example DAG did not load: {bag.import_errors or sorted(bag.dags)}")
    dag_run = bag.dags[spec["dag_id"]].test(run_conf=spec["conf"])
    phases["dag_test"] = time.monotonic() - mark
    result = {"dag_id": dag_run.dag_id, "run_id": dag_run.run_id, "state": str(dag_run.state),
              "tasks": _task_instances(dag_run), "summary": _xcom(dag_run, "summary"), "phases": phases}
    with open(spec["result_file"], "w", encoding="utf-8") as f:
        json.dump(result, f)
    return 0 if result["state"] == "success" else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
