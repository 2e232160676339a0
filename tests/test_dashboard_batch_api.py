"""The page's batched-retry routes through the real API server app: the queues the form may offer, refusals with
their reasons (a redirect outside the configuration, bad numbers, readers), a run created through Airflow's own
``trigger_dag`` with the page's user, listed with its progress, cancelled before it started, and audited."""

from __future__ import annotations  # noqa: I001  (tests.airflow_env must be imported before airflow)

import tests.airflow_env as airflow_env
from tests.airflow_env import airflow_db  # noqa: F401  (fixture)

import json
from typing import Any

from tests.test_dashboard_api import CONN_ID, PREFIX, app, as_user, client, filled, variable  # noqa: F401

airflow_env.use_project_dags()
ROUTE = f"{PREFIX}/api/connections/{CONN_ID}/batch-retries"


def deploy_batch_retry_dag() -> None:
    """Write the project's DAGs to the metadata database, as the DAG processor would."""
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.dagbag import BundleDagBag, sync_bag_to_db

    manager = DagBundlesManager()
    manager.sync_bundles_to_db()
    bundle = manager.get_bundle(airflow_env.PROJECT_BUNDLE)
    bundle.initialize()
    bag = BundleDagBag(dag_folder=bundle.path, bundle_path=bundle.path, bundle_name=bundle.name)
    assert "sqlqueue_error_queue_batch_retry" in bag.dags, bag.import_errors
    sync_bag_to_db(bag, bundle.name, bundle.version)


def audit_rows(event: str) -> list[Any]:
    from airflow.models.log import Log
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        return [(r.owner, json.loads(r.extra)) for r in session.scalars(select(Log).where(Log.event == event))]


def test_start_list_refuse_and_cancel_a_batched_retry(client: Any, filled: Any) -> None:  # noqa: F811
    db, _ = filled
    name = db.transport.name
    listed = client.get(ROUTE, headers=as_user("viewer"))
    assert listed.status_code == 200, listed.text
    assert sorted(listed.json()["queues"]) == sorted(name(db.q(q)) for q in ("orders", "billing", "invoices"))
    assert listed.json()["can_edit"] is False

    good = {"exception_type": "TimeoutError", "batch_size": 10, "rate_per_second": 5,
            "redirects": {name(db.q("invoices")): name(db.q("billing"))}}
    assert client.post(ROUTE, json=good, headers=as_user("viewer")).status_code == 403
    for bad, reason in (({"redirects": {name(db.q("invoices")): name(db.q("error"))}}, "not a queue a retry may"),
                        ({"redirects": {"nowhere": name(db.q("orders"))}}, "not a queue of connection"),
                        ({"batch_size": 0}, "batch_size must be a whole number from 1"),
                        ({"rate_per_second": -1}, "rate_per_second")):
        refused = client.post(ROUTE, json={**good, **bad}, headers=as_user("op"))
        assert refused.status_code == 400 and reason in refused.json()["detail"], (bad, refused.text)

    deploy_batch_retry_dag()
    started = client.post(ROUTE, json=good, headers=as_user("op"))
    assert started.status_code == 200, started.text
    run_id = started.json()["run_id"]
    (run,) = [r for r in client.get(ROUTE, headers=as_user("viewer")).json()["runs"] if r["run_id"] == run_id]
    assert run["state"] == "queued" and run["dag_run_state"] == "queued" and run["triggered_by"] == "op"

    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        conf = session.scalars(select(DagRun.conf).where(DagRun.run_id == run_id)).one()
    assert conf["conn_id"] == CONN_ID and conf["exception_type"] == "TimeoutError" and conf["batch_size"] == 10

    cancel = f"{ROUTE}/cancel"
    assert client.post(cancel, json={"run_id": "no-such-run"}, headers=as_user("op")).status_code == 404
    cancelled = client.post(cancel, json={"run_id": run_id}, headers=as_user("op"))
    assert cancelled.status_code == 200 and cancelled.json()["state_before"] == "queued", cancelled.text
    (run,) = [r for r in client.get(ROUTE, headers=as_user("viewer")).json()["runs"] if r["run_id"] == run_id]
    assert run["dag_run_state"] == "failed" and run["cancel_requested_by"] == "op"  # the scheduler never starts it
    assert run["state"] == "cancelled"
    assert db.transport.count(db.q("error")) == 3  # nothing retried

    started_rows = audit_rows("sqlqueue.batch_retry_started")
    assert any(owner == "op" and extra["run_id"] == run_id for owner, extra in started_rows)
    assert any(owner == "op" and extra["run_id"] == run_id
               for owner, extra in audit_rows("sqlqueue.batch_retry_cancelled"))
