# ruff: noqa: F811  (pytest fixtures imported from tests.test_dashboard_api are parameters here)
"""The page's API describes itself: an OpenAPI document served to logged-in readers, every route with typed request
and response schemas and its errors; and (when schemathesis is installed) the answers of the real app, on SQLite
and PostgreSQL, conform to that document, and no generated request gets a 5xx."""

from __future__ import annotations  # noqa: I001  (tests.airflow_env must be imported before airflow)

import tests.airflow_env  # noqa: F401
from tests.airflow_env import airflow_db  # noqa: F401  (fixture)

from typing import Any

import pytest

from tests.test_dashboard_api import PREFIX, app, as_user, client, filled, variable  # noqa: F401  (fixtures)

DOCUMENT = f"{PREFIX}/api/openapi.json"
ROUTES = {
    ("get", "/api/overview"), ("get", "/api/connections/{conn_id}/history"),
    ("get", "/api/connections/{conn_id}/failed/groups"), ("get", "/api/connections/{conn_id}/failed"),
    ("post", "/api/connections/{conn_id}/failed/retry"), ("post", "/api/connections/{conn_id}/failed/delete"),
    ("post", "/api/connections/{conn_id}/failed/edit-retry"), ("get", "/api/connections/{conn_id}/batch-retries"),
    ("post", "/api/connections/{conn_id}/batch-retries"), ("post", "/api/connections/{conn_id}/batch-retries/cancel"),
    ("get", "/api/archive/connections"), ("get", "/api/connections/{conn_id}/archives"),
    ("get", "/api/connections/{conn_id}/archives/{archive_id}"), ("post", "/api/connections/{conn_id}/archives"),
    ("post", "/api/connections/{conn_id}/archives/{archive_id}/restore"),
    ("get", "/api/connections/{conn_id}/failed/message"), ("get", "/api/connections/{conn_id}/failed/retried"),
    ("get", "/api/connections/{conn_id}/failed/group-cards"), ("post", "/api/connections/{conn_id}/failed/group/retry"),
    ("post", "/api/connections/{conn_id}/failed/group/delete"),
    ("get", "/api/connections/{conn_id}/failed/conversation")}
ROUTES |= {("get", "/api/connections/{conn_id}/permissions"), ("get", "/api/connections/{conn_id}/redirects"),
           ("post", "/api/connections/{conn_id}/redirects"), ("post", "/api/connections/{conn_id}/redirects/remove")}


def served(client: Any) -> dict[str, Any]:
    response = client.get(DOCUMENT, headers=as_user("viewer"))
    assert response.status_code == 200, response.text
    return response.json()


def test_the_openapi_document_is_served_to_readers_with_typed_schemas(client: Any, airflow_db: None) -> None:
    assert client.get(DOCUMENT).status_code == 401  # not logged in
    document = served(client)
    assert document["openapi"].startswith("3.") and document["servers"] == [{"url": PREFIX}]
    found = {(method, path) for path, item in document["paths"].items() for method in item}
    assert found == ROUTES
    components = document["components"]["schemas"]
    for method, path in ROUTES:
        operation = document["paths"][path][method]
        ok = operation["responses"]["200"]["content"]["application/json"]["schema"]
        assert "$ref" in ok, (method, path, ok)  # a named, typed model, not "any object"
        name = ok["$ref"].rsplit("/", 1)[-1]
        assert components[name]["type"] == "object" and components[name]["properties"], name
        for code in ("400", "403", "404", "422", "502"):
            assert operation["responses"][code]["content"]["application/json"]["schema"]["$ref"].endswith(
                "/Problem"), (method, path, code)
        if method == "post":
            body = operation["requestBody"]["content"]["application/json"]["schema"]
            assert "$ref" in body, (method, path, body)
    assert components["FailedMessage"]["required"][:2] == ["id", "seq"]
    assert components["QueueFigures"]["additionalProperties"] is False  # nothing undeclared leaves the server


#: Generated requests per route (schemathesis' positive data: valid per the document, often unknown ids).
EXAMPLES = int(__import__("os").environ.get("SQLQUEUE_OPENAPI_EXAMPLES", "25"))


def test_every_answer_conforms_to_the_served_document(client: Any, filled: Any) -> None:
    """Requests generated from the served document (schemathesis), as an editor, half on the configured
    connection: no 5xx, every status code, content type and body as the document says."""
    schemathesis = pytest.importorskip("schemathesis", reason="schemathesis is not installed (pip install "
                                                              "schemathesis)")
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
    from schemathesis import checks

    from tests.test_dashboard_api import CONN_ID

    schema = schemathesis.openapi.from_dict(served(client))
    conformance = [checks.not_a_server_error, checks.status_code_conformance, checks.content_type_conformance,
                   checks.response_schema_conformance]
    seen: dict[str, set[int]] = {}
    def send(case: Any, ours: bool) -> None:
        if ours and "conn_id" in (case.path_parameters or {}):
            case.path_parameters["conn_id"] = CONN_ID
        sent = case.as_transport_kwargs(base_url=f"http://localhost{PREFIX}", headers=as_user("op"))
        response = client.request(sent["method"], sent["url"], params=sent.get("params"),
                                  headers=sent.get("headers"), json=sent.get("json"),
                                  content=sent.get("data") if "json" not in sent else None)
        seen.setdefault(case.operation.label, set()).add(response.status_code)
        case.validate_response(response, checks=conformance)

    for result in schema.get_all_operations():
        operation = result.ok()
        settings(max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck))(
            given(case=operation.as_strategy(), ours=st.booleans())(send))()
    assert len(seen) == len(ROUTES) and any(200 in codes for codes in seen.values()), seen
