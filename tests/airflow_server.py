"""A real Airflow api-server (with the cdcflow plugin) for tests: its own AIRFLOW_HOME and SQLite DB,
its own pipeline directory and offset store, two users (admin may edit, viewer may only read).
``make_celery_server``: the same, as scripts/services.sh runs Airflow with CDCFLOW_AIRFLOW_EXECUTOR=celery."""

from __future__ import annotations

import json
import os
import random
import secrets
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PASSWORDS = {"admin": "admin-pw", "viewer": "viewer-pw"}


def _ephemeral_floor() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port() -> int:
    """A free port below the kernel's ephemeral range, for a server a test starts later.

    A port the kernel hands out (bind to 0) is free now but may be given to any other socket before
    the server binds it: CI once lost a run when a Spark worker's own random port took the port
    chosen for Spark Connect. Ports below the ephemeral range are never handed out at random, so
    only another explicit choice could take one."""
    floor = _ephemeral_floor()
    low = max(20000, floor - 12000)
    for _ in range(200):
        port = random.randrange(low, floor)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port found in {low}-{floor - 1}")


@dataclass
class Response:
    status: int
    body: Any
    text: str


@dataclass
class AirflowServer:
    home: Path
    config_dir: Path
    store_url: str
    port: int
    env: dict[str, str]
    proc: subprocess.Popen[bytes] | None = None
    tokens: dict[str, str] = field(default_factory=dict)
    components: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def airflow(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        for attempt in range(3):
            result = subprocess.run(["airflow", *args], env=self.env, cwd=ROOT, capture_output=True, text=True,
                                    timeout=timeout)
            # Airflow's SQLite metadata DB takes one writer at a time: a CLI write that meets the
            # scheduler's fails with "database is locked" and its transaction rolls back; try again
            if result.returncode == 0 or "database is locked" not in result.stdout + result.stderr or attempt == 2:
                break
            time.sleep(2)
        if result.returncode != 0:
            raise RuntimeError(f"airflow {' '.join(args)} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
        return result

    def start(self) -> None:
        self.airflow("db", "migrate")
        log = open(self.home / "api-server.log", "wb")  # noqa: SIM115 - lives as long as the server
        self.proc = subprocess.Popen(["airflow", "api-server", "--host", "127.0.0.1", "--port", str(self.port),
                                      "--workers", "1"], env=self.env, cwd=ROOT, stdout=log, stderr=log)
        deadline = time.monotonic() + 120
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError("api-server exited:\n" + self.log_tail())
            try:
                if self.request("GET", "/api/v2/monitor/health", user=None).status == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("api-server not healthy after 120s:\n" + self.log_tail())
            time.sleep(0.5)
        self.login()

    def login(self) -> None:
        for user, password in PASSWORDS.items():
            r = self.request("POST", "/auth/token", {"username": user, "password": password}, user=None)
            assert r.status in (200, 201), r.text
            self.tokens[user] = r.body["access_token"]

    def start_scheduler(self, triggerer: bool = False) -> None:
        """The scheduler (LocalExecutor: each task in its own process) and the dag-processor, as
        scripts/services.sh runs them: Airflow as it runs in production, not ``dags test``; with
        ``triggerer``, the triggerer too (schedule: on_data)."""
        for part in ("scheduler", "dag-processor", *(("triggerer",) if triggerer else ())):
            self.components.append(self._spawn(part, b""))
        time.sleep(3)
        for proc in self.components:
            if proc.poll() is not None:
                raise RuntimeError(f"{proc.args} exited:\n" + self.log_tail())

    def revive(self) -> list[str]:
        """Start again the scheduler components that exited, as a process supervisor does in production
        (Airflow 3's scheduler can exit on an ObjectDeletedError when `airflow backfill create`
        replaces a DAG run it is scheduling: a race inside Airflow). Returns what it restarted; each
        restart is also logged to the component's log."""
        restarted = []
        for i, proc in enumerate(self.components):
            if proc.poll() is None:
                continue
            part = str(proc.args[1])  # type: ignore[index]
            note = f"\n--- test harness: {part} exited with {proc.returncode}; started again\n"
            self.components[i] = self._spawn(part, note.encode())
            restarted.append(part)
        return restarted

    def _spawn(self, part: str, note: bytes) -> subprocess.Popen[bytes]:
        """``airflow <part>`` writing to <part>.log: a new log, or (``note``: a restart) appended to."""
        log = open(self.home / f"{part}.log", "ab" if note else "wb")  # noqa: SIM115 - lives as long as the process
        log.write(note)
        log.flush()
        return subprocess.Popen(["airflow", part], env=self.env, cwd=ROOT, stdout=log, stderr=log)

    def log_tail(self) -> str:
        out = []
        for name in ("api-server", "scheduler", "dag-processor", "triggerer"):
            path = self.home / f"{name}.log"
            if path.exists():
                out.append(f"--- {name}\n" + path.read_text(errors="replace")[-3000:])
        return "\n".join(out)

    def stop(self) -> None:
        for proc in self.components:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()

    def own_dags_folder(self) -> Path:
        """A DAGs folder of this server's own: the project's DAG files, linked, and the DAGs a test
        writes beside them (a downstream DAG scheduled on a table's asset). Call before ``start``."""
        dags = self.home / "dags"
        dags.mkdir(exist_ok=True)
        for dag_file in (ROOT / "dags").glob("*.py"):
            (dags / dag_file.name).symlink_to(dag_file)
        self.env["AIRFLOW__CORE__DAGS_FOLDER"] = str(dags)
        return dags

    def sync_dags(self) -> None:
        """Parse the pipeline files into Airflow's DB (what the dag-processor does in production)."""
        self.airflow("dags", "reserialize")

    # -- DAGs and their runs, through the REST API (the scheduler and Celery tests, the Celery fault campaign)
    def wait_for_dag(self, dag_id: str, timeout: float = 120) -> None:
        """Until the dag-processor has loaded the DAG (a pipeline file written before or after the start)."""
        deadline = time.monotonic() + timeout
        while self.request("GET", f"/api/v2/dags/{dag_id}").status != 200:
            assert time.monotonic() < deadline, f"the dag-processor did not load {dag_id}\n{self.log_tail()}"
            time.sleep(1)

    def unpause(self, dag_id: str, paused: bool = False) -> None:
        self.wait_for_dag(dag_id)
        assert self.request("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": paused}).status == 200

    def trigger(self, dag_id: str, run_id: str, conf: dict[str, Any] | None = None) -> None:
        """A manual DAG run with this run id (a window's run id: its ledger entry, its retries)."""
        r = self.request("POST", f"/api/v2/dags/{dag_id}/dagRuns",
                         {"dag_run_id": run_id, "logical_date": None, "conf": conf or {}})
        assert r.status == 200, r.text

    def wait_for_runs(self, dag_id: str, run_ids: list[str], timeout: float = 420) -> list[dict[str, Any]]:
        """The runs, once each has ended (success or failed)."""
        deadline = time.monotonic() + timeout
        while True:
            self.revive()
            runs = [self.request("GET", f"/api/v2/dags/{dag_id}/dagRuns/{r}").body for r in run_ids]
            if all(r["state"] in ("success", "failed") for r in runs):
                return runs
            assert time.monotonic() < deadline, f"runs not finished: {[r['state'] for r in runs]}\n{self.log_tail()}"
            time.sleep(2)

    def xcom(self, dag_id: str, run_id: str, task: str = "process_window") -> Any:
        """What a task returned (process_window: the window's statistics)."""
        return self.request("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task}/"
                                   "xcomEntries/return_value").body["value"]

    def request(self, method: str, path: str, body: Any = None, user: str | None = "admin",
                headers: dict[str, str] | None = None) -> Response:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.base + path, data=data, method=method)
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        if user is not None:
            req.add_header("Authorization", f"Bearer {self.tokens[user]}")
        for k, v in (headers or {}).items():
            req.add_header(k, v)
        try:
            with urllib.request.urlopen(req, timeout=120) as resp:
                status, raw = resp.status, resp.read()
        except urllib.error.HTTPError as err:
            status, raw = err.code, err.read()
        text = raw.decode("utf-8", "replace")
        try:
            parsed = json.loads(text) if text else None
        except ValueError:
            parsed = None
        return Response(status, parsed, text)


