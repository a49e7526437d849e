"""Fault injection points for the crash tests and the fault campaign (``CDCFLOW_FAULTS=after_sinks``).

A named checkpoint kills the current process with SIGKILL when it is listed in the environment
variable (or, in Spark tasks, in the window job's ``faults``, taken from the driver's variable): the
same abrupt death as an OOM kill or a lost worker, at a precise point of the window. Nothing happens
unless the variable is set. The points, in the order a window passes them (tests/faults/):

* ``before_read``           driver: the window is planned, the Spark job not started
* ``during_read``           Spark task: a read task of several partition ranges has its first records, more follow
* ``during_ledger_write``   driver: inside the transaction that records the read's end offsets
* ``after_read``            driver: the read is recorded, the sinks not written
* ``between_sink_batches``  Spark task: a sink wrote a batch, more follow
* ``before_dlq_flush``      Spark task: dead letters handed to the producer, not flushed
* ``during_sink_commit``    Spark task, exactly-once only (``offset_store.sink``): the offset sink's
                            transaction holds the window's rows and offsets, not committed
* ``after_sinks``           driver: every sink and the DLQ flushed, offsets not committed (under Airflow:
                            the end of the ``process_window`` task, before it returns)
* ``during_commit``         driver: inside the offset commit's transaction
* ``after_commit``          driver: offsets committed, the consumer group not mirrored yet

Two points are reached only by a composed index's rebuild (docs/composed-documents.md), so only the
fault campaign without exactly-once draws the first (``DOCUMENT_POINTS``):

* ``during_rebuild``        Spark task: a rebuild task wrote its documents, its result not returned
* ``before_rebuild_write``  Spark task: a rebuild task read its documents' rows, wrote nothing (its
                            ``pause:`` entry lets a test change the tables between the two)

Two more points are reached only by windows that change a table made from the record schema
(``SCHEMA_POINTS``, docs/schema-changes.md), so the fault campaign does not draw them:

* ``during_ddl``            driver: a schema change's first DDL statement ran (MySQL committed it)
* ``after_ddl``             driver: the window's DDL ran, no row written

An entry ``pause:<point>:<directory>`` pauses instead of killing, for the outages of the campaign:
the first process to reach the point creates ``<directory>/reached`` and waits until
``<directory>/resume`` exists (at most ``PAUSE_LIMIT`` seconds), so a test can stop a server while
the window is at that point and then let the window go on against it.

Where the entries come from: ``CDCFLOW_FAULTS`` (comma-separated), and, when ``CDCFLOW_FAULTS_FILE``
names a file, that file's lines (one entry a line; blank lines and ``#`` lines skipped; a missing
file holds none). The file is for processes whose environment is fixed before a test knows the
fault: a Celery worker's task processes inherit the worker's environment, set when the worker
started, so the campaign (``python -m tests.faults.harness --celery``) starts the workers with
``CDCFLOW_FAULTS_FILE`` set and writes the entry there (replacing the file whole, so no process
reads half an entry) before it triggers the faulted DAG run, then empties it once the faulted try
has ended, before Airflow's retry starts. It is read at each checkpoint in the driver; the points
inside Spark tasks get the entries the driver read when it built the window's job.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterable
from pathlib import Path

POINTS = ("before_read", "during_read", "during_ledger_write", "after_read", "between_sink_batches",
          "before_dlq_flush", "during_sink_commit", "after_sinks", "during_commit", "after_commit")
EXACTLY_ONCE_POINTS = ("during_sink_commit",)  # passed only with offset_store.sink
DOCUMENT_POINTS = ("during_rebuild",)  # reached by a composed index's rebuild (refused with offset_store.sink)
SCHEMA_POINTS = ("during_ddl", "after_ddl")
PAUSE_LIMIT = 600.0


def active() -> tuple[str, ...]:
    """The active entries: ``CDCFLOW_FAULTS``'s, then those of the file ``CDCFLOW_FAULTS_FILE`` names."""
    listed = tuple(p for p in os.environ.get("CDCFLOW_FAULTS", "").split(",") if p)
    path = os.environ.get("CDCFLOW_FAULTS_FILE")
    return listed + (read_file(Path(path)) if path else ())


def read_file(path: Path) -> tuple[str, ...]:
    """The entries of a faults file: one a line, blank lines and lines starting with ``#`` skipped; none
    when it does not exist (a pause entry's directory may hold any character, so no comment after one)."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return ()
    return tuple(entry for line in text.splitlines() if (entry := line.strip()) and not entry.startswith("#"))


def write_file(path: Path, entries: Iterable[str] = ()) -> None:
    """Replace the faults file's entries (none: disarm it), whole: a process reading it at the same
    moment sees the old entries or the new ones, never half a line."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text("".join(f"{entry}\n" for entry in entries))
    os.replace(tmp, path)


def pause_entry(point: str, directory: str | os.PathLike[str]) -> str:
    """The CDCFLOW_FAULTS entry that pauses at ``point`` (see the module docstring)."""
    if point not in (*POINTS, *DOCUMENT_POINTS, "before_rebuild_write"):
        raise ValueError(f"unknown fault point {point!r} (expected one of {', '.join(POINTS)})")
    return f"pause:{point}:{directory}"


def checkpoint(name: str, points: Iterable[str] | None = None) -> None:
    for entry in active() if points is None else points:
        if entry == name:
            os.kill(os.getpid(), signal.SIGKILL)
        elif entry.startswith(f"pause:{name}:"):
            _pause(Path(entry.split(":", 2)[2]))


def _pause(directory: Path) -> None:
    try:  # only the first process (or task) to get here pauses
        fd = os.open(directory / "reached", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return
    os.write(fd, str(os.getpid()).encode())
    os.close(fd)
    until = time.monotonic() + PAUSE_LIMIT
    while not (directory / "resume").exists() and time.monotonic() < until:
        time.sleep(0.05)
