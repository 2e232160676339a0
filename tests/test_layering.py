"""Dependencies point one way: façade -> error queue -> operations -> processing -> tables -> dialects -> wire ->
common.

The floors of the core are its folders (``transport/<floor>/``); the façade (``transport.py``) and the public
names (``__init__.py``) sit on top. A module may import modules of its own floor or of a lower one, never of a
higher one, and the imports inside one floor form no cycle. ``if TYPE_CHECKING:`` imports count like any other
(a cycle for the type checker is still a cycle), and no module imports another inside a function. Each floor's
``__init__`` says what it is for and what it may import; the test keeps that line true.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).parent.parent / "airflow_sqlqueue"
CORE = PACKAGE / "transport"

#: The floors of the core, lowest first: a folder each, then the façade module and the package's public names.
FLOORS = ["common", "wire", "dialects", "tables", "processing", "operations", "errorqueue", "transport", "__init__"]
FOLDERS = FLOORS[:-2]


def _modules() -> dict[str, Path]:
    """Every core module by dotted name within ``transport`` (a folder's ``__init__`` is the folder's name)."""
    found = {}
    for path in CORE.rglob("*.py"):
        parts = path.relative_to(CORE).with_suffix("").parts
        if parts[-1] == "__init__" and len(parts) > 1:
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _floor(name: str) -> int:
    return FLOORS.index(name.split(".")[0])


def _imports(path: Path, name: str) -> list[tuple[str, int, bool]]:
    """(imported core module, line, inside a function) for every relative import of ``path``, ``TYPE_CHECKING``
    blocks included; an absolute import of ``airflow_sqlqueue.transport`` counts the same."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    is_package = path.name == "__init__.py"
    package = name.split(".") if is_package and name != "__init__" else name.split(".")[:-1]
    in_functions = {id(n) for f in ast.walk(tree) if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)
                    for n in ast.walk(f)}
    modules = _modules()
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level == 0:
            if not (node.module or "").startswith("airflow_sqlqueue.transport"):
                continue
            base = (node.module or "").split(".")[2:]
        else:
            base = package[: len(package) - (node.level - 1)] + ((node.module or "").split(".") if node.module else [])
        targets = [base] if node.module else [base + [a.name] for a in node.names]
        for parts in targets:
            dotted = ".".join(parts) or "__init__"
            while dotted not in modules and "." in dotted:  # a name imported from a module, not a module
                dotted = dotted.rsplit(".", 1)[0]
            out.append((dotted, node.lineno, id(node) in in_functions))
    return out


def test_every_core_module_sits_on_a_floor() -> None:
    strays = sorted(n for n in _modules() if n.split(".")[0] not in FLOORS or (
        "." not in n and n not in ("transport", "__init__") and n not in FOLDERS))
    assert not strays, f"put these modules into one of the floors {FOLDERS}: {strays}"


@pytest.mark.parametrize("name", sorted(_modules()))
def test_imports_point_down(name: str) -> None:
    path = _modules()[name]
    for target, line, in_function in _imports(path, name):
        where = f"{path.relative_to(CORE)}:{line}"
        assert not in_function, f"{where} imports {target} inside a function"
        assert target in _modules(), f"{where} imports unknown module {target}"
        if target == name:
            continue
        assert _floor(target) <= _floor(name), (
            f"{where} imports {target} (floor {FLOORS[_floor(target)]}) from floor {FLOORS[_floor(name)]}: "
            "imports must point down")


def test_no_cycle_inside_a_floor() -> None:
    graph = {name: {t for t, _, _ in _imports(path, name) if t != name} for name, path in _modules().items()}

    def visit(node: str, trail: list[str]) -> None:
        if node in trail:
            pytest.fail("import cycle: " + " -> ".join(trail[trail.index(node):] + [node]))
        for nxt in graph.get(node, ()):
            if nxt != node and nxt not in done:
                visit(nxt, trail + [node])
        done.add(node)

    done: set[str] = set()
    for name in graph:
        visit(name, [])


@pytest.mark.parametrize("folder", FOLDERS)
def test_each_floor_says_what_it_is_for_and_what_it_may_import(folder: str) -> None:
    doc = ast.get_docstring(ast.parse((CORE / folder / "__init__.py").read_text(encoding="utf-8"))) or ""
    said = re.search(r"May import: (.*)\.", doc)
    assert said, f"transport/{folder}/__init__.py: say what the floor is for and 'May import: ...'"
    below = FOLDERS[: FOLDERS.index(folder)]
    assert said.group(1) == (", ".join(below) or "nothing of the core"), (
        f"transport/{folder}/__init__.py says it may import {said.group(1)!r}; the floors below it are {below}")


def test_the_core_imports_no_optional_dependency() -> None:
    """The core works with the package and one driver: pyarrow, PySpark and OpenLineage are never imported
    by it (drivers are imported where a connection is made)."""
    for path in CORE.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else []
            for n in names:
                assert n.split(".")[0] not in ("pyarrow", "pyspark", "openlineage"), f"{path} imports {n}"


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


def _private_airflow_imports(path: Path) -> list[str]:
    """Import statements of a private Airflow module or name (a part starting with ``_``) in one Python file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        private = [name for name in names if name.split(".")[0] == "airflow"
                   and any(part.startswith("_") for part in name.split("."))]
        found += [f"{path.name}:{node.lineno} {private[0]}"] if private else []
    return found


def test_nothing_imports_a_private_airflow_module_or_name(tmp_path: Path) -> None:
    """Private Airflow modules (``airflow._shared``, ``airflow.sdk._shared``) and names move in any release."""
    root = PACKAGE.parent
    files = [p for folder in ("airflow_sqlqueue", "tests", "bench", "scripts") for p in (root / folder).rglob("*.py")]
    assert len(files) > 100
    assert [hit for path in files for hit in _private_airflow_imports(path)] == []
    probe = tmp_path / "probe.py"
    probe.write_text("from airflow.sdk._shared.observability.metrics import stats\nfrom airflow.x import _y\n"
                     "import airflow._z\nfrom airflow.sdk.observability import stats\n", encoding="utf-8")
    assert len(_private_airflow_imports(probe)) == 3  # the scan finds what it looks for


def test_tests_reach_postgresql_only_through_the_test_url() -> None:
    """``SQLQUEUE_TEST_PG_URL`` chooses the test server and database: no test module names one of its own (a
    connection to a closed port, ``:1``, or a malformed URL reaches no server and may say what it likes)."""
    root = PACKAGE.parent / "tests"
    url = re.compile(r"postgresql://[^\s\"']*@127\.0\.0\.1:5432/")
    fields = re.compile(r'\{[^{}]*"conn_type": "postgres"[^{}]*\}')
    allowed = {root / "conftest.py", root / "airflow_env.py", root / "deployment" / "harness.py"}  # the defaults
    found = []
    for path in sorted(root.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        if path in allowed:
            continue
        found += [f"{path.relative_to(root)}: {m.group(0)[:60]}" for m in url.finditer(text)]
        found += [f"{path.relative_to(root)}: {m.group(0)[:60]}" for m in fields.finditer(text)
                  if '"host": "127.0.0.1"' in m.group(0) and '"port": 1,' not in m.group(0)
                  and '"port": 1}' not in m.group(0)]
    assert found == []
