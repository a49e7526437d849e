"""The pipeline's own settings sections (cdcflow/config.py gathers them into the pipeline model):
the window's bounds (``window``), errors and the dead-letter circuit breaker (``errors``), where
offsets are stored (``offset_store``), lag evaluation (``monitor``), how long cdcflow keeps its own
bookkeeping (``retention``) and when ``schedule: on_data`` starts a window (``on_data``). Each is
strict, checks itself, and knows nothing of the others; the checks across sections live on
PipelineConfig. The source, sink, Spark and transform models live beside the code that uses them.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from connectors.models import ConnId, Duration, Period, StrictModel, TopicName


class WindowConfig(StrictModel):
    """Bounds of one consume window (the Kettle KafkaConsumer step's batch bounds)."""

    max_records: int = Field(default=10_000, ge=1, le=50_000_000)
    max_duration: Duration = 60.0
    stop_on_empty: bool = True
    align: Literal["none", "data_interval"] = Field(
        default="none", description="data_interval: a scheduled window stops at the first record at or after "
        "its data interval's end, and a manual run (trigger, `airflow dags test`) replays its data interval.")


class DeadLetterLimit(StrictModel):
    """How many of a window's records may go to the dead-letter topic before the pipeline stops."""

    count: int | None = Field(default=None, ge=1, description="dead letters in one window")
    ratio: float | None = Field(default=None, gt=0, le=1, description="dead letters / records read, in one window")

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        """``100`` is a count, ``"5%"`` a ratio; ``{count, ratio}`` both."""
        if isinstance(value, int) and not isinstance(value, bool):
            return {"count": value}
        if isinstance(value, str) and value.strip().endswith("%"):
            try:
                return {"ratio": float(value.strip()[:-1]) / 100}
            except ValueError:
                raise ValueError(f"expected a percentage such as '5%', got {value!r}") from None
        return value

    @model_validator(mode="after")
    def _some(self) -> DeadLetterLimit:
        if self.count is None and self.ratio is None:
            raise ValueError("expected a count (100), a ratio ('5%'), or both ({count: 100, ratio: '5%'})")
        return self

    def exceeded(self, dead: int, records: int) -> bool:
        return (self.count is not None and dead > self.count) or (
            self.ratio is not None and records > 0 and dead / records > self.ratio)

    def describe(self) -> str:
        parts = ([f"{self.count} per window"] if self.count is not None else []) + (
            [f"{self.ratio * 100:g}% of a window"] if self.ratio is not None else [])
        return " or ".join(parts)


class ErrorsConfig(StrictModel):
    """Kafka Connect's errors.tolerance and dead-letter-queue settings."""

    tolerance: Literal["none", "all"] = "none"
    dlq_topic: TopicName | None = None
    context_headers: bool = True
    max_dead_letters: DeadLetterLimit | None = Field(
        default=None, description="A circuit breaker: past this many dead letters in one window (a count, a "
        "ratio such as '5%', or both), the window fails, no offset moves and the pipeline is STOPPED until an "
        "operator resumes it.")

    @model_validator(mode="after")
    def _dlq_required(self) -> ErrorsConfig:
        if self.tolerance == "all" and not self.dlq_topic:
            raise ValueError(
                "dlq_topic is required when tolerance is 'all': cdcflow never drops a record silently"
            )
        if self.max_dead_letters is not None and self.tolerance != "all":
            raise ValueError("max_dead_letters needs tolerance: all (with tolerance: none the first bad record "
                             "already fails the window)")
        return self


class OffsetStoreConfig(StrictModel):
    conn_id: ConnId | None = Field(
        default=None,
        description="SQLAlchemy-capable Airflow connection; default: $CDCFLOW_OFFSET_STORE_URL, "
        "else a SQLite file under $CDCFLOW_HOME.",
    )
    sink: str | None = Field(
        default=None,
        description="Exactly-once into MySQL: the name of a MySQL sink of this pipeline whose database holds the "
        "committed offsets, written in the same transaction as the window's rows (that sink then writes each "
        "window in one transaction from one task, after the other sinks). docs/semantics.md#exactly-once.",
    )


class MonitorConfig(StrictModel):
    """Lag evaluation (Burrow's rules, cdcflow.lag) and metrics."""

    window: int = Field(default=10, ge=2, le=1000, description="Commits per partition in the sliding window.")
    stop_after: Duration = Field(default=900.0, description="STOP when no window committed for this long while "
                                 "records wait; set it above the schedule's interval.")
    sample_interval: Duration = Field(default=30.0, description="The metrics endpoint reads fresh log end "
                                      "offsets when its newest sample is older than this.")


class RetentionConfig(StrictModel):
    """How long cdcflow keeps its own bookkeeping (docs/semantics.md#retention). Stored offsets are
    never pruned."""

    ledger: Period = Field(default=30 * 86400, description="Windows in the ledger and lag samples older than "
                           "this are deleted after a commit; the newest 100 windows are always kept.")
    tombstones: Period | None = Field(
        default=30 * 86400, description="Sink tombstones (deleted keys with their version) older than this are "
        "deleted after a commit, and replays of records older than this are refused (they could bring back "
        "rows deleted since). Keep it above the source topics' retention.ms; null keeps them forever.")


class OnDataConfig(StrictModel):
    """``schedule: on_data``: a window starts when the topics have new records (a trigger in Airflow's
    triggerer, cdcflow/airflow/triggers.py), not on a clock."""

    min_records: int = Field(default=1, ge=1, description="Start a window once this many records wait.")
    max_wait: Duration = Field(default=30.0, description="...or once fewer records have waited this long.")
    poll_interval: Duration = Field(default=5.0, description="How often the trigger reads the topics' ends.")
