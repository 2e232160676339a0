"""A real Airflow deployment started by a test: scheduler, dag-processor, triggerer, api-server and (with the
CeleryExecutor) Celery workers as separate processes, metadata on a fresh PostgreSQL database.

The harness knows only the PIDs it started: ``stop()`` ends their process groups and drops the database. Every
wait is bounded; on a timeout the error names what was awaited and where the component logs are.
"""

from __future__ import annotations

import atexit
import os
import re
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

BIN = Path(sys.executable).parent
PG_SERVER = os.environ.get("SQLQUEUE_TEST_PG_SERVER", "postgresql://postgres@127.0.0.1:5432")
PG_URL = os.environ.get("SQLQUEUE_TEST_PG_URL", f"{PG_SERVER}/test")
BROKERS = {"redis": "redis://127.0.0.1:6379/{db}", "rabbitmq": "amqp://guest:guest@127.0.0.1:5672//"}


#: Deployments started and not stopped yet: stopped at exit, and on SIGTERM (a CI timeout), so no component and no
#: database outlives the test session.
_LIVE: list[Deployment] = []


def _stop_all(*_: object) -> None:
    for deployment in list(_LIVE):
        deployment.stop()


def _on_sigterm(signum: int, frame: Any) -> None:
    _stop_all()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


atexit.register(_stop_all)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def session_pids(session: int) -> list[int]:
    """The PIDs of the processes of a session (``/proc``; Linux)."""
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == session:  # after "(comm)": state, ppid, pgrp, session
            pids.append(int(stat.parent.name))
    return pids


def session_cpu_seconds(session: int) -> float:
    """CPU seconds (user + system) of a session's live processes and of the children they reaped (``/proc``;
    Linux): a task process reaped by its supervisor counts in the supervisor's."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in session_pids(session):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += sum(int(f) for f in fields[11:15])  # utime, stime, cutime, cstime
    return total / ticks


def wait_for(what: str, check: Callable[[], Any], timeout: float, interval: float = 0.5,
              hint: str = "") -> Any:
    """Poll ``check`` until it returns something truthy; a TimeoutError naming ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up after {timeout:.0f} s waiting for {what}. {hint}")
        time.sleep(interval)


@dataclass
class Process:
    name: str
    args: list[str]
    env: dict[str, str]
    log: Path
    popen: subprocess.Popen | None = None


