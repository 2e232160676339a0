"""Dependencies point one way: façade -> operations -> claim/queue/session -> dialects -> leaves.

Every module of the core has a layer; a module may import only modules of lower layers (a dialect may import
the dialect base beside it). No module of the package imports another inside a function (a cycle held apart
that way is still a cycle), and the core never imports Airflow. A new module must be given its layer here.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).parent.parent / "airflow_sqlqueue"
CORE = PACKAGE / "transport"

#: Layer of every core module (lower = further down). Leaves know nothing of queues or connections.
LAYERS = {
    # leaves: values, names, text
    "errors": 0, "ids": 0, "validation": 0, "host": 0, "modes": 0, "sqlfile": 0, "redaction": 0, "printable": 0,
    "circuit_breaker": 1,
    "address": 1, "headers": 1, "messages": 2, "payload": 3, "failures": 2, "standard_headers": 3, "connect": 1,
    # dialects: SQL, quoting, error kinds
    "dialects.base": 4, "dialects.sqlite": 5, "dialects.postgres": 5, "dialects.mssql": 5, "dialects": 6,
    # one table, one session
    "session": 7, "queue": 7,
    "claim": 8, "sending": 8, "recoverability": 8, "summaries": 8,
    "strategies": 9, "receivers": 9,
    # operations
    "pump": 10, "drain": 10, "error_queue": 10, "maintenance": 10, "wakeups": 10, "migration": 9, "pubsub": 10,
    "archive": 10,
    "error_browser": 10.5,  # uses error_queue's restored_headers
    "batch_retry": 10.6,
    "partitions": 10,
    # the façade, and the package's public names
    "transport": 11, "__init__": 12,
}


def _modules() -> dict[str, Path]:
    found = {}
    for path in CORE.rglob("*.py"):
        name = ".".join(path.relative_to(CORE).with_suffix("").parts)
        found["dialects" if name == "dialects.__init__" else name] = path
    return found


def _imports(path: Path, name: str) -> list[tuple[str, int, bool]]:
    """(imported core module, line, inside a function) for every relative import of ``path`` outside
    ``if TYPE_CHECKING:`` blocks."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = ["dialects"] if name == "dialects" else name.split(".")[:-1]
    in_functions = {id(n) for f in ast.walk(tree) if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)
                    for n in ast.walk(f)}
    type_checking = {id(n) for node in ast.walk(tree)
                     if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test) for n in ast.walk(node)}
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom) or node.level == 0 or id(node) in type_checking:
            continue
        base = package[: len(package) - (node.level - 1)]
        targets = [base + [node.module]] if node.module else [base + [a.name] for a in node.names]
        for parts in targets:
            dotted = ".".join(parts)
            out.append((dotted if dotted in LAYERS else dotted.split(".")[0], node.lineno, id(node) in in_functions))
    return out


def test_every_core_module_has_a_layer() -> None:
    missing = sorted(set(_modules()) - set(LAYERS))
    assert not missing, f"give these modules a layer in tests/test_layering.py: {missing}"


@pytest.mark.parametrize("name", sorted(_modules()))
def test_imports_point_down(name: str) -> None:
    path = _modules()[name]
    for target, line, in_function in _imports(path, name):
        assert not in_function, f"{path.name}:{line} imports {target} inside a function"
        assert target in LAYERS, f"{path.name}:{line} imports unknown module {target}"
        assert LAYERS[target] < LAYERS[name], (
            f"{path.name}:{line} imports {target} (layer {LAYERS[target]}) from layer {LAYERS[name]}: "
            "imports must point down")


def test_core_never_imports_airflow() -> None:
    for path in CORE.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else []
            assert not any(n == "airflow" or n.startswith("airflow.") for n in names), f"{path} imports Airflow"


@pytest.mark.parametrize("folder", ["hooks", "operators", "sensors", "triggers", "queues"])
def test_the_airflow_layer_imports_the_package_at_the_top(folder: str) -> None:
    """Hooks, operators, sensors and triggers import what they use at the top: no cycle held apart by a
    function-local import. (Task bodies of example DAGs and the command line may defer heavy imports.)"""
    for path in (PACKAGE / folder).rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for function in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)):
            for node in ast.walk(function):
                if isinstance(node, ast.ImportFrom) and (node.level > 0 or (node.module or "").startswith(
                        "airflow_sqlqueue")):
                    pytest.fail(f"{path.relative_to(PACKAGE)}:{node.lineno} imports {node.module} inside "
                                f"{function.name}()")
