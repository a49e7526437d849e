"""The sink registry: for each sink type, how a write task turns its rows into changes and opens
the sink, and how the driver prepares a target; and the tables a sink's changes go to.

Registered explicitly in ``SINK_TYPES`` (no import side effects). A sink type supplies
``to_changes`` (a write task's Arrow batch -> Changes), ``open`` (the Sink, created inside a Spark
task) and ``prepare`` (DDL on the driver, before any task writes). The projection and the reduction
to the last change per key are the read task's (spark_jobs/project/targets.py, spark_jobs/project/tables.py).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import pyarrow as pa
from pydantic import ValidationError

from connectors.base import ArrowRecords, Change, Sink
from connectors.elasticsearch.config import ElasticsearchSinkConfig
from connectors.errors import ConfigError
from connectors.mysql.config import HISTORY_OWN, MySqlSinkConfig
from connectors.mysql.sink import arrow_changes
from spark_jobs.sink_targets import SinkTarget
from spark_jobs.chains import key_type
from spark_jobs.transform.row_schemas import KAFKA_COLUMNS, by_coordinates, inferred_columns, merged

def _columns(batch: pa.RecordBatch, names: list[str]) -> list[list[Any]]:
    return [batch.column(n).to_pylist() for n in names]


@dataclass(frozen=True)
class SinkType:
    to_changes: Callable[[pa.RecordBatch, Any], list[Change]]  # a write task's Arrow batch -> Changes
    open: Callable[[SinkTarget], Sink]
    prepare: Callable[[SinkTarget], None] = lambda t: None  # on the driver, before the tasks write (DDL)


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


def derive_from_connect(target: SinkTarget, table: str, descriptions: list[str], latest: bool = False) -> MySqlSinkConfig:
    """A table's columns and key from the Connect schemas of its changes in this window (the
    decoder's row_schema: connectors/debezium/schema_columns.mysql_columns). Several schemas (the source
    table changed within the window): their columns together, the first one's types where they
    overlap (a table is created as the window's first changes need it), or with ``latest`` the
    last one's (a table is evolved to what the latest changes need: connectors/mysql/evolution.py);
    the types inferred from records without a schema joined (spark_jobs/transform/row_schemas.py). No schema in
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
    for name in pk:  # an inferred key column of text, bytes or JSON bounded (chains.key_type)
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
    "mysql": SinkType(arrow_changes, _mysql_open, _mysql_prepare),
    "elasticsearch": SinkType(_es_changes, _es_open),
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