@dataclass
class Deployment:
    """One Airflow deployment in ``root``. Use as a context manager, or call ``start()`` and ``stop()``.

    :param dags: DAG files copied into the deployment's DAGs folder.
    :param executor: ``LocalExecutor`` or ``CeleryExecutor``.
    :param env: extra environment of every component (and of the tasks they run).
    :param workers: Celery workers to start (CeleryExecutor only), each with ``concurrency`` slots.
    """

    root: Path
    dags: Sequence[Path]
    executor: str = "LocalExecutor"
    env: dict[str, str] = field(default_factory=dict)
    workers: int = 2
    concurrency: int = 2
    broker: str = "redis"
    api_server: bool = True
    connections: dict[str, str] = field(default_factory=dict)
    #: extra modules put on every component's path (test-only triggers and hooks)
    pylib: Sequence[Path] = ()
    processes: dict[str, Process] = field(default_factory=dict)
    #: the session of every process started (its PID): ``stop()`` ends what is left in them (orphaned task processes)
    sessions: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.root = Path(self.root)
        self.database = "af_" + uuid.uuid4().hex[:12]
        self.metadata_url = f"{PG_SERVER}/{self.database}"
        self.port = free_port()
        self.trigger_log_port, self.worker_log_port = free_port(), free_port()
        self.celery_queue = "sqlqueue_" + uuid.uuid4().hex[:8]  # other deployments on this broker never see ours
        self.jwt_secret = secrets.token_hex(16)  # one for every component: the API checks the workers' tokens
        self.broker_url = BROKERS[self.broker].format(db=int(uuid.uuid4().int % 14) + 1)

    # -- environment ---------------------------------------------------------------------------------
    def base_env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "SQLQUEUE_EXAMPLE"))}
        home = self.root / "home"
        env.update({
            "PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}",
            # only the hostname module: the source tree on the path would list the provider's entry points twice
            # (its .egg-info beside the installed one), and Airflow would warn about a plugin registered twice
            "PYTHONPATH": str(self.root / "pylib"),
            "PYTHONUNBUFFERED": "1",
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(self.root / "dags"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__EXECUTOR": self.executor,
            "AIRFLOW__CORE__PARALLELISM": "8",
            "AIRFLOW__CORE__HOSTNAME_CALLABLE": "sqlqueue_deploy_worker_name.hostname",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{self.port}/execution/",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": self.metadata_url.replace("postgresql://",
                                                                              "postgresql+psycopg://", 1),
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(self.port),
            "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{self.port}",
            "AIRFLOW__API__WORKERS": "1",
            "AIRFLOW__API_AUTH__JWT_SECRET": self.jwt_secret,
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "30",
            "AIRFLOW__DAG_PROCESSOR__PARSING_PROCESSES": "1",
            "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "20",
            "AIRFLOW__TRIGGERER__TRIGGERER_HEALTH_CHECK_THRESHOLD": "10",
            "AIRFLOW__OPERATORS__DEFAULT_QUEUE": self.celery_queue,
            "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
            # the log servers of the triggerer and of LocalExecutor tasks on free ports: two deployments on one
            # machine (other tests, other sessions) would both bind 8794 / 8793, and the second logs an ERROR
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(self.trigger_log_port),
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(self.worker_log_port),
        })
        if self.executor == "CeleryExecutor":
            env["AIRFLOW__CELERY__BROKER_URL"] = self.broker_url
            env["AIRFLOW__CELERY__RESULT_BACKEND"] = "db+" + self.metadata_url
            env["AIRFLOW__CELERY__WORKER_CONCURRENCY"] = str(self.concurrency)
        env.update(self.env)
        return env

    # -- life cycle ------------------------------------------------------------------------------------
    def __enter__(self) -> Deployment:
        try:
            self.start(self.connections)
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, connections: dict[str, str] | None = None) -> None:
        """Create the metadata database, migrate it, start every component, add ``connections`` (id: URI or JSON) with
        ``airflow connections add`` while they start; return once they are up."""
        if not _LIVE and signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
            signal.signal(signal.SIGTERM, _on_sigterm)
        _LIVE.append(self)
        (self.root / "logs").mkdir(parents=True, exist_ok=True)
        (self.root / "pylib").mkdir(exist_ok=True)
        shutil.copy(Path(__file__).with_name("worker_name.py"), self.root / "pylib" / "sqlqueue_deploy_worker_name.py")
        for module in self.pylib:
            shutil.copy(module, self.root / "pylib" / Path(module).name)
        dags = self.root / "dags"
        dags.mkdir(exist_ok=True)
        for dag in self.dags:
            shutil.copy(dag, dags / Path(dag).name)
        with psycopg.connect(f"{PG_SERVER}/postgres", autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{self.database}"')
        self.airflow("db", "migrate", timeout=300)
        for name, args in self.components():
            self.start_process(name, args)
        for conn_id, uri in (connections or {}).items():  # a URI, or a connection's JSON form (``{...}``)
            self.airflow("connections", "add", conn_id, "--conn-json" if uri.startswith("{") else "--conn-uri", uri,
                         timeout=300)  # a CLI start beside starting components, on a busy machine
        self.wait_started()

    def components(self) -> list[tuple[str, list[str]]]:
        parts = [("scheduler", ["airflow", "scheduler"]), ("dag-processor", ["airflow", "dag-processor"]),
                 ("triggerer", ["airflow", "triggerer"])]
        if self.api_server:
            parts.append(("api-server", ["airflow", "api-server", "--port", str(self.port)]))
        if self.executor == "CeleryExecutor":
            parts += [(f"worker{i}", self.worker_args(i)) for i in range(1, self.workers + 1)]
        return parts

    def worker_args(self, index: int) -> list[str]:
        return ["airflow", "celery", "worker", "--concurrency", str(self.concurrency), "--queues", self.celery_queue,
                "--celery-hostname", f"worker{index}-{self.celery_queue}@%h", "--without-mingle",
                "--without-gossip", "--skip-serve-logs"]

    def start_process(self, name: str, args: list[str]) -> Process:
        env = self.base_env()
        if name.startswith("worker"):
            env["SQLQUEUE_DEPLOY_WORKER"] = env["WORKER_NAME"] = name  # the second: docs/scale-out.md's name
        log = self.root / "logs" / f"{name}.log"
        process = Process(name, args, env, log)
        with open(log, "ab") as out:
            process.popen = subprocess.Popen(args, env=env, cwd=self.root, stdout=out, stderr=subprocess.STDOUT,
                                             stdin=subprocess.DEVNULL, start_new_session=True)
        self.sessions.append(process.popen.pid)
        self.processes[name] = process
        return process

    def wait_started(self, timeout: float = 240) -> None:
        """Every component up: scheduler and triggerer heartbeating, the API answering, workers registered."""
        def alive() -> bool:
            self.check_running()
            jobs = {row[0] for row in self.query(
                "SELECT job_type FROM job WHERE state = 'running' AND latest_heartbeat > now() - interval '30 s'")}
            return {"SchedulerJob", "TriggererJob"} <= jobs
        wait_for("the scheduler and the triggerer to heartbeat", alive, timeout, hint=self.where_logs())
        if self.api_server:
            wait_for("the API server", self.api_answers, timeout, hint=self.where_logs())
        for name in self.processes:
            if name.startswith("worker"):
                wait_for(f"Celery {name} to be ready", lambda n=name: "ready." in self.log_text(n), timeout,
                         hint=self.where_logs())

    def api_answers(self) -> bool:
        self.check_running()
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/api/v2/monitor/health", timeout=5):
                return True
        except OSError:
            return False

    def check_running(self) -> None:
        for process in self.processes.values():
            if process.popen is not None and process.popen.poll() is not None:
                raise RuntimeError(f"{process.name} exited with {process.popen.returncode}; see {process.log}")

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        """Send ``sig`` to the process group of a component this harness started (it and its children)."""
        process = self.processes.pop(name)
        if process.popen is None or process.popen.poll() is not None:
            return
        try:
            os.killpg(process.popen.pid, sig)
        except ProcessLookupError:
            pass
        try:
            process.popen.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(process.popen.pid, signal.SIGKILL)
            process.popen.wait(10)

    def kill_session(self, name: str, sig: int = signal.SIGKILL) -> list[int]:
        """Send ``sig`` to every process of a component's session (started with ``start_new_session``): the
        component and all it started, their own process groups included, as a crashed machine or container. (An
        Airflow task process runs in a process group of its own: ``kill()`` of a Celery worker leaves it running,
        an orphan.) Returns the PIDs signalled."""
        process = self.processes.pop(name)
        if process.popen is None or process.popen.poll() is not None:
            return []
        pids = session_pids(process.popen.pid)
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        try:
            process.popen.wait(30)
        except subprocess.TimeoutExpired:
            pass
        return pids

    def cpu_seconds(self) -> dict[str, float]:
        """CPU seconds used so far by each component's session (the scheduler's includes its LocalExecutor workers
        and the task processes they ran)."""
        return {name: session_cpu_seconds(p.popen.pid) for name, p in self.processes.items() if p.popen is not None}

    def restart(self, name: str, args: list[str] | None = None) -> Process:
        args = args or dict(self.components())[name]
        return self.start_process(name, args)

    def stop(self) -> None:
        """End every component this harness started (SIGTERM, then SIGKILL), then drop the database."""
        if self in _LIVE:
            _LIVE.remove(self)
        for name in list(self.processes):
            process = self.processes[name]
            if process.popen is not None and process.popen.poll() is None:
                try:
                    os.killpg(process.popen.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + 20
        for name in list(self.processes):
            popen = self.processes.pop(name).popen
            if popen is None:
                continue
            try:
                popen.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            try:
                os.killpg(popen.pid, signal.SIGKILL)  # also children left behind by a clean exit
            except ProcessLookupError:
                pass
            try:
                popen.wait(10)
            except subprocess.TimeoutExpired:
                pass
        for session in self.sessions:  # task processes run in process groups of their own: an orphan may be left
            for pid in session_pids(session):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        try:
            with psycopg.connect(f"{PG_SERVER}/postgres", autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{self.database}" WITH (FORCE)')
        except psycopg.Error:
            pass

    # -- commands and the metadata database -------------------------------------------------------------
    def airflow(self, *args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess:
        """Run an ``airflow`` CLI command with the deployment's environment."""
        return self.run([str(BIN / "airflow"), *args], timeout=timeout, check=check)

    def run(self, args: Sequence[str], *, timeout: float = 120, check: bool = True, input: str | None = None,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        result = subprocess.run(list(args), env={**self.base_env(), **(env or {})}, cwd=self.root, text=True,
                                capture_output=True, timeout=timeout, input=input)
        if check and result.returncode != 0:
            raise RuntimeError(f"{' '.join(args[:3])} failed ({result.returncode}): "
                               f"{result.stderr.strip()[-2000:]}")
        return result

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple]:
        with psycopg.connect(self.metadata_url, autocommit=True) as conn:
            cursor = conn.execute(sql, params)  # type: ignore[arg-type]
            return cursor.fetchall() if cursor.description else []

    def set_paused(self, dag_id: str, paused: bool) -> None:
        self.query("UPDATE dag SET is_paused = %s WHERE dag_id = %s", (paused, dag_id))

    def wait_parsed(self, dag_ids: Iterable[str], timeout: float = 180) -> None:
        wanted = set(dag_ids)

        def parsed() -> bool:
            self.check_running()
            rows = self.query("SELECT dag_id FROM serialized_dag")
            errors = self.query("SELECT filename, stacktrace FROM import_error")
            if errors:
                raise RuntimeError(f"DAG import errors: {errors}")
            return wanted <= {r[0] for r in rows}
        wait_for(f"DAGs {sorted(wanted)} to be parsed", parsed, timeout, hint=self.where_logs())

    def log_text(self, name: str) -> str:
        path = self.root / "logs" / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def where_logs(self) -> str:
        return f"Component logs: {self.root / 'logs'}"

    def log_files(self) -> list[Path]:
        """Every log the deployment wrote: the components' (scheduler, triggerer, dag-processor, api-server, Celery
        workers) and Airflow's own files under ``$AIRFLOW_HOME/logs`` (task attempts, the DAG processor's)."""
        files = sorted((self.root / "logs").glob("*.log"))
        home_logs = self.root / "home" / "logs"
        if home_logs.exists():
            files += sorted(path for path in home_logs.rglob("*") if path.is_file())
        return files

    def scan_logs(self, markers: Iterable[str], allow: Iterable[str | re.Pattern[str]] = (),
                  allow_bodies: Iterable[str | re.Pattern[str]] = ()) -> list[LogFinding]:
        """Lines of every log that hold one of ``markers`` (text only message bodies carry) or are at ERROR level
        or above, less the ERROR lines a pattern of ``allow`` matches (``re.search``). A line with a body is
        always a finding, unless it is an ERROR line that both ``allow`` and ``allow_bodies`` match."""
        markers = [m for m in markers if m]
        allowed = [re.compile(a) if isinstance(a, str) else a for a in allow]
        bodies_allowed = [re.compile(a) if isinstance(a, str) else a for a in allow_bodies]
        found: list[LogFinding] = []
        for path in self.log_files():
            for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                error = bool(ERROR_LINE.search(line))
                explained = error and any(a.search(line) for a in allowed)
                if any(marker in line for marker in markers):
                    if not (explained and any(a.search(line) for a in bodies_allowed)):
                        found.append(LogFinding(path, number, line, "message body"))
                elif error and not explained:
                    found.append(LogFinding(path, number, line, "ERROR"))
        return found

    def check_logs(self, markers: Iterable[str], allow: Iterable[str | re.Pattern[str]] = (),
                   allow_bodies: Iterable[str | re.Pattern[str]] = ()) -> None:
        """Fail when a log holds a message body (one of ``markers``) or an ERROR line ``allow`` does not explain
        (issue 29: no message body in any log at INFO, no ERROR line that is not an error)."""
        found = self.scan_logs(markers, allow, allow_bodies)
        if found:
            shown = "\n".join(str(f) for f in found[:30])
            raise AssertionError(f"{len(found)} log lines with a message body or an unexplained ERROR "
                                 f"(first {min(30, len(found))}):\n{shown}")


#: ERROR lines Airflow 3.3.2 itself writes in these deployments that are not errors of the deployment (use in
#: ``allow``): the triggerer's supervisor builds its in-process execution API on a trigger's first connection
#: lookup; on a busy machine that takes 30-70 s, and the triggerer says its event loop "appears deadlocked" (it
#: recovers; tests/deployment/test_event_deployment.py::test_triggerer_starts_clean is an xfail for it).
AIRFLOW_FALSE_ALARMS = (r"TriggerRunner subprocess event loop appears deadlocked",)

#: A log line at ERROR level or above, in the formats the deployment writes: structlog's console form
#: (``[error    ]``), the task logs' JSON (``"level":"error"``), logging's and Celery's (``ERROR/MainProcess``).
ERROR_LINE = re.compile(r"\[(?:error|critical|exception)\s*\]|\"level\":\s*\"(?:error|critical|exception)\"|"
                        r"\b(?:ERROR|CRITICAL|FATAL)\b")


@dataclass
class LogFinding:
    """One offending log line."""

    path: Path
    line_no: int
    line: str
    kind: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.path.parent.name}/{self.path.name}:{self.line_no}: {self.line[:400]}"


# -- figures ---------------------------------------------------------------------------------------------
def percentile(values: Sequence[float], p: float) -> float | None:
    if not values:
        return None
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(p) - 1]


FIGURE_COLUMNS = ("scenario", "sent", "asset events", "DAG runs", "handled", "waiting", "duplicates",
                  "send->run start p50 s", "p95 s")


def figures_table(rows: Sequence[dict[str, Any]]) -> str:
    def cell(value: Any) -> str:
        return f"{value:.1f}" if isinstance(value, float) else str(value)
    lines = ["| " + " | ".join(FIGURE_COLUMNS) + " |", "|" + "---|" * len(FIGURE_COLUMNS)]
    lines += ["| " + " | ".join(cell(row.get(c, "")) for c in FIGURE_COLUMNS) + " |" for row in rows]
    return "\n".join(lines)
