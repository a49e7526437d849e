"""The long-lived Spark stays alive: a server whose Spark context stopped is seen (by the window's
pre-check, by ``services.sh status``), restarted (by ``services.sh start`` and by its supervisor),
and the window after the restart works.

A server whose context stopped keeps its JVM and its port and fails every request; that is what an
out-of-heap server did (issue 22). Here it is made on purpose: a Spark Connect server inside a local
PySpark process (``SparkConnectService.start`` on its SparkContext), whose context the test stops."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cdcflow import cdcgen, runner
from cdcflow.config import load_pipeline
from cdcflow.errors import SparkUnavailable
from cdcflow.window import clients
from spark_jobs.health import probe
from bench.run import descendants
from tests.airflow_server import free_port
from tests.helpers import bootstrap, expected, table_rows, unique, write_pipeline

pytestmark = [pytest.mark.integration, pytest.mark.services]
ROOT = Path(__file__).resolve().parents[3]

SERVER_IN_PYSPARK = """
import os, sys, time
os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
from pyspark.sql import SparkSession
spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
         .config("spark.connect.grpc.binding.address", "127.0.0.1")
         .config("spark.connect.grpc.binding.port", sys.argv[1])
         .config("spark.sql.session.timeZone", "UTC").config("spark.driver.memory", "512m").getOrCreate())
spark._jvm.org.apache.spark.sql.connect.service.SparkConnectService.start(spark._jsc.sc())
print("ready", flush=True)
sys.stdin.readline()
spark.sparkContext.stop()  # the JVM and the gRPC port stay, as after an OutOfMemoryError
print("stopped", flush=True)
time.sleep(3600)
"""


def _services(action: str, env: dict[str, str]) -> str:
    out = subprocess.run(["bash", str(ROOT / "scripts/services.sh"), action, "spark"], env=env, capture_output=True,
                         text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return out.stdout + out.stderr


def _line(proc: subprocess.Popen[str], want: str, timeout: float = 180) -> None:
    end = time.monotonic() + timeout
    assert proc.stdout is not None
    while time.monotonic() < end:
        line = proc.stdout.readline()
        if line.strip() == want:
            return
        assert line or proc.poll() is None, f"the server process exited ({proc.returncode}) before {want!r}"
    raise AssertionError(f"no {want!r} from the server process in {timeout}s")


def _under(pid: int) -> list[str]:
    """The command lines of every process under ``pid`` (those still running)."""
    lines = []
    for child in descendants(pid)[1:]:
        try:
            lines.append((Path("/proc") / str(child) / "cmdline").read_bytes().replace(b"\0", b" ").decode())
        except OSError:
            continue
    return lines


def test_a_server_whose_context_stopped_fails_the_window_clearly_and_is_restarted(config_dir: Path,
                                                                                 tmp_path: Path) -> None:
    port = free_port()
    remote = f"sc://127.0.0.1:{port}"
    home = tmp_path / "spark"
    home.mkdir()
    env = {**os.environ, "CDCFLOW_SPARK_DIR": str(home), "CDCFLOW_SPARK_CONNECT_PORT": str(port),
           "CDCFLOW_SPARK_REMOTE": remote, "CDCFLOW_SPARK_MEMORY": "1g", "PYTHONPATH": str(ROOT)}
    env.pop("SPARK_CONNECT_MODE_ENABLED", None)  # a classic PySpark: a Connect session before in this process sets it
    server = subprocess.Popen([sys.executable, "-c", SERVER_IN_PYSPARK, str(port)], cwd=ROOT, env=env,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        _line(server, "ready")
        (home / "connect.pid").write_text(str(server.pid))  # as if services.sh had started it
        tag = unique("health")
        cfg = load_pipeline(write_pipeline(config_dir, tag, f"t.{tag}", tag, spark={"remote": remote}))
        store = clients.offset_store(cfg)
        stream = cdcgen.orders_stream(300, 20, seed=3, broken=False)
        topic = cfg.source.topics[0]
        cdcgen.produce(bootstrap(), topic, stream.events[:200])
        assert runner.run_window(cfg, "run-1", {}, store)["records"] == 200
        committed = store.offsets.load(cfg.name)

        assert server.stdin is not None
        server.stdin.write("stop\n")
        server.stdin.flush()
        _line(server, "stopped")
        cdcgen.produce(bootstrap(), topic, stream.events[200:250], create=False)

        # the window's pre-check: at once, the cause and the command; nothing read, no offset moved
        started = time.monotonic()
        with pytest.raises(SparkUnavailable) as err:
            runner.run_window(cfg, "run-2", {}, store)
        assert time.monotonic() - started < 60
        message = str(err.value)
        assert "Spark context has stopped" in message, message
        assert "scripts/services.sh start spark" in message and "no offset was moved" in message
        assert store.offsets.load(cfg.name) == committed
        assert "context has stopped" in (probe(remote) or "")

        status = _services("status", env)
        assert "NOT healthy" in status and "context has stopped" in status, status

        restarted = _services("start", env)  # stops the context-less server, starts a real one on its port
        assert "not healthy" in restarted and "spark is up" in restarted and "supervisor started" in restarted
        # warmed before any window: the shared session's Python worker daemon already runs under the server
        assert "shared session is warm" in restarted, restarted
        assert any("spark_jobs.daemon" in c for c in _under(int((home / "connect.pid").read_text())))
        server.wait(timeout=60)
        assert probe(remote) is None
        assert runner.run_window(cfg, "run-2", {}, store)["records"] == 50  # the retry, on the new server

        # the supervisor restarts a server that dies, and the next window works
        killed = int((home / "connect.pid").read_text())
        os.kill(killed, signal.SIGKILL)
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            pid = (home / "connect.pid").read_text().strip() if (home / "connect.pid").exists() else ""
            # its restart has ended too (with the warm-up): until then the new server is a descendant of
            # the supervisor, and a stop now would end it with the supervisor, not as "spark"
            if pid and int(pid) != killed and "restart exited" in (home / "supervisor.log").read_text():
                break
            time.sleep(2)
        else:
            raise AssertionError("the supervisor did not restart the server in 180 s:\n"
                                 + (home / "supervisor.log").read_text()[-3000:])
        log = (home / "supervisor.log").read_text()
        assert "restarting it" in log and "restart exited 0" in log and "shared session is warm" in log, log[-3000:]
        assert probe(remote) is None
        cdcgen.produce(bootstrap(), topic, stream.events[250:], create=False)
        assert runner.run_window(cfg, "run-3", {}, store)["records"] == 50
        assert table_rows(cfg.sinks[0].table) == expected(stream.state)

        # stop, then start at once: the start waits for the port the stopped server held
        stopped = _services("stop", env)
        assert "stopping spark supervisor" in stopped or "stopping spark" in stopped
        _services("start", env)
        assert probe(remote) is None
    finally:
        server.kill()
        subprocess.run(["bash", str(ROOT / "scripts/services.sh"), "stop", "spark"], env=env, capture_output=True,
                       timeout=120, check=False)
