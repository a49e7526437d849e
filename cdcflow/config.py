"""Pipeline configuration: one YAML file per pipeline in ``config/pipelines/``.

The models are strict (unknown keys are rejected) and every problem in a file is reported in one
message naming the file, the line, the field path, the value found and what was expected
(cdcflow/config_errors.py). The source, sink, Spark and transform models live beside the code that uses them
(connectors/*/config.py, spark_jobs/), the pipeline's own sections in cdcflow/config_sections.py; the
pipeline model gathers them.
Credentials never live in YAML: connections are referenced by Airflow conn id.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    Field,
    ValidationError,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from cdcflow.config_errors import format_validation_error
from cdcflow.config_sections import (
    ErrorsConfig,
    MonitorConfig,
    OffsetStoreConfig,
    OnDataConfig,
    RetentionConfig,
    WindowConfig,
)
from connectors.elasticsearch.compose_config import composed_problems
from connectors.elasticsearch.config import ElasticsearchSinkConfig
from connectors.errors import ConfigError
from connectors.kafka.config import REGISTRY_CONVERTERS, SourceConfig
from connectors.models import Duration, StrictModel, field_errors, parse_duration
from connectors.mysql.config import (
    KAFKA_PK_COLUMNS,
    TABLE_PLACEHOLDERS,
    MySqlColumn,
    MySqlSinkConfig,
)
from spark_jobs import chains
from spark_jobs.config import SparkConfig
from spark_jobs.transform.transform_config import TransformConfig, chain_problems

# The source, sink and Spark models are defined beside the code that uses them; the pipeline model gathers them.
__all__ = ["KAFKA_PK_COLUMNS", "TABLE_PLACEHOLDERS", "ElasticsearchSinkConfig", "MySqlColumn", "MySqlSinkConfig",
           "SourceConfig", "SparkConfig", "parse_duration"]

DEFAULT_CONFIG_DIR = Path(__file__).resolve().parent.parent / "config" / "pipelines"

def parse_instant(value: Any) -> int:
    """Epoch milliseconds from an ISO 8601 time with a zone (``2026-11-23T10:00:00Z``), or from epoch
    milliseconds given as digits. ValueError says what was expected."""
    if isinstance(value, bool):
        raise ValueError(f"expected an ISO 8601 time with a zone (2026-11-23T10:00:00Z), got {value!r}")
    if isinstance(value, int) or (isinstance(value, str) and value.strip().lstrip("-").isdigit()):
        return int(value)
    if not isinstance(value, str):
        raise ValueError(f"expected an ISO 8601 time with a zone (2026-11-23T10:00:00Z), got {value!r}")
    try:
        moment = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{value!r}: expected ISO 8601 with a time zone (2026-11-23T10:00:00Z) or epoch "
                         "milliseconds") from None
    if moment.tzinfo is None:
        raise ValueError(f"{value!r} has no time zone; add one (Z or +01:00)")
    return int(moment.timestamp() * 1000)


FORMAT_NAMES = {"debezium": "Debezium envelopes", "goldengate": "GoldenGate JSON formatter operations",
                "canal": "Canal flat messages", "maxwell": "Maxwell rows"}
SinkConfig = Annotated[MySqlSinkConfig | ElasticsearchSinkConfig, Field(discriminator="type")]


class PipelineConfig(StrictModel):
    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,199}$")]
    description: str = ""
    schedule: str | None = Field(default=None, description="A cron expression or preset (@hourly); on_data: a "
                                 "window starts when records arrive (see on_data); null: triggered only.")
    on_data: OnDataConfig = OnDataConfig()
    retries: int = Field(default=3, ge=0, le=100)
    retry_delay: Duration = 30.0
    tags: list[str] = Field(default_factory=list)
    source: SourceConfig
    window: WindowConfig = WindowConfig()
    initial_offsets: Literal["earliest", "latest"] = "earliest"
    versioning: Literal["source_ts_ms", "kafka_offset"] = Field(
        default="source_ts_ms",
        description="Where a change's version comes from; sinks refuse to go back to an older one.",
    )
    transforms: list[TransformConfig] = Field(
        default_factory=list, description="Single-message transforms, in order: on Debezium's records (Kafka "
        "Connect's record model, or the rows after an ExtractNewRecordState), and on the rows the decoder of "
        "source.format goldengate, canal or maxwell reads from each message. Without transforms the values are "
        "decoded directly, as source.format says.")
    sinks: list[SinkConfig] = Field(min_length=1)
    truncate: Literal["ignore", "dlq", "apply"] = Field(
        default="ignore", description="A TRUNCATE of a source table (Debezium op t, GoldenGate T, Canal TRUNCATE): "
        "ignore (the default, as in Debezium's JDBC sink: counted in the window's stats, the target keeps its rows), "
        "dlq (sent to the dead-letter topic, errors.tolerance all) or apply (the table's rows, or the index's "
        "documents, older than the truncate are deleted and the changes before it dropped, and a replay of older "
        "changes cannot bring them back; docs/formats.md).")
    schema_changes: Literal["lenient", "evolve", "ignore", "fail", "pause"] = Field(
        default="lenient", description="What a window does when the record schema of a table made from it "
        "(create_table without columns) differs from the table in MySQL (docs/schema-changes.md): lenient (the "
        "default) adds columns, widens types, adds ENUM/SET values, drops NOT NULL and keeps dropped columns as "
        "nullable; evolve also converts to another type that holds every old value; ignore runs no DDL and "
        "writes the columns the table has; fail stops the window; pause stops the pipeline until an operator "
        "approves the changes (applied as evolve would) or rejects them (cdcflow schema apply|reject). A narrowing change or another primary key "
        "always stops the window, named; nothing is written and no offset moves.")
    errors: ErrorsConfig = ErrorsConfig()
    offset_store: OffsetStoreConfig = OffsetStoreConfig()
    spark: SparkConfig = SparkConfig()
    monitor: MonitorConfig = MonitorConfig()
    retention: RetentionConfig = RetentionConfig()

    @model_validator(mode="before")
    @classmethod
    def _placeholder_default(cls, data: Any) -> Any:
        """``unavailable_value`` defaults to Debezium's placeholder for Debezium sources only: the other
        formats write every value they have."""
        if not isinstance(data, dict) or not isinstance(data.get("sinks"), list):
            return data
        source = data.get("source")
        if not isinstance(source, dict) or source.get("format", "debezium") == "debezium":
            return data
        sinks = [{**s, "unavailable_value": None} if isinstance(s, dict) and "unavailable_value" not in s else s
                 for s in data["sinks"]]
        return {**data, "sinks": sinks}

    @model_validator(mode="after")
    def _soft_deletes(self) -> PipelineConfig:
        """What ``delete: soft`` needs of the pipeline, reported on the sink's ``delete``."""
        problems = []
        for i, sink in enumerate(self.sinks):
            if sink.delete != "soft":
                continue
            if self.versioning != "source_ts_ms":
                problems.append((i, ("delete: soft needs versioning: source_ts_ms (the deleted time is the delete's "
                                     "source time, which a version from kafka_offset does not hold)")))
            elif self.truncate == "apply":
                problems.append((i, ("delete: soft with truncate: apply is not supported yet (a TRUNCATE deletes the "
                                     "rows it removes): use delete: hard, or truncate: ignore or dlq")))
        if problems:
            raise ValidationError.from_exception_data("PipelineConfig", [InitErrorDetails(
                type=PydanticCustomError("value_error", message), loc=("sinks", i, "delete"), input="soft")
                for i, message in problems])
        return self

    @model_validator(mode="after")
    def _history(self) -> PipelineConfig:
        """What ``mode: history`` needs of the pipeline, reported on the sink's ``mode``."""
        wrong = [i for i, s in enumerate(self.sinks) if getattr(s, "mode", "state") == "history"
                 and self.versioning != "source_ts_ms"]
        if wrong:
            raise ValidationError.from_exception_data("PipelineConfig", [InitErrorDetails(
                type=PydanticCustomError("value_error", (
                    "mode: history needs versioning: source_ts_ms (a version's interval starts at the change's "
                    "source time, which a version from kafka_offset does not hold)")),
                loc=("sinks", i, "mode"), input="history") for i in wrong])
        return self

    @model_validator(mode="after")
    def _cross_checks(self) -> PipelineConfig:
        names = [s.name for s in self.sinks]
        if len(set(names)) != len(names):
            raise ValueError(f"sink names must be unique, got {names}")
        if self.window.align == "data_interval" and self.schedule in (None, "@once", "@continuous", "on_data"):
            raise ValueError(f"window.align data_interval needs a schedule with intervals (a cron expression or "
                             f"a preset such as @hourly), got schedule {self.schedule!r}")
        if self.truncate == "apply":
            _truncate_apply_checks(self)
        problems = composed_problems(self.sinks, self.offset_store.sink, self.truncate) + chain_problems(
            self.transforms, self.source.value_converter, self.source.format)
        if problems:
            raise field_errors("PipelineConfig", problems)
        if self.offset_store.sink is not None:
            held = next((s for s in self.sinks if s.name == self.offset_store.sink), None)
            if held is None:
                raise ValueError(f"offset_store.sink: expected the name of one of this pipeline's sinks {names}, "
                                 f"got {self.offset_store.sink!r}")
            if held.type != "mysql":
                raise ValueError(f"offset_store.sink: sink {held.name!r} is {held.type}; the offsets can only be "
                                 "committed in a MySQL sink's transaction")
            if any(p in held.table for p in TABLE_PLACEHOLDERS):
                raise ValueError(f"offset_store.sink: sink {held.name!r} routes to one table per topic ({held.table!r}); "
                                 "exactly-once writes the window's rows and offsets in one transaction into one table")
        if self.errors.dlq_topic and self.source.covers(self.errors.dlq_topic):
            raise ValueError("errors.dlq_topic must differ from the source topics" +
                             (" (source.topics_regex matches it)" if self.source.topics_regex else ""))
        if self.source.format in ("goldengate", "maxwell"):
            bare = [s.name for s in self.sinks if s.type == "mysql" and not s.columns]
            if bare:
                raise ValueError(f"mysql sinks {bare} need columns: {FORMAT_NAMES[self.source.format]} carry no column "
                                 "types to create a table from (their values are read by the declared types)")
        if not self.transforms:
            if any(c not in ("json", *REGISTRY_CONVERTERS) for c in (self.source.key_converter,
                                                                     self.source.value_converter)):
                raise ValueError(f"without transforms the values are decoded as {FORMAT_NAMES[self.source.format]} "
                                 "and need the json converters or a registry converter (avro, protobuf, "
                                 "json_schema_registry); add transforms (e.g. HoistField) to use string, bytes or "
                                 "json_schema")
            bare = [s.name for s in self.sinks if s.type == "mysql" and not s.columns and not s.create_table]
            if bare:
                raise ValueError(f"mysql sinks {bare} need columns, or create_table: true to create each table from "
                                 "the schema of its records (Debezium's JsonConverter with schemas.enable=true, "
                                 "Canal's mysqlType, or the types of schemaless values)")
        elif self.versioning == "source_ts_ms" and self.source.format == "debezium" and not any(
                t.type == "ExtractNewRecordState" for t in self.transforms):  # the other formats' rows keep their time
            raise ValueError("versioning source_ts_ms needs an ExtractNewRecordState transform (Debezium topics); "
                             "for other records set versioning: kafka_offset")
        else:
            unserved = chains.unserved(SimpleNamespace(
                transforms=self.transforms, key_converter=self.source.key_converter,
                value_converter=self.source.value_converter, source_format=self.source.format))
            if unserved is not None:
                raise ValueError(f"transforms: {unserved}")
        return self

    @property
    def group_id(self) -> str:
        return self.source.group_id or f"cdcflow-{self.name}"


