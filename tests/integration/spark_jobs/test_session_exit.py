"""A process that used Spark ends clean (issue 40): nothing on stderr after its work is done.

Left to the interpreter's shutdown, py4j's connections logged "Closing down clientserver connection"
into a handler whose stream was closed by then ("--- Logging error --- … ValueError: I/O operation on
closed file", after every pytest run: Airflow's logging writes to pytest's capture), and a Spark
Connect client whose server had gone retried its exit calls for ~13 s, then warned [RETRIES_EXCEEDED].
spark_jobs/session.py closes the clients at exit (``close_clients``); here a short process creates
and uses a session as a window does, of each kind, and its stderr is read.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import unique

pytestmark = [pytest.mark.integration, pytest.mark.services("spark")]
ROOT = Path(__file__).resolve().parents[3]

# The child: logging as under pytest with Airflow imported (the root logger at INFO, writing to a
# stream closed before the interpreter exits); a session made by spark_jobs.session, a checkpointed
# frame (spark_jobs.session.Checkpoints, not released: a window that failed) and a job on it. For
# Spark Connect, through a proxy that goes away before the process exits, as a server restarted
# (its supervisor, an out-of-memory exit) or stopped under a process that used it.
CHILD = """
import logging, os, socket, sys, threading

stream = open(os.devnull, "w")
logging.basicConfig(level=logging.INFO, stream=stream, force=True)

from cdcflow.config import SparkConfig
from spark_jobs.session import Checkpoints, get_spark, resolve_remote

class Proxy:
    '''TCP to the long-lived Spark, until stop().'''
    def __init__(self, upstream):
        self.upstream, self.sockets = upstream, []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()
    def _accept(self):
        while True:
            try:
                near = self.listener.accept()[0]
            except OSError:
                return
            far = socket.create_connection(self.upstream)
            self.sockets += [near, far]
            for a, b in ((near, far), (far, near)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()
    def _pipe(self, a, b):
        try:
            while data := a.recv(65536):
                b.sendall(data)
        except OSError:
            pass
    def stop(self):
        for s in [self.listener, *self.sockets]:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

kind, app = sys.argv[1], sys.argv[2]
if kind == "classic":
    spark = get_spark(SparkConfig(mode="inprocess", master="local[1]"), app_name=app)
else:
    host, port = resolve_remote(SparkConfig()).removeprefix("sc://").split("/")[0].split(":")
    proxy = Proxy((host, int(port)))
    # settings of its own: a session of its own, not the pipelines' shared one
    spark = get_spark(SparkConfig(remote=f"sc://127.0.0.1:{proxy.port}", conf={"spark.sql.shuffle.partitions": "2"}),
                      app_name=app)
frame = Checkpoints()(spark.range(0, 100, 1, 2).selectExpr("id", "id % 7 AS k"))
if kind == "classic":  # Python workers, as a window's read tasks
    frame = frame.mapInArrow(lambda batches: batches, frame.schema)
print("groups", frame.groupBy("k").count().count(), flush=True)
if kind == "connect":
    # the last job's ReleaseExecute is sent asynchronously; it ends within milliseconds when the server
    # is there (the server goes away after the work, not during it)
    import concurrent.futures
    concurrent.futures.wait(list(spark.client._release_futures), timeout=30)
    proxy.stop()
stream.close()
"""


@pytest.mark.parametrize("kind", ["classic", "connect"])
def test_a_process_that_used_spark_ends_clean(kind: str) -> None:
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-c", CHILD, kind, f"cdcflow-{unique('exit')}"], cwd=ROOT,
                            capture_output=True, text=True, timeout=300)
    took = time.monotonic() - started
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "groups 7" in result.stdout
    assert "Logging error" not in result.stderr, result.stderr[-3000:]
    assert "I/O operation on closed file" not in result.stderr, result.stderr[-3000:]
    assert "RETRIES_EXCEEDED" not in result.stderr, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    if kind == "connect":  # no client retries a server that is gone (~13 s) before the process may end
        assert took < 12, f"the process took {took:.0f} s to end"
