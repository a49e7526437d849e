"""A real Spark standalone cluster on this machine, for the scale-out test and the read benchmark:
a master and N workers started with the PySpark distribution's own ``sbin/spark-daemon.sh`` (the
script behind Spark's start-master.sh / start-worker.sh, which the wheel does not ship), and a
Spark Connect server on that master started by ``scripts/services.sh start spark`` (the same command
as the long-lived Spark, pointed at the cluster). Where tasks ran is read from Spark's own status:
the driver's REST API (tasks per executor) and each worker's JSON (its executors).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.airflow_server import free_port

ROOT = Path(__file__).resolve().parent.parent
MASTER = "org.apache.spark.deploy.master.Master"
WORKER = "org.apache.spark.deploy.worker.Worker"


def spark_home() -> Path:
    import pyspark  # noqa: PLC0415

    return Path(pyspark.__file__).resolve().parent


def get_json(url: str, timeout: float = 10) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return json.loads(resp.read())


@dataclass
class SparkCluster:
    home: Path
    workers: int = 2
    worker_memory: str = "1g"
    master_port: int = field(default_factory=free_port)
    master_ui: int = field(default_factory=free_port)
    connect_port: int = field(default_factory=free_port)
    driver_ui: int = field(default_factory=free_port)
    worker_uis: list[int] = field(default_factory=list)

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.master_port}"

    @property
    def remote(self) -> str:
        return f"sc://127.0.0.1:{self.connect_port}"

    def _daemon_env(self) -> dict[str, str]:
        return {**os.environ, "SPARK_HOME": str(spark_home()), "SPARK_LOG_DIR": str(self.home / "logs"),
                "SPARK_PID_DIR": str(self.home / "pids"), "SPARK_WORKER_DIR": str(self.home / "work"),
                "SPARK_DAEMON_MEMORY": "256m", "SPARK_LOCAL_IP": "127.0.0.1",
                "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
                "SPARK_IDENT_STRING": f"cdcflow-{self.master_port}"}

    def connect_env(self) -> dict[str, str]:
        """The environment under which scripts/services.sh runs this cluster's Spark Connect server."""
        return {**os.environ, "CDCFLOW_SPARK_MASTER": self.master_url, "CDCFLOW_SPARK_DIR": str(self.home / "connect"),
                "CDCFLOW_SPARK_CONNECT_PORT": str(self.connect_port), "CDCFLOW_SPARK_REMOTE": self.remote,
                "CDCFLOW_SPARK_UI_PORT": str(self.driver_ui), "CDCFLOW_SPARK_MEMORY": "1g",
                "CDCFLOW_SPARK_EXECUTOR_MEMORY": "512m"}

    def _daemon(self, action: str, cls: str, instance: int, *args: str) -> None:
        script = spark_home() / "sbin" / "spark-daemon.sh"
        out = subprocess.run(["bash", str(script), action, cls, str(instance), *args], env=self._daemon_env(),
                             capture_output=True, text=True, timeout=120)
        if out.returncode != 0:
            raise RuntimeError(f"spark-daemon.sh {action} {cls} {instance} failed:\n{out.stdout}\n{out.stderr}\n"
                               + self.log_tail())

    def _services(self, action: str) -> None:
        out = subprocess.run(["bash", str(ROOT / "scripts/services.sh"), action, "spark"], env=self.connect_env(),
                             capture_output=True, text=True, timeout=300)
        if out.returncode != 0:
            raise RuntimeError(f"services.sh {action} spark (cluster) failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")

    def start(self) -> None:
        for sub in ("logs", "pids", "work", "connect"):
            (self.home / sub).mkdir(parents=True, exist_ok=True)
        self._daemon("start", MASTER, 1, "--host", "127.0.0.1", "--port", str(self.master_port),
                     "--webui-port", str(self.master_ui))
        self.worker_uis = [free_port() for _ in range(self.workers)]
        self._wait(lambda: self.master_state()["status"] == "ALIVE", "the master to be ALIVE")
        for i, ui in enumerate(self.worker_uis, start=1):
            self._daemon("start", WORKER, i, "--host", "127.0.0.1", "--webui-port", str(ui), "--cores", "1",
                         "--memory", self.worker_memory, self.master_url)
        self._wait(lambda: self.master_state()["aliveworkers"] == self.workers, f"{self.workers} alive workers")
        self._services("start")
        # executors are granted when the first session asks: wait until every worker runs one
        self._wait(lambda: len(self.executor_workers()) == self.workers, "an executor on every worker",
                   poke=self._poke)

    def _poke(self) -> None:
        # in a child process: a Spark Connect session switches this process's pyspark.sql.functions
        # to Connect columns (SPARK_CONNECT_MODE_ENABLED), which the in-process tests cannot use
        code = ("from pyspark.sql import SparkSession; s = SparkSession.builder.remote(%r).create(); "
                "s.range(0, 4, 1, 4).collect(); s.stop()" % self.remote)
        subprocess.run([sys.executable, "-c", code], env=self.connect_env(), capture_output=True, timeout=300,
                       check=False)

    def stop(self) -> None:
        for action in (lambda: self._services("stop"),
                       *[lambda i=i: self._daemon("stop", WORKER, i) for i in range(1, self.workers + 1)],
                       lambda: self._daemon("stop", MASTER, 1)):
            try:
                action()
            except RuntimeError:
                pass  # stop the rest regardless

    def _wait(self, ready: Any, what: str, timeout: float = 120, poke: Any = None) -> None:
        deadline = time.monotonic() + timeout
        poked = False
        while True:
            try:
                if ready():
                    return
            except OSError:
                pass
            if poke is not None and not poked:
                poke()
                poked = True
            if time.monotonic() > deadline:
                raise RuntimeError(f"Spark cluster: timed out waiting for {what}\n{self.log_tail()}")
            time.sleep(0.5)

    def master_state(self) -> dict[str, Any]:
        return get_json(f"http://127.0.0.1:{self.master_ui}/json/")

    def executor_workers(self) -> dict[str, str]:
        """Executor id -> worker id, from each worker's own status (running executors)."""
        out = {}
        for ui in self.worker_uis:
            state = get_json(f"http://127.0.0.1:{ui}/json/")
            for ex in state["executors"]:
                out[str(ex["id"])] = state["id"]
        return out

    def stages(self) -> list[dict[str, Any]]:
        """The Connect server application's completed stages, with their tasks (driver REST API)."""
        base = f"http://127.0.0.1:{self.driver_ui}/api/v1/applications"
        [app] = get_json(base)
        return get_json(f"{base}/{app['id']}/stages?status=complete&details=true")

    def log_tail(self) -> str:
        parts = []
        for path in sorted((self.home / "logs").glob("*.out")) + [self.home / "connect" / "connect.log"]:
            if path.exists():
                parts.append(f"--- {path.name}\n" + path.read_text(errors="replace")[-1500:])
        return "\n".join(parts)