@dataclass(frozen=True)
class LoadedPipeline:
    path: Path
    config: PipelineConfig


def parse_pipeline(text: str, path: Path | str = "<string>") -> PipelineConfig:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of pipeline settings, got {type(data).__name__}")
    try:
        return PipelineConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(path, text, exc, data)) from None


def load_pipeline(path: Path | str) -> PipelineConfig:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read pipeline config: {exc.strerror}") from exc
    return parse_pipeline(text, path)


def config_dir() -> Path:
    return Path(os.environ.get("CDCFLOW_CONFIG_DIR", DEFAULT_CONFIG_DIR))


def pipeline_files(directory: Path | None = None) -> list[Path]:
    directory = directory or config_dir()
    return sorted(p for p in directory.glob("*.y*ml") if p.suffix in (".yaml", ".yml"))


def load_all(directory: Path | None = None) -> tuple[list[LoadedPipeline], dict[Path, str]]:
    """Load every pipeline; invalid files are returned as errors and do not stop the others."""
    loaded: list[LoadedPipeline] = []
    errors: dict[Path, str] = {}
    seen: dict[str, Path] = {}
    for path in pipeline_files(directory):
        try:
            cfg = load_pipeline(path)
        except ConfigError as exc:
            errors[path] = str(exc)
            continue
        if cfg.name in seen:
            errors[path] = (
                f"{path}: 1 error\n  - name: expected a unique pipeline name; "
                f"got {cfg.name!r}, already used by {seen[cfg.name]}"
            )
            continue
        seen[cfg.name] = path
        loaded.append(LoadedPipeline(path, cfg))
    return loaded, errors


