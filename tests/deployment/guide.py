"""docs/scale-out.md as a test reads it: its settings table, its code blocks, and the deployment that runs them.

The page's blocks are used as they stand; ``SUBSTITUTIONS`` lists the only changes (each must be found in the
page, so the page and the test cannot drift apart silently).
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

from tests.deployment.harness import Deployment

PAGE = Path(__file__).resolve().parents[2] / "docs" / "scale-out.md"
#: ``[core] hostname_callable`` as the page sets it (its ``worker_name.py`` block, written on the PYTHONPATH).
HOSTNAME_CALLABLE = "worker_name.hostname"
#: The DAG ids the page's sections become (section 1 names its own).
DRAIN_DAG, HANDLE_DAG, PARTITION_DAG = "drain_audit", "guide_handle_audit", "guide_partition_audit"


def page_text() -> str:
    return PAGE.read_text(encoding="utf-8")


def block(text: str, language: str, marker: str) -> str:
    """The one fenced ``language`` block of the page that contains ``marker``."""
    found = [b for b in re.findall(rf"```{language}\n(.*?)```", text, re.S) if marker in b]
    assert len(found) == 1, f"docs/scale-out.md has {len(found)} {language} blocks with {marker!r} (want 1)"
    return found[0]


def settings_table(text: str) -> dict[str, tuple[str, str]]:
    """Section 1's settings: name -> (value cell, checked-with cell)."""
    rows: dict[str, tuple[str, str]] = {}
    start = text.index("| setting | value | checked with | why |")
    for line in text[start:].splitlines()[2:]:
        if not line.startswith("| `AIRFLOW__"):
            break
        cells = [c.strip() for c in line.strip("|").split(" | ")]
        rows[cells[0].strip("`")] = (cells[1], cells[2])
    return rows


def checked_values(cell: str) -> list[str]:
    """The backticked values of a checked-with cell (alternatives joined by "or")."""
    return re.findall(r"`([^`]*)`", cell)


def substitute(code: str, changes: dict[str, str]) -> str:
    for old, new in changes.items():
        assert code.count(old) == 1, f"docs/scale-out.md no longer has {old!r} once in:\n{code}"
        code = code.replace(old, new)
    return code


def dag_source(text: str, lake: str) -> str:
    """One DAG file from sections 1-3: section 1's DAG as it stands, the exactly-once task and the partitioned drain
    each in a DAG of its own (the page shows them as tasks)."""
    drain = substitute(block(text, "python", ".expand(max_concurrency="),
                       {'schedule="@hourly"': "schedule=None", '"s3://lake': f'"{lake}'})
    handle = block(text, "python", "def record(")
    partition = substitute(block(text, "python", "SqlQueuePlanPartitionsOperator("),
                           {'"s3://lake': f'"{lake}', "messages_per_partition=250_000": "messages_per_partition=2_000"})
    wrap = 'with DAG("{dag}", schedule=None, start_date=datetime(2024, 1, 1), catchup=False, max_active_tasks=8):\n'
    return "\n".join([
        '"""DAGs made by tests/deployment/guide.py from docs/scale-out.md sections 1-3."""', drain,
        wrap.format(dag=HANDLE_DAG) + textwrap.indent(handle, "    "),
        wrap.format(dag=PARTITION_DAG) + textwrap.indent(partition, "    "),
    ])


def deployment(root: Path, broker: str, queue_db_url: str) -> Deployment:
    """The page's deployment: CeleryExecutor, two workers of concurrency 2, ``broker``, the page's DAGs,
    ``worker_name.py`` and ``hostname_callable``, the queue database as ``sqlqueue_default``."""
    root = Path(root)
    text = page_text()
    (root / "pylib").mkdir(parents=True, exist_ok=True)
    (root / "pylib" / "worker_name.py").write_text(block(text, "python", "def hostname("))
    (root / "guide").mkdir(exist_ok=True)
    dag = root / "guide" / "scale_out_guide.py"
    dag.write_text(dag_source(text, str(root / "lake")))
    return Deployment(root, [dag], executor="CeleryExecutor", workers=2, concurrency=2, broker=broker,
                      env={"AIRFLOW__CORE__HOSTNAME_CALLABLE": HOSTNAME_CALLABLE},
                      connections={"sqlqueue_default": queue_db_url})


def normalized_env(d: Deployment) -> dict[str, str]:
    """The deployment's settings with what is drawn per run replaced by the page's placeholders."""
    env = d.base_env()
    out = {}
    for key, value in env.items():
        if not key.startswith("AIRFLOW__"):
            continue
        value = value.replace(d.jwt_secret, "<secret>").replace(d.database, "<db>").replace(str(d.port), "<port>")
        value = value.replace(d.celery_queue, "<queue>")
        out[key] = re.sub(r"^(redis://[^/]+)/\d+$", r"\1/<n>", value)
    return out
