"""Fault injection points for the crash tests (``CDCFLOW_FAULTS=after_sinks``).

A named checkpoint kills the current process with SIGKILL when it is listed in the environment
variable: the same abrupt death as an OOM kill or a lost worker, at a precise point of the window.
Nothing happens unless the variable is set.
"""

from __future__ import annotations

import os
import signal


def checkpoint(name: str) -> None:
    if name in os.environ.get("CDCFLOW_FAULTS", "").split(","):
        os.kill(os.getpid(), signal.SIGKILL)