def make_server(tmp: Path) -> AirflowServer:
    home = tmp / "airflow"
    config_dir = tmp / "pipelines"
    for d in (home, config_dir):
        d.mkdir(parents=True, exist_ok=True)
    pw_file = home / "passwords.json"
    pw_file.write_text(json.dumps(PASSWORDS))
    store_url = f"sqlite:///{tmp / 'offsets.db'}"
    port = free_port()
    env = dict(os.environ)
    env.update({
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(ROOT / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin,viewer:viewer",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(pw_file),
        "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_urlsafe(64),
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
        "CDCFLOW_CONFIG_DIR": str(config_dir),
        "CDCFLOW_OFFSET_STORE_URL": store_url,
    })
    return AirflowServer(home, config_dir, store_url, port, env)


@dataclass
class CeleryAirflowServer(AirflowServer):
    """Airflow as scripts/services.sh runs it with CDCFLOW_AIRFLOW_EXECUTOR=celery, in a CDCFLOW_HOME and
    on ports of its own: Redis, PostgreSQL, then the api-server, scheduler, dag-processor, triggerer
    and two Celery workers (worker1, worker2), each a process that services.sh starts and stops."""

    def services(self, action: str, *names: str) -> str:
        result = subprocess.run([str(ROOT / "scripts" / "services.sh"), action, *names], env=self.env, cwd=ROOT,
                                capture_output=True, text=True, timeout=600, check=False)
        if result.returncode != 0:
            raise RuntimeError(f"services.sh {action} {' '.join(names)} failed:\n{result.stdout[-3000:]}\n"
                               f"{result.stderr[-3000:]}\n{self.log_tail()}")
        return result.stdout + result.stderr

    def start(self) -> None:
        self.services("start", "airflow")  # Redis and PostgreSQL first, then `airflow db migrate`
        self.login()

    def start_scheduler(self, triggerer: bool = False) -> None:
        """services.sh started every component with the api-server."""

    def revive(self) -> list[str]:
        return []

    def stop(self) -> None:
        self.services("stop", "airflow", "postgres", "redis")

    def airflow(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        """An Airflow command with the stack's settings (scripts/env.sh derives them from the ports)."""
        result = subprocess.run(["bash", "-c", 'source scripts/env.sh && exec airflow "$@"', "airflow", *args],
                                env=self.env, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
        if result.returncode != 0:
            raise RuntimeError(f"airflow {' '.join(args)} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
        return result

    @property
    def logs(self) -> Path:
        return Path(self.env["CDCFLOW_HOME"]) / "services"

    def log_tail(self) -> str:
        out = []
        for path in sorted([*(self.logs / "airflow").glob("*.log"), *self.logs.glob("*.log")]):
            out.append(f"--- {path.name}\n" + path.read_text(errors="replace")[-3000:])
        return "\n".join(out)


def make_celery_server(tmp: Path) -> CeleryAirflowServer:
    """A CeleryAirflowServer whose CDCFLOW_HOME is a new directory under the system's temporary one
    (PostgreSQL runs as the system user postgres, which cannot enter pytest's own, closed to others).
    Its state store is the one scripts/env.sh gives celery mode: a database of its own in the stack's
    PostgreSQL (``store_url``). The caller removes ``env["CDCFLOW_HOME"]`` when done."""
    srv = make_server(tmp)
    home = Path(tempfile.mkdtemp(prefix="cdcflow-celery-"))
    home.chmod(0o755)
    env = {k: v for k, v in srv.env.items()
           if not k.startswith(("AIRFLOW__CELERY", "CDCFLOW_REDIS_", "CDCFLOW_POSTGRES_"))
           and k not in ("AIRFLOW__CORE__EXECUTOR", "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN",
                         "AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS", "CDCFLOW_OFFSET_STORE_URL",
                         "CDCFLOW_STATE_DATABASE")}
    env.update({"CDCFLOW_HOME": str(home), "CDCFLOW_AIRFLOW_EXECUTOR": "celery", "CDCFLOW_AIRFLOW_PORT": str(srv.port),
                "CDCFLOW_REDIS_PORT": str(free_port()), "CDCFLOW_POSTGRES_PORT": str(free_port())})
    derive = 'source scripts/env.sh >/dev/null && printf %s "$CDCFLOW_OFFSET_STORE_URL"'
    store_url = subprocess.run(["bash", "-c", derive], env=env, cwd=ROOT, capture_output=True, text=True, timeout=60,
                               check=True).stdout
    return CeleryAirflowServer(srv.home, srv.config_dir, store_url, srv.port, env)
