"""The error archive's API routes of the "SQL Queues" page in the real API server app (SQLite and PostgreSQL):
archive now, list, page, restore; read vs edit; every action audited; the location only from the deployment."""

from __future__ import annotations  # noqa: I001  (tests.airflow_env must be imported before airflow)

import tests.airflow_env as airflow_env  # noqa: F401  (configures Airflow before it is imported)
from tests.airflow_env import airflow_db  # noqa: F401  (fixture)

from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.conftest import Db
from tests.test_dashboard_api import (  # noqa: F401  (fixtures)
    CONN_ID,
    PREFIX,
    app,
    as_user,
    client,
    config_for,
    filled,
    last_audit,
    variable,
)

ARCHIVES = f"{PREFIX}/api/connections/{CONN_ID}/archives"


def deploy(db: Db, put: Callable[[dict[str, Any]], None], location: Path) -> None:
    put({**config_for(db), "archive": {"location": str(location), "older_than_days": 30}})


def test_archive_now_list_page_and_restore_are_audited(client: Any, filled: Any, variable: Any,  # noqa: F811
                                                       tmp_path: Path) -> None:
    db, made = filled
    deploy(db, variable, tmp_path / "archive")
    shown = client.get(f"{PREFIX}/api/archive/connections", headers=as_user("viewer")).json()
    assert shown == {"configured": True, "older_than_days": 30,
                     "connections": [{"conn_id": CONN_ID, "can_edit": False}]}
    assert client.get(ARCHIVES, headers=as_user("viewer")).json()["archives"] == []

    refused = client.post(ARCHIVES, headers=as_user("viewer"), json={"older_than_days": 0})
    assert refused.status_code == 403 and db.transport.count(db.q("error")) == 3
    nothing = client.post(ARCHIVES, headers=as_user("op"), json={})
    assert nothing.status_code == 400 and "say what to archive" in nothing.json()["detail"]
    response = client.post(ARCHIVES, headers=as_user("op"),
                           json={"older_than_days": 0, "exception_type": "TimeoutError"})
    assert response.status_code == 200, response.text
    done = response.json()
    assert done["rows"] == 2 and done["deleted"] == 2 and "location" not in done
    assert db.transport.count(db.q("error")) == 1  # archived + left == before
    entry = last_audit("sqlqueue.archive_failed_messages")
    assert entry.owner == "op" and done["archive_id"] in entry.extra and CONN_ID in entry.extra

    [listed] = client.get(ARCHIVES, headers=as_user("viewer")).json()["archives"]
    assert listed["archive_id"] == done["archive_id"] and listed["labels"] == {"conn_id": CONN_ID}
    page = client.get(f"{ARCHIVES}/{done['archive_id']}", headers=as_user("viewer"), params={"limit": 1}).json()
    timeouts = [str(m.id) for m in made["failed"] if m.id != made["failed"][1].id]
    assert [m["id"] for m in page["messages"]] == timeouts[:1] and page["next_after"] == page["messages"][0]["seq"]
    rest = client.get(f"{ARCHIVES}/{done['archive_id']}", headers=as_user("viewer"),
                      params={"after": page["next_after"]}).json()
    assert [m["id"] for m in rest["messages"]] == timeouts[1:] and rest["next_after"] is None

    refused = client.post(f"{ARCHIVES}/{done['archive_id']}/restore", headers=as_user("viewer"), json={"ids": None})
    assert refused.status_code == 403
    back = client.post(f"{ARCHIVES}/{done['archive_id']}/restore", headers=as_user("op"), json={"ids": timeouts[:1]})
    assert back.status_code == 200 and back.json()["restored"] == 1
    again = client.post(f"{ARCHIVES}/{done['archive_id']}/restore", headers=as_user("op"), json={"ids": None})
    assert again.json()["restored"] == 1 and again.json()["already_restored"] == 1
    assert sorted(str(m.id) for m in db.transport.browse(db.q("error"))) == sorted(str(m.id) for m in made["failed"])
    entry = last_audit("sqlqueue.restore_archived_messages")
    assert entry.owner == "op" and done["archive_id"] in entry.extra

    bad = client.get(f"{ARCHIVES}/..%2Fsecrets", headers=as_user("viewer"))
    assert bad.status_code in (400, 404)
    missing = client.get(f"{ARCHIVES}/20200101T000000Z-00000000", headers=as_user("viewer"))
    assert missing.status_code == 400 and "no archive" in missing.json()["detail"]


def test_archiving_needs_the_deployments_location(client: Any, filled: Any, variable: Any) -> None:  # noqa: F811
    db, _ = filled
    variable(config_for(db))
    response = client.post(ARCHIVES, headers=as_user("op"), json={"older_than_days": 0})
    assert response.status_code == 409 and "not set up" in response.json()["detail"]
    extra = client.post(ARCHIVES, headers=as_user("op"), json={"older_than_days": 0, "location": "/tmp/elsewhere"})
    assert extra.status_code == 409  # a request never names a location: the field is ignored, nothing written
    assert db.transport.count(db.q("error")) == 3
