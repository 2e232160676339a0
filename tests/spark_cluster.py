"""A Spark standalone cluster (a master, two workers) and a Spark Connect server, started for tests from the
pip-installed PySpark distribution, on loopback and free ports; stopped by PID.

Each process is started with the distribution's own launcher, ``$SPARK_HOME/bin/spark-class <main class>``
(``spark-submit --class ...SparkConnectServer`` for Connect), which execs ``java -cp "$SPARK_HOME/jars/*" <main
class>`` with the JVM options Spark needs on Java 17: the PID we start is the JVM's. ``SPARK_HOME`` is the
``pyspark`` package folder. Nothing listens beyond 127.0.0.1; logs go to the given folder.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

#: How long a process may take to come up on 2 busy cores.
START_TIMEOUT = 180.0
DAEMON_MEMORY = "256m"


def spark_home() -> str:
    import pyspark

    return os.path.dirname(os.path.abspath(pyspark.__file__))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spark_env(home: str | None = None) -> dict[str, str]:
    """Environment of every Spark process here: the distribution, loopback, small daemons, no user config."""
    home = home or spark_home()
    return {**os.environ, "SPARK_HOME": home, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_LOCAL_HOSTNAME": "127.0.0.1",
            "SPARK_DAEMON_MEMORY": DAEMON_MEMORY, "SPARK_CONF_DIR": os.path.join(home, "conf")}


@dataclass
class SparkCluster:
    """A running standalone cluster: ``master_url`` is ``spark://127.0.0.1:<port>``."""

    folder: Path
    home: str = field(default_factory=spark_home)
    master_port: int = 0
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)
    connect_port: int | None = None

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.master_port}"

    def _start(self, name: str, command: list[str], **env: str) -> subprocess.Popen:
        log = open(self.folder / f"{name}.log", "wb")  # noqa: SIM115 - the process owns it until stop()
        process = subprocess.Popen(command, env={**spark_env(self.home), **env}, stdout=log, stderr=subprocess.STDOUT,
                                   cwd=self.folder, start_new_session=True)
        log.close()
        self.processes[name] = process
        return process

    def log(self, name: str) -> str:
        path = self.folder / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def _wait(self, name: str, pattern: str, count: int = 1) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while len(re.findall(pattern, self.log(name))) < count:
            process = self.processes[name]
            if process.poll() is not None:
                raise RuntimeError(f"{name} exited with {process.returncode}:\n{self.log(name)[-3000:]}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{name} did not log {pattern!r} {count}x in {START_TIMEOUT:.0f} s:\n"
                                   f"{self.log(name)[-3000:]}")
            time.sleep(0.5)

    def start(self, workers: int = 2, cores: int = 1, memory: str = "1g") -> SparkCluster:
        """Start the master and ``workers`` workers; return once every worker has registered."""
        self.folder.mkdir(parents=True, exist_ok=True)
        spark_class = os.path.join(self.home, "bin", "spark-class")
        self.master_port = free_port()
        self._start("master", [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                               "--port", str(self.master_port), "--webui-port", str(free_port())])
        self._wait("master", r"Starting Spark master at")
        for i in range(workers):
            work = self.folder / f"worker-{i}"
            work.mkdir(exist_ok=True)
            self._start(f"worker-{i}", [spark_class, "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                                        "--port", str(free_port()), "--webui-port", str(free_port()),
                                        "--cores", str(cores), "--memory", memory, "--work-dir", str(work),
                                        self.master_url])
        self._wait("master", r"Registering worker 127\.0\.0\.1", workers)
        return self

    def start_connect(self, conf: dict[str, str] | None = None) -> int:
        """Start a Spark Connect server whose executors run on this cluster; return its port once it listens."""
        port = free_port()
        settings = {"spark.connect.grpc.binding.address": "127.0.0.1", "spark.connect.grpc.binding.port": str(port),
                    "spark.ui.enabled": "false", **(conf or {})}
        command = [os.path.join(self.home, "bin", "spark-submit"), "--master", self.master_url, "--class",
                   "org.apache.spark.sql.connect.service.SparkConnectServer", "--name", "sqlqueue-connect-test"]
        for key, value in settings.items():
            command += ["--conf", f"{key}={value}"]
        # spark-submit treats the server like a daemon: its heap is SPARK_DAEMON_MEMORY (a driver needs > 450 MB)
        self._start("connect", [*command, "spark-internal"], SPARK_DAEMON_MEMORY="1g")
        self._wait("connect", r"Spark Connect server started")
        self.connect_port = port
        return port

    def work_dirs_with_executors(self) -> list[str]:
        """The workers that ran at least one executor (an ``app-*`` folder in their work dir)."""
        return sorted(name for name in self.processes if name.startswith("worker-")
                      and any(p.name.startswith("app-") for p in (self.folder / name).iterdir()))

    def stop(self) -> None:
        """Stop every process started here, by PID (TERM, then KILL after 20 s); the newest first."""
        for process in reversed(list(self.processes.values())):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(timeout=20)
        self.processes.clear()
