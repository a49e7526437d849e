"""The pipeline's writer lease: a live window and a backfill window of one pipeline never write
at the same time. Held and renewed while a window writes; a killed holder's lease is taken at once
when that can be known (its own retry, or a process gone on the holder's own node), else once it
expires.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial

from cdcflow.errors import WindowFailed
from cdcflow.state import StateStore

log = logging.getLogger("cdcflow.runner")


LEASE_SECONDS = 60.0  # a writer's lease; renewed every third of it while the window runs


LEASE_WAIT = 3600.0  # how long a window waits for another window of its pipeline to finish writing


def node() -> str:
    """Where a lease holder runs: the host, and the Celery worker (``CDCFLOW_AIRFLOW_WORKER``, set by
    scripts/services.sh) when there is one. Two workers on one machine are two nodes, as on two
    machines: a holder's pid is checked only by processes of its own node."""
    worker = os.environ.get("CDCFLOW_AIRFLOW_WORKER")
    return f"{socket.gethostname()}/{worker}" if worker else socket.gethostname()


def _dead_holder(run_id: str, holder: str) -> bool:
    """Whether the lease's holder (``<run id>@<node>:<pid>:<nonce>``) is a killed attempt, so that
    its lease is taken at once instead of after it expires (up to LEASE_SECONDS):
    an earlier attempt of this same window, on any node (Airflow starts a retry only once the attempt
    before has ended: failed, or killed and found so by the scheduler's heartbeat check), or a process
    of this node that no longer exists. A holder on another node is not checked by its pid (another
    machine's pids mean nothing here): it is waited for until its lease expires."""
    run, _, where = holder.rpartition("@")
    if run == run_id:
        return True
    at, _, rest = where.partition(":")
    pid = rest.partition(":")[0]
    if at != node() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, another user's
        return False
    return False


@contextmanager
def writer_lease(store: StateStore, pipeline: str, run_id: str, wait: float = LEASE_WAIT,
                 seconds: float = LEASE_SECONDS) -> Iterator[None]:
    """Hold the pipeline's writer lease while the block runs: a live window and a backfill window of
    one pipeline never write at the same time. Waits up to ``wait`` seconds for the holder."""
    holder = f"{run_id}@{node()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
    deadline, told = time.monotonic() + wait, 0.0
    while (other := store.leases.try_take(pipeline, holder, seconds, dead=partial(_dead_holder, run_id))) is not None:
        if time.monotonic() > deadline:
            raise WindowFailed(
                f"pipeline {pipeline!r}: window {other.split('@')[0]!r} has been writing to the sinks for over "
                f"{wait:.0f}s, and windows of one pipeline never write at the same time; this window did not "
                "start (no offset moved). Retry it when that window has ended, or fail that one if it is stuck")
        if time.monotonic() - told > 30:
            log.info("waiting for window %s of pipeline %s to finish writing before this window starts",
                     other.split("@")[0], pipeline)
            told = time.monotonic()
        time.sleep(1.0)
    stop = threading.Event()

    def renew() -> None:
        while not stop.wait(seconds / 3):
            try:
                other = store.leases.try_take(pipeline, holder, seconds)
            except Exception as exc:  # noqa: BLE001 - a missed renewal is retried; the lease still runs
                log.warning("renewing the writer lease of %s failed: %s", pipeline, exc)
                continue
            if other is not None:
                log.error("the writer lease of %s was taken by %s while this window ran (it stalled for over "
                          "%.0fs); the sinks' version guards keep the result right", pipeline, other, seconds)

    keeper = threading.Thread(target=renew, name=f"cdcflow-lease-{pipeline}", daemon=True)
    keeper.start()
    try:
        yield
    finally:
        stop.set()
        keeper.join()
        store.leases.release(pipeline, holder)
