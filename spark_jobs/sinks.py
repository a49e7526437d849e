"""The sink registry: for each sink type, how the window job projects, reduces and applies changes.

Registered explicitly in ``SINK_TYPES`` (no import side effects). A sink type supplies:
``project`` (valid changes -> typed columns c_0.. plus error_message), ``key_columns`` (what "the
same row" means, for last-change-per-key), ``to_changes`` (an Arrow batch -> Changes) and ``open``
(the Sink, created inside a Spark task).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pydantic import ValidationError

from cdcflow.config import KAFKA_PK_COLUMNS, ElasticsearchSinkConfig, MySqlSinkConfig
from cdcflow.errors import ConfigError
from connectors.base import ArrowRecords, Change, Sink
from connectors.mysql.sink import arrow_changes

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql import types as T


@dataclass(frozen=True)
class SinkTarget:
    """A sink config with its resolved connection (resolved on the driver)."""

    config: MySqlSinkConfig | ElasticsearchSinkConfig
    url: str
    auth: tuple[str, str] | None = None

    @property
    def component(self) -> str:
        return f"{self.config.type}:{self.config.name}"


def _columns(batch: pa.RecordBatch, names: list[str]) -> list[list[Any]]:
    return [batch.column(n).to_pylist() for n in names]


@dataclass(frozen=True)
class SinkType:
    project: Callable[[DataFrame, Any], DataFrame]
    key_columns: Callable[[Any], list[str] | None]  # None: every change is its own row (no reduction)
    to_changes: Callable[[pa.RecordBatch, Any], list[Change]]
    open: Callable[[SinkTarget], Sink]
    # driver side: split a change frame into concrete targets (one per table), and prepare them (DDL)
    expand: Callable[[SinkTarget, DataFrame], list[tuple[SinkTarget, DataFrame]]] = lambda t, df: [(t, df)]
    prepare: Callable[[SinkTarget], None] = lambda t: None


def _mysql_open(target: SinkTarget) -> Sink:
    from connectors.mysql.sink import MySqlSink  # noqa: PLC0415 - executor-side import

    assert isinstance(target.config, MySqlSinkConfig)
    return MySqlSink(target.config, target.url)


def _es_changes(batch: pa.RecordBatch, _cfg: ElasticsearchSinkConfig) -> list[Change]:
    raw = ArrowRecords(batch)
    ops, versions, index, ids, docs = _columns(batch, ["change_op", "version", "c_0", "c_1", "c_2"])
    return [Change(ops[i], (index[i], ids[i]), {"doc": docs[i]}, versions[i] or 0, raw.ref(i))
            for i in range(len(ops))]


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


def mysql_type(dtype: T.DataType, is_key: bool) -> str:
    """The MySQL column type auto-create gives a field of this Spark type."""
    from pyspark.sql import types as T  # noqa: PLC0415

    simple = [(T.ByteType, "TINYINT"), (T.ShortType, "SMALLINT"), (T.IntegerType, "INT"), (T.LongType, "BIGINT"),
              (T.FloatType, "FLOAT"), (T.DoubleType, "DOUBLE"), (T.DecimalType, "DOUBLE"), (T.BooleanType, "BOOLEAN"),
              (T.DateType, "DATE"), (T.TimestampType, "DATETIME(6)"), (T.TimestampNTZType, "DATETIME(6)"),
              (T.BinaryType, "BLOB")]
    for cls, name in simple:
        if isinstance(dtype, cls):
            return name
    if isinstance(dtype, T.StringType | T.NullType):
        return "VARCHAR(255)" if is_key else "TEXT"
    return "JSON"  # structs, arrays, maps, variants


def derive_mysql(cfg: MySqlSinkConfig, table: str, schema: T.StructType) -> MySqlSinkConfig:
    """Columns and primary key from the record schema (auto-create / auto-evolve)."""
    from pyspark.sql import types as T  # noqa: PLC0415

    value_t, key_t = schema["record_value"].dataType, schema["record_key"].dataType
    columns: list[dict[str, Any]] = []
    if cfg.pk_mode == "kafka":
        pk = list(KAFKA_PK_COLUMNS)
        columns += [{"name": "__connect_topic", "type": "VARCHAR(249)"}, {"name": "__connect_partition", "type": "INT"},
                    {"name": "__connect_offset", "type": "BIGINT"}]
    elif cfg.pk_mode == "record_key":
        if not isinstance(key_t, T.StructType):
            raise ConfigError(f"sink {cfg.name!r}: pk_mode record_key needs a struct key, the key is {key_t.simpleString()}")
        pk = cfg.primary_key or key_t.fieldNames()
        missing = [k for k in pk if k not in key_t.fieldNames()]
        if missing:
            raise ConfigError(f"sink {cfg.name!r}: primary_key {missing} not in the record key {key_t.fieldNames()}")
        columns += [{"name": k, "type": mysql_type(key_t[k].dataType, True)} for k in pk]
    else:
        pk = cfg.primary_key
        missing = [k for k in pk if k not in value_t.fieldNames()]
        if missing:
            raise ConfigError(f"sink {cfg.name!r}: primary_key {missing} not in the record value {value_t.fieldNames()}")
    names = {c["name"] for c in columns}
    columns += [{"name": f.name, "type": mysql_type(f.dataType, f.name in pk)}
                for f in value_t.fields if f.name not in names]
    data = {**cfg.model_dump(), "table": table, "columns": columns, "primary_key": pk}
    try:
        return MySqlSinkConfig.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']} (got {e.get('input')!r})" for e in exc.errors())
        raise ConfigError(f"sink {cfg.name!r}: cannot derive table {table!r} from the record schema: {problems}") from None


def _mysql_expand(target: SinkTarget, frame: DataFrame) -> list[tuple[SinkTarget, DataFrame]]:
    from pyspark.sql import functions as F  # noqa: PLC0415

    cfg = target.config
    assert isinstance(cfg, MySqlSinkConfig)
    routed, derived = "{topic}" in cfg.table, not cfg.columns
    if not routed and not derived:
        return [(target, frame)]
    routes = [r.route for r in frame.select("route").distinct().collect()] if routed else [None]
    out = []
    for route in sorted(r for r in routes if r is not None) if routed else routes:
        table = cfg.table.replace("{topic}", route) if route is not None else cfg.table
        subset = frame.where(F.col("route") == route) if route is not None else frame
        eff = derive_mysql(cfg, table, frame.schema) if derived else cfg.model_copy(update={"table": table})
        out.append((replace(target, config=eff), subset))
    return out


def _mysql_prepare(target: SinkTarget) -> None:
    """Create or evolve the table once, on the driver, before the tasks write to it."""
    sink = _mysql_open(target)
    sink.open()
    sink.close()


SINK_TYPES: dict[str, SinkType] = {
    "mysql": SinkType(_mysql_project, _mysql_keys, arrow_changes, _mysql_open, _mysql_expand, _mysql_prepare),
    "elasticsearch": SinkType(_es_project, lambda cfg: None if cfg.key_ignore else ["c_0", "c_1"],
                              _es_changes, _es_open),
}
