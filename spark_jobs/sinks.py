"""The sink registry: for each sink type, how the window job projects, reduces and applies changes.

Registered explicitly in ``SINK_TYPES`` (no import side effects). A sink type supplies:
``project`` (valid changes -> typed columns c_0.. plus error_message), ``key_columns`` (what "the
same row" means, for last-change-per-key), ``to_change`` (an Arrow row -> a Change) and ``open``
(the Sink, created inside a Spark task).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cdcflow.config import ElasticsearchSinkConfig, MySqlSinkConfig
from connectors.base import Change, Sink, SourceRef

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


@dataclass(frozen=True)
class SinkTarget:
    """A sink config with its resolved connection (resolved on the driver)."""

    config: MySqlSinkConfig | ElasticsearchSinkConfig
    url: str
    auth: tuple[str, str] | None = None

    @property
    def component(self) -> str:
        return f"{self.config.type}:{self.config.name}"


def source_ref(row: dict[str, Any]) -> SourceRef:
    return SourceRef(row["topic"], row["partition"], row["offset"], row["key"], row["value"],
                     [(h["key"], h["value"]) for h in row["headers"] or []])


@dataclass(frozen=True)
class SinkType:
    project: Callable[[DataFrame, Any], DataFrame]
    key_columns: Callable[[Any], list[str] | None]  # None: every change is its own row (no reduction)
    to_change: Callable[[dict[str, Any], Any], Change]
    open: Callable[[SinkTarget], Sink]


def _mysql_change(row: dict[str, Any], cfg: MySqlSinkConfig) -> Change:
    values = {c.name: row[f"c_{i}"] for i, c in enumerate(cfg.columns)}
    key = tuple(values[k] for k in cfg.primary_key)
    return Change(row["change_op"], key, values, row["version"], source_ref(row))


def _mysql_open(target: SinkTarget) -> Sink:
    from connectors.mysql.sink import MySqlSink  # noqa: PLC0415 - executor-side import

    assert isinstance(target.config, MySqlSinkConfig)
    return MySqlSink(target.config, target.url)


def _es_change(row: dict[str, Any], _cfg: ElasticsearchSinkConfig) -> Change:
    return Change(row["change_op"], (row["c_0"], row["c_1"]), {"doc": row["c_2"]}, row["version"] or 0,
                  source_ref(row))


def _es_open(target: SinkTarget) -> Sink:
    from connectors.elasticsearch.sink import ElasticsearchSink  # noqa: PLC0415

    assert isinstance(target.config, ElasticsearchSinkConfig)
    return ElasticsearchSink(target.config, target.url, target.auth)


def _mysql_project(df: DataFrame, cfg: MySqlSinkConfig) -> DataFrame:
    from spark_jobs.debezium import project_for_sink  # noqa: PLC0415

    return project_for_sink(df, cfg)


def _mysql_keys(cfg: MySqlSinkConfig) -> list[str]:
    from spark_jobs.debezium import mysql_key_columns  # noqa: PLC0415

    return mysql_key_columns(cfg)


def _es_project(df: DataFrame, cfg: ElasticsearchSinkConfig) -> DataFrame:
    from spark_jobs.debezium import project_for_elasticsearch  # noqa: PLC0415

    return project_for_elasticsearch(df, cfg)


SINK_TYPES: dict[str, SinkType] = {
    "mysql": SinkType(_mysql_project, _mysql_keys, _mysql_change, _mysql_open),
    "elasticsearch": SinkType(_es_project, lambda cfg: None if cfg.key_ignore else ["c_0", "c_1"],
                              _es_change, _es_open),
}
