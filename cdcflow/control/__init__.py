"""The operator's control plane: one function per question or action, used by the REST API, the page
and the CLI alike (one code path each).

States, in Kafka Connect's words, mapped onto Airflow (docs/operating.md says more):

* ``PAUSED``  the pipeline's DAG is paused in Airflow: the scheduler starts no window; a window
  triggered by hand waits, queued, until resume.
* ``STOPPED`` paused, and marked stopped in the offset store: no window is planned at all, not even
  one already queued (its run is skipped). Only then may the stored offsets be altered or reset.
* ``FAILED``  the newest window failed (its message is the trace); offsets did not move.
* ``RUNNING`` none of these. ``UNASSIGNED``: the DAG is not (yet) known to Airflow's DB.
* A pipeline file that does not validate is ``FAILED`` with its config errors as the trace.

Every action names who asked for it (the Airflow user, or ``cli:<login>``): the state and redrive
ledgers keep it.

:class:`Control` is the service, made of one part per area, each in its module:

* pipelines.py      the pipeline files (valid or not), names, a pipeline's offset store, times
* base.py           what the areas share: Airflow's DAGs, the STOPPED precondition
* status.py         state, windows, offsets, health (``Reading``)
* monitoring.py     lag samples and their Burrow-style evaluation
* lifecycle.py      pause, resume, stop, run now, replay
* offset_changes.py alter and reset the stored offsets (only while STOPPED)
* dead_letters.py   read and redrive dead letters
* schema_changes.py show, approve or reject pending schema changes
* configs.py        create, change and delete pipeline files

Callers import from ``cdcflow.control`` (this module); the names below are its interface.
"""

from __future__ import annotations

from cdcflow.control.base import OFFSETS_NEED_STOP, ControlBase
from cdcflow.control.configs import DELETE_NEEDS_STOP, KEPT_ON_DELETE, Configs, pipeline_yaml, write_atomically
from cdcflow.control.dead_letters import DeadLetters, DlqPage, RedriveResult
from cdcflow.control.lifecycle import Lifecycle
from cdcflow.control.monitoring import Monitoring
from cdcflow.control.offset_changes import OffsetChanges
from cdcflow.control.pipelines import NAME_PATTERN, Pipeline, check_name, get, parse_time, pipelines, store_for, valid
from cdcflow.control.schema_changes import SchemaChanges
from cdcflow.control.status import DAG_APPEARS, PartitionOffsets, Reading, State, Status

__all__ = [
    "DAG_APPEARS", "DELETE_NEEDS_STOP", "KEPT_ON_DELETE", "NAME_PATTERN", "OFFSETS_NEED_STOP", "Control",
    "ControlBase", "DlqPage", "PartitionOffsets", "Pipeline", "Reading", "RedriveResult", "State",
    "Status", "check_name", "get", "parse_time", "pipeline_yaml", "pipelines", "store_for", "valid",
    "write_atomically",
]


class Control(Lifecycle, OffsetChanges, Monitoring, DeadLetters, SchemaChanges, Configs):
    """The service. ``dags`` is Airflow (or a double in unit tests): ``Control(dags)``."""
