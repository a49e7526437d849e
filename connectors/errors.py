"""The exception tree, named after what the runner must do with each error.

    CdcflowError
    ├── ConfigError                 fatal: the user must fix a pipeline file or a parameter
    ├── WindowFailed                fatal for this attempt: the window stops, no offset moves
    │   ├── InfrastructureError     a service is unreachable or broken; Airflow retries with backoff
    │   │   ├── SinkUnavailable
    │   │   ├── BrokerUnavailable
    │   │   ├── SparkUnavailable
    │   │   ├── RegistryUnavailable  the Schema Registry of a registry converter (avro, protobuf, ...)
    │   │   └── DeadLetterWriteFailed
    │   ├── WindowTimedOut          its Spark work ran past spark.timeout and was cancelled on the server
    │   ├── OffsetOutOfRange        the stored offset is gone from the log (retention); needs a decision
    │   ├── ToleranceExceeded       a bad record with errors.tolerance=none
    │   ├── DeadLettersExceeded     past errors.max_dead_letters in one window: the pipeline is STOPPED
    │   └── OffsetConflict          someone else moved the offsets; this run's commit is refused
    ├── PipelineStopped             an operator stopped the pipeline: the window is skipped, not failed
    ├── ControlError                an operator request that cannot be done (the API's 4xx)
    │   ├── NotFound                404
    │   ├── Conflict                409: not in a state that allows it (e.g. offsets while running)
    │   └── BadRequest              400: a malformed or invalid request
    └── RecordError                 per-record: goes to the dead-letter topic (tolerance=all)

The tree sits on the ground floor, so every layer raises the same classes; its public name is
``cdcflow.errors``. Third-party exceptions are converted at the boundary (connectors/*); records keep their raw bytes so
the dead-letter topic receives the original key, value and headers.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "BadRequest",
    "BrokerUnavailable",
    "CdcflowError",
    "ConfigError",
    "Conflict",
    "ControlError",
    "DeadLetterWriteFailed",
    "DeadLettersExceeded",
    "InfrastructureError",
    "NotFound",
    "OffsetConflict",
    "OffsetOutOfRange",
    "PipelineStopped",
    "RecordError",
    "RegistryUnavailable",
    "SchemaChangePending",
    "SchemaChangeRefused",
    "SinkUnavailable",
    "SparkUnavailable",
    "ToleranceExceeded",
    "WindowFailed",
    "WindowTimedOut",
]


class CdcflowError(Exception):
    """Base of every error cdcflow raises on purpose."""


class ConfigError(CdcflowError):
    """A pipeline config or a run parameter is invalid. The message names file, field and expectation."""


class WindowFailed(CdcflowError):
    """The consume window failed. Offsets stay where they were; a retry replays the same range."""


class InfrastructureError(WindowFailed):
    """An external system is unreachable or misbehaving. Never sent to the DLQ; retried by Airflow."""


class SinkUnavailable(InfrastructureError):
    """A sink (MySQL, Elasticsearch) cannot be reached or failed for reasons unrelated to the data."""


class BrokerUnavailable(InfrastructureError):
    """The Kafka broker cannot be reached or returned an error while reading or producing."""


class SparkUnavailable(InfrastructureError):
    """The long-lived Spark (Spark Connect) cannot be reached."""


class RegistryUnavailable(InfrastructureError):
    """The Schema Registry of a registry converter (source.schema_registry) cannot be reached or
    answered a server error: no record of the window can be read, so none is dead-lettered."""


class DeadLetterWriteFailed(InfrastructureError):
    """A record could not be written to the dead-letter topic; committing would lose it."""


class WindowTimedOut(WindowFailed):
    """The window's Spark work ran past ``spark.timeout``; the server cancelled it (spark_jobs/deadline.py)."""


class OffsetOutOfRange(WindowFailed):
    """The stored offset no longer exists in the log (deleted by retention or topic recreated)."""


class ToleranceExceeded(WindowFailed):
    """A record failed with errors.tolerance=none."""


class DeadLettersExceeded(WindowFailed):
    """More of a window's records went to the DLQ than errors.max_dead_letters allows (a poison burst):
    the runner STOPs the pipeline until an operator resumes it."""


class OffsetConflict(WindowFailed):
    """The stored offsets changed since this window was planned (another run committed)."""


class SchemaChangeRefused(ConfigError):
    """A window meets a schema change its ``schema_changes`` policy does not apply
    (connectors/mysql/evolution.py): it fails before any write, and no offset moves."""


class SchemaChangePending(SchemaChangeRefused):
    """``schema_changes: pause``: the window meets changes no operator has decided on yet
    (``changes``: each as a dict with its ``key``). The runner records them and stops the pipeline."""

    def __init__(self, message: str, changes: list[dict[str, Any]]) -> None:
        super().__init__(message)
        self.changes = changes


class PipelineStopped(CdcflowError):
    """The pipeline is STOPPED by an operator: no window may start until it is resumed."""


class ControlError(CdcflowError):
    """An operator request (API, page, CLI) that cannot be carried out; ``status`` is its HTTP code."""

    status = 400


class NotFound(ControlError):
    status = 404


class Conflict(ControlError):
    status = 409


class BadRequest(ControlError):
    status = 400


class RecordError(CdcflowError):
    """One record cannot be processed; with tolerance=all it goes to the dead-letter topic."""

    def __init__(self, stage: str, message: str) -> None:
        super().__init__(message)
        self.stage = stage


# The classes go by their public name (tracebacks, Spark's wrapped errors, pickles between processes):
# spark_jobs/window.py::unwrap_spark_error reads "cdcflow.errors.<Class>: <message>" from a task's traceback.
for _name in __all__:
    globals()[_name].__module__ = "cdcflow.errors"