def find_pipeline(name: str, directory: Path | None = None) -> PipelineConfig:
    loaded, errors = load_all(directory)
    for item in loaded:
        if item.config.name == name:
            return item.config
    hint = f"; invalid files: {', '.join(str(p) for p in errors)}" if errors else ""
    known = ", ".join(sorted(i.config.name for i in loaded)) or "none"
    raise ConfigError(f"no pipeline named {name!r} in {directory or config_dir()} (known: {known}){hint}")


def json_schema() -> dict[str, Any]:
    schema = PipelineConfig.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "cdcflow pipeline"
    return schema


def iter_errors(errors: dict[Path, str]) -> Iterable[str]:
    return (errors[p] for p in sorted(errors))


def _truncate_apply_checks(cfg: PipelineConfig) -> None:
    """What ``truncate: apply`` does not cover yet (the default window path, spark_jobs/window.py)."""
    if cfg.transforms:
        raise ValueError("truncate: apply is not supported with transforms yet: use ignore or dlq")
    for sink in cfg.sinks:
        if sink.type == "elasticsearch" and sink.key_ignore:
            raise ValueError(f"truncate: apply needs documents versioned by their change (sink {sink.name!r} has "
                             "key_ignore: true, whose documents have no version to compare with the truncate's)")
        if sink.type == "mysql" and sink.pk_mode == "kafka":
            raise ValueError(f"truncate: apply needs rows keyed by the record (sink {sink.name!r} has pk_mode kafka)")
        if sink.name == cfg.offset_store.sink and not sink.columns:
            raise ValueError(f"truncate: apply with offset_store.sink needs that sink's declared columns (sink "
                             f"{sink.name!r})")
