"""Fault injection points for the crash tests and the fault campaign (``CDCFLOW_FAULTS=after_sinks``).

A named checkpoint kills the current process with SIGKILL when it is listed in the environment
variable (or, in Spark tasks, in the window job's ``faults``, taken from the driver's variable): the
same abrupt death as an OOM kill or a lost worker, at a precise point of the window. Nothing happens
unless the variable is set. The points, in the order a window passes them (tests/faults/):

* ``before_read``           driver: the window is planned, the Spark job not started
* ``during_ledger_write``   driver: inside the transaction that records the read's end offsets
* ``after_read``            driver: the read is recorded, the sinks not written
* ``between_sink_batches``  Spark task: a sink wrote (and committed) a batch, more follow
* ``before_dlq_flush``      Spark task: dead letters handed to the producer, not flushed
* ``after_sinks``           driver: every sink and the DLQ flushed, offsets not committed
* ``during_commit``         driver: inside the offset commit's transaction
* ``after_commit``          driver: offsets committed, the consumer group not mirrored yet
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterable

POINTS = ("before_read", "during_ledger_write", "after_read", "between_sink_batches", "before_dlq_flush",
          "after_sinks", "during_commit", "after_commit")


def active() -> tuple[str, ...]:
    return tuple(p for p in os.environ.get("CDCFLOW_FAULTS", "").split(",") if p)


def checkpoint(name: str, points: Iterable[str] | None = None) -> None:
    if name in (active() if points is None else tuple(points)):
        os.kill(os.getpid(), signal.SIGKILL)
