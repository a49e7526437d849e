"""The sink registry: for each sink type, how the window job projects, reduces and applies changes.

Registered explicitly in ``SINK_TYPES`` (no import side effects). A sink type supplies:
``project`` (valid changes -> typed columns c_0.. plus error_message), ``key_columns`` (what "the
same row" means, for last-change-per-key), ``to_changes`` (an Arrow batch -> Changes) and ``open``
(the Sink, created inside a Spark task).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pydantic import ValidationError

from connectors.base import ArrowRecords, Change, Sink
from connectors.elasticsearch.config import ElasticsearchSinkConfig
from connectors.errors import ConfigError
from connectors.mysql.config import HISTORY_OWN, KAFKA_PK_COLUMNS, TABLE_PLACEHOLDERS, MySqlSinkConfig
from connectors.mysql.sink import arrow_changes
from spark_jobs.row_chains import key_type
from spark_jobs.row_schemas import KAFKA_COLUMNS, by_coordinates, inferred_columns, merged

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql import types as T


@dataclass(frozen=True)
class SinkTarget:
    """A sink config with its resolved connection (resolved on the driver)."""

    config: MySqlSinkConfig | ElasticsearchSinkConfig
    url: str
    auth: tuple[str, str] | None = None
    # Elasticsearch: the mapping (JSON) of each index a routed sink creates, from the record schema
    mappings: tuple[tuple[str, str], ...] = ()
    # Elasticsearch: per index, the new fields schema_changes left out of its mapping (ignore, or a
    # rejected change): the documents are written without them
    left_out: tuple[tuple[str, tuple[str, ...]], ...] = ()
    # MySQL, a table from the record schema prepared before the read (``prepare.schema_tables``): the
    # record schemas (schema_id) it was prepared for; the read tasks write only their changes
    schema_ids: tuple[str, ...] = ()

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


def _mysql_config(target: SinkTarget) -> MySqlSinkConfig:
    assert isinstance(target.config, MySqlSinkConfig)
    return target.config


def _mysql_open(target: SinkTarget) -> Sink:
    from connectors.mysql.sink import MySqlSink  # noqa: PLC0415 - executor-side import

    return MySqlSink(_mysql_config(target), target.url)


def _es_changes(batch: pa.RecordBatch, _cfg: ElasticsearchSinkConfig) -> list[Change]:
    raw = ArrowRecords(batch)
    ops, versions, index, ids, docs = _columns(batch, ["change_op", "version", "c_0", "c_1", "c_2"])
    return [Change(ops[i], (index[i], ids[i]), {"doc": docs[i]}, versions[i] or 0, raw.ref(i))
            for i in range(len(ops))]


def _es_open(target: SinkTarget) -> Sink:
    from connectors.elasticsearch.sink import ElasticsearchSink  # noqa: PLC0415

    assert isinstance(target.config, ElasticsearchSinkConfig)
    return ElasticsearchSink(target.config, target.url, target.auth,
                             {index: json.loads(mapping) for index, mapping in target.mappings},
                             {index: frozenset(fields) for index, fields in target.left_out})


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
    data = {**cfg.model_dump(), "table": table, "columns": columns, "primary_key": pk,
            "ignore_null_updates": _present(cfg.ignore_null_updates, [c["name"] for c in columns], pk)}
    try:
        return MySqlSinkConfig.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']} (got {e.get('input')!r})" for e in exc.errors())
        raise ConfigError(f"sink {cfg.name!r}: cannot derive table {table!r} from the record schema: {problems}") from None


def table_name(template: str) -> Column:
    """The table a change goes to: the template with {topic}, {source.table} and {source.db} filled
    from the change (null when the change lacks a field the template needs)."""
    from pyspark.sql import functions as F  # noqa: PLC0415

    columns = {"{topic}": "route", "{source.table}": "source_table", "{source.db}": "source_db"}
    parts = re.split(r"(\{[^}]*\})", template)
    return F.concat(*[F.col(columns[p]) if p in columns else F.lit(p) for p in parts if p])


def is_routed(cfg: MySqlSinkConfig) -> bool:
    return any(p in cfg.table for p in TABLE_PLACEHOLDERS)


def unroutable(target: SinkTarget, frame: DataFrame) -> DataFrame | None:
    """The valid changes a routed MySQL sink cannot name a table for (the source field its template
    needs is missing, or the name is not a table name a topic could give), with why; None when the
    sink is not routed."""
    from pyspark.sql import functions as F  # noqa: PLC0415

    from spark_jobs.records import bad_route_reason  # noqa: PLC0415

    cfg = target.config
    if not isinstance(cfg, MySqlSinkConfig) or not is_routed(cfg) or "source_table" not in frame.columns:
        return None
    name = table_name(cfg.table)
    reason = F.when(name.isNull(), F.lit(f"the change has no source field for table {cfg.table!r} "
                                         "(source.table / source.db)")).otherwise(bad_route_reason(name))
    return frame.where(reason.isNotNull()).withColumn("error_message", reason)


def _mysql_expand(target: SinkTarget, frame: DataFrame) -> list[tuple[SinkTarget, DataFrame]]:
    from pyspark.sql import functions as F  # noqa: PLC0415

    cfg = target.config
    assert isinstance(cfg, MySqlSinkConfig)
    if not is_routed(cfg) and cfg.columns:
        return [(target, frame)]
    tagged, tables, _described = mysql_routes(target, frame)
    return [(concrete, tagged.where(F.col("_table") == table).drop("_table")) for table, concrete in tables]


def mysql_routes(target: SinkTarget,
                 frame: DataFrame) -> tuple[DataFrame, list[tuple[str, SinkTarget]], dict[str, list[str]]]:
    """A routed or derived MySQL sink's changes tagged with their table (``_table``; the ones it
    cannot name a table for are left out: ``unroutable``), the concrete target of each table,
    with its columns from the record schema where the sink declares none, and each table's row
    schemas in this window (``schemas_by``)."""
    from pyspark.sql import functions as F  # noqa: PLC0415

    cfg = target.config
    assert isinstance(cfg, MySqlSinkConfig)
    routed, derived = is_routed(cfg), not cfg.columns
    debezium = "row_schema" in frame.columns  # decoded envelopes: the Connect schema rides in row_schema
    name = table_name(cfg.table) if routed else F.lit(cfg.table)
    tagged = whole = frame.withColumn("_table", name)
    if routed:  # the others are dead letters (unroutable)
        from spark_jobs.records import bad_route_reason  # noqa: PLC0415

        ok = F.col("_table").isNotNull() & bad_route_reason(F.col("_table")).isNull()
        whole = tagged.withColumn("_table", F.when(ok, F.col("_table")))
        tagged = tagged.where(ok)
    described: dict[str, list[str]] = {}
    if debezium:
        # read over the whole frame: a schema described on a change this sink cannot route still
        # describes the tables of the others (schemas are shared by content: schemas_by)
        described = {t: d for t, d in schemas_by(whole, "_table").items() if t is not None}
        tables = list(described)
    else:
        tables = [r["_table"] for r in tagged.select("_table").distinct().collect()]
    out = []
    for table in sorted(tables):
        if not derived:
            eff = cfg.model_copy(update={"table": table})
        elif debezium:
            eff = derive_from_connect(target, table, described[table])
        else:
            eff = derive_mysql(cfg, table, frame.schema)
        out.append((table, replace(target, config=eff)))
    return tagged, out, described


def schemas_by(frame: DataFrame, group: str) -> dict[Any, list[str]]:
    """Per value of ``group`` (a table, a route), the decoder's row schemas of its changes in the order
    of their changes, so the first one decides a field's type; a group without any has []. One job.

    A decoder describes each schema once per read task, on its first change (``row_schema``); the
    other changes carry its ``schema_id`` only. The description is found by that id, whichever
    group its first change went to: a table is its route's, a schema is shared by content (two
    topics whose records carry one schema, name and all, each get their table: :func:`by_content`)."""
    from pyspark.sql import functions as F  # noqa: PLC0415

    sid = F.col("schema_id") if "schema_id" in frame.columns else F.lit(None).cast("string")
    seen = frame.groupBy(F.col(group).alias("g"), sid.alias("sid"), F.col("row_schema").alias("s")).agg(
        F.min("version").alias("v")).collect()
    described: dict[Any, list[str]] = {}
    for g, s, _v in by_content([(r["g"], r["sid"], r["s"], r["v"]) for r in seen]):
        described.setdefault(g, [])
        if s is not None:
            described[g].append(s)
    return described


def by_content(seen: list[tuple[Any, str | None, str | None, int | None]],
               known: dict[str, str] | None = None) -> list[tuple[Any, str | None, int | None]]:
    """(group, schema_id, row_schema, min version) of a window's changes -> (group, row_schema, min
    version) first by version: each change's description found by its schema_id where the change
    carries none (in ``seen`` or in ``known``, schema_id -> row_schema); (group, None, version) for
    a group none of whose changes has one."""
    known = dict(known or {})
    for _g, sid, s, _v in sorted(seen, key=lambda r: (r[3] is None, r[3] or 0)):
        if sid is not None and s is not None:
            known.setdefault(sid, s)
    best: dict[tuple[Any, str | None], int | None] = {}
    for g, sid, s, v in seen:
        k = (g, s if s is not None else known.get(sid) if sid is not None else None)
        best[k] = v if k not in best else _smaller(best[k], v)
    described = {g for g, s in best if s is not None}
    kept = [(g, s, v) for (g, s), v in best.items() if s is not None or g not in described]
    return sorted(kept, key=lambda r: (r[2] is None, r[2] or 0))


def _smaller(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else min(a, b)


def derive_from_connect(target: SinkTarget, table: str, descriptions: list[str], latest: bool = False) -> MySqlSinkConfig:
    """A table's columns and key from the Connect schemas of its changes in this window (the
    decoder's row_schema: connectors/debezium/schema_columns.mysql_columns). Several schemas (the source
    table changed within the window): their columns together, the first one's types where they
    overlap (a table is created as the window's first changes need it), or with ``latest`` the
    last one's (a table is evolved to what the latest changes need: connectors/mysql/evolution.py);
    the types inferred from records without a schema joined (spark_jobs/row_schemas.py). No schema in
    this window (only deletes by key): the table as it is in MySQL. pk_mode kafka: keyed by the
    records' coordinates."""
    cfg = target.config
    assert isinstance(cfg, MySqlSinkConfig)
    columns: dict[str, dict[str, Any]] = {}
    key: list[str] = []
    for text in descriptions:
        description = json.loads(text)
        for column in description["columns"]:
            columns[column["name"]] = merged(columns.get(column["name"]), column, latest)
        key = description["key"] if latest and description["key"] else key or description["key"]
    if not columns:
        columns, key = _existing_table(target, table)
    if cfg.pk_mode == "kafka":  # every record a row of its own, keyed by its coordinates (tables.project_rows)
        columns, key = by_coordinates(columns), [c["name"] for c in KAFKA_COLUMNS]
    pk = cfg.primary_key or key
    for name in pk:  # an inferred key column of text, bytes or JSON bounded (row_chains.key_type)
        if columns.get(name, {}).get("inferred"):
            columns[name] = {**columns[name], "type": key_type(columns[name]["type"])}
    if not pk:
        raise ConfigError(f"sink {cfg.name!r}: table {table!r} has no primary key: the record key has no fields (no "
                          "Connect schema, and not a JSON object) and the sink declares no primary_key; declare "
                          "primary_key")
    missing = [k for k in pk if k not in columns]
    if missing:
        raise ConfigError(f"sink {cfg.name!r}: primary_key {missing} is not a field of table {table!r}'s records "
                          f"({list(columns)})")
    data = {**cfg.model_dump(), "table": table, "primary_key": pk,
            "columns": [{"name": c["name"], "type": c["type"], "nullable": c["nullable"] and c["name"] not in pk}
                        for c in columns.values()],
            "ignore_null_updates": _present(cfg.ignore_null_updates, list(columns), pk),
            "track_history": _present(cfg.track_history, list(columns), pk)}
    try:
        return MySqlSinkConfig.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise ConfigError(f"sink {cfg.name!r}: cannot create table {table!r} from the record schema: {problems}") from None


def _present(listed: list[str], columns: list[str], key: list[str]) -> list[str]:
    """A routed sink's ``ignore_null_updates`` (``track_history``) for one of its tables: the listed
    columns it has (a history table with none of the tracked columns opens a version per change)."""
    return [c for c in listed if c in columns and c not in key]


def _existing_table(target: SinkTarget, table: str) -> tuple[dict[str, dict[str, Any]], list[str]]:
    from connectors.mysql.sink import existing_columns  # noqa: PLC0415

    cfg = target.config
    assert isinstance(cfg, MySqlSinkConfig)
    own = [cfg.deleted_column] if cfg.delete == "soft" else list(HISTORY_OWN) if cfg.mode == "history" else []
    found = existing_columns(target.url, table, own)
    if found is None:
        raise ConfigError(f"sink {cfg.name!r}: table {table!r} does not exist and this window's changes of it carry "
                          "no Connect schema to create it from (schemas.enable=false, or only deletes): declare the "
                          "sink's columns")
    columns, key = found
    return {c["name"]: c for c in columns}, key


def _mysql_prepare(target: SinkTarget) -> None:
    """Create or evolve the table once, on the driver, before the tasks write to it."""
    sink = _mysql_open(target)
    sink.open()
    sink.close()


def _es_expand(target: SinkTarget, frame: DataFrame) -> list[tuple[SinkTarget, DataFrame]]:
    """An index without a declared mapping gets one from the Connect schema of its changes
    (connectors/debezium/schema_columns.es_property): the mapping of each index the template routes to rides
    in ``SinkTarget.mappings``, so that one job writes them all. Changes without a schema leave it to
    Elasticsearch's dynamic mapping, as before."""
    from pyspark.sql import functions as F  # noqa: PLC0415

    cfg = target.config
    assert isinstance(cfg, ElasticsearchSinkConfig)
    if cfg.mapping is not None or "row_schema" not in frame.columns:
        return [(target, frame)]
    routed = "{topic}" in cfg.index
    by_route = schemas_by(frame if routed else frame.withColumn("route", F.lit(None).cast("string")), "route")
    return [(replace(target, mappings=tuple(es_mappings(cfg, by_route))), frame)]


def es_mappings(cfg: ElasticsearchSinkConfig, by_route: dict[Any, list[str]]) -> list[tuple[str, str]]:
    """(index, mapping JSON) of each index the sink routes to, from the row schemas of its changes
    (``schemas_by``: per route, first by version; the first schema that has a field decides its type)."""
    out = []
    for route, descriptions in sorted(by_route.items(), key=lambda kv: kv[0] or ""):
        properties: dict[str, Any] = {}
        for text in descriptions:
            for name, prop in json.loads(text).get("properties", {}).items():
                properties.setdefault(name, prop)
        if properties:
            index = cfg.index.replace("{topic}", route.lower()) if "{topic}" in cfg.index else cfg.index
            out.append((index, json.dumps({"properties": properties})))
    return out


SINK_TYPES: dict[str, SinkType] = {
    "mysql": SinkType(_mysql_project, _mysql_keys, arrow_changes, _mysql_open, _mysql_expand, _mysql_prepare),
    "elasticsearch": SinkType(_es_project, lambda cfg: None if cfg.key_ignore else ["c_0", "c_1"],
                              _es_changes, _es_open, _es_expand),
}


# -- a routed sink's tables ----------------------------------------------------------------------------
@dataclass(frozen=True)
class TableGroup:
    """A routed sink and the concrete target of each table its changes in this window go to."""

    target: SinkTarget
    tables: dict[str, SinkTarget]
    descriptions: dict[str, list[str]] = field(default_factory=dict)  # per table, its row schemas in the window

    @property
    def config(self) -> MySqlSinkConfig:
        return _mysql_config(self.target)


def prepare_derived(group: TableGroup, policy: str, decisions: dict[str, str] | None = None,
                    pipeline: str = "PIPELINE") -> tuple[TableGroup, list[dict[str, Any]]]:
    """A routed sink's tables made from the record schema (no declared columns) created, or changed as
    the pipeline's ``schema_changes`` says (connectors/mysql/sink.prepare_derived; ``decisions``: an
    operator's, under pause), before any write:
    the group with each table's config as it is written, and the schema changes for the stats."""
    from connectors.mysql.sink import prepare_derived as prepare  # noqa: PLC0415

    pairs = []
    generic: dict[str, dict[str, str]] = {}
    inferred: dict[str, frozenset[str]] = {}
    for table, target in sorted(group.tables.items()):
        first = target.config
        assert isinstance(first, MySqlSinkConfig)
        described = group.descriptions.get(table, [])
        latest = derive_from_connect(group.target, table, described, latest=True) if len(described) > 1 else first
        pairs.append((first, latest))
        plain = generic.setdefault(table, {})  # the types without the propagated source types
        for text in described:  # (connectors/debezium/schema_columns._column)
            plain.update({c["name"]: c["generic"] for c in json.loads(text)["columns"] if "generic" in c})
        inferred[table] = inferred_columns(described)  # typed from values: a table's type that holds them stays
    configs, changes = prepare(group.target.url, pairs, policy, decisions, pipeline, generic, inferred)
    tables = {table: replace(target, config=configs[table]) for table, target in group.tables.items()}
    return TableGroup(group.target, tables, group.descriptions), changes


def prepare_tables(targets: list[SinkTarget]) -> None:
    """Create or evolve each table once, on the driver, on one connection, before the tasks write."""
    from connectors.mysql.sink import MySqlSink  # noqa: PLC0415
    from connectors.mysql.sink import prepare_tables as prepare  # noqa: PLC0415

    if targets:
        prepare(targets[0].url, [MySqlSink(_mysql_config(t), t.url) for t in targets])
