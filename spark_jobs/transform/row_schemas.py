"""Row schemas inferred from the values: the table a record without a schema makes (issue 43).

A MySQL sink without declared ``columns`` creates each table from the record schema. A record of the
``json`` converter (``schemas.enable=false``) carries none, so the read task describes its table from
its values instead: from the types of the typed row images as the chain leaves them
(connectors/images.py: the decode reads a JSON number as int64, or float64 where a record has a
fraction, a boolean as bool, a text as string; a chain's Cast, TimestampConverter, InsertField,
Flatten … make their own types). The description has the form of a Connect schema's
(connectors/debezium/schema_columns.mysql_columns: columns, key), so the window creates and evolves
the table as it does one made from a Connect schema (spark_jobs/write/prepare.py); each column is marked
``inferred``, which decides how descriptions are merged:

* a field's type comes from the values it has: a field null (or missing) in every upsert of the
  window adds no column (a later window with a value adds it); deletes and tombstones add nothing
  (a tombstone's image is its key's text);
* a field of several types in the window (records of the task, of other tasks) takes the type that
  holds them all (connectors/mysql/evolution.joined): an integer and a double a DOUBLE, an integer and
  a text (or a boolean and a number, a struct and a text) a LONGTEXT;
* a table that exists keeps its column's type where it holds the values (evolution.settled): a
  DOUBLE column takes integers, a LONGTEXT anything; a wider need is a schema change, as
  ``schema_changes`` decides (BIGINT to DOUBLE is narrow: a pipeline stops rather than round);
* the primary key: the sink's ``primary_key``, else the fields of the Kafka key (a JSON object, or
  the payload of its ``{schema, payload}`` wrapper), as the chain leaves them (a ValueToKey's
  fields, ReplaceField's renames: chains.key_after);
* every column is nullable, but the key's.

Where a record has a Connect schema, its schema describes the fields it has; an inferred type only
fills in the others. A chain that takes values apart (Flatten, ExtractField, HoistField) is
described from its images whether the records carry a schema or not: the Connect schema is the
schema before such a step.
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from connectors import images
from connectors.debezium.envelope import Decoder
from connectors.registry.decode import json_bytes
from connectors.mysql.evolution import joined
from spark_jobs.chains import key_after, key_type, nested

_INTEGERS = {8: "TINYINT", 16: "SMALLINT", 32: "INT", 64: "BIGINT"}


def mysql_type(kind: pa.DataType) -> str | None:
    """The MySQL column a field of this Arrow type is created as (a key's text and bytes bounded by
    chains.key_type); None for a field that holds only nulls (no type to tell)."""
    if pa.types.is_null(kind):
        return None
    if pa.types.is_boolean(kind):
        return "TINYINT(1)"
    if pa.types.is_integer(kind):
        return _INTEGERS[kind.bit_width] + ("" if pa.types.is_signed_integer(kind) else " UNSIGNED")
    if pa.types.is_floating(kind):
        return "FLOAT" if kind.bit_width == 32 else "DOUBLE"
    if pa.types.is_decimal(kind):
        return f"DECIMAL({min(kind.precision, 65)},{min(kind.scale, 30)})"
    if pa.types.is_date(kind):
        return "DATE"
    if pa.types.is_timestamp(kind):
        return "TIMESTAMP(6)" if kind.tz is not None else "DATETIME(6)"
    if pa.types.is_duration(kind) or pa.types.is_time(kind):
        return "TIME(6)"
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
        return "LONGBLOB"
    if pa.types.is_struct(kind) or pa.types.is_list(kind) or pa.types.is_map(kind):
        return "JSON"
    return "LONGTEXT"


def with_inferred(found: list[list[Any]], rows: pa.Table, tables: pa.Array, chain: Any) -> list[list[Any]]:
    """A dynamic sink's [table, row_schema, min version] of a read task (project._schemas) with the
    descriptions of its tables' records without a schema, inferred from their images (of every
    record after a chain that takes values apart, whose Connect schemas are left out)."""
    upsert = pc.fill_null(pc.equal(rows.column("change_op"), "upsert"), False)
    whole = nested(chain)
    evidence = upsert if whole else pc.and_(upsert, pc.is_null(rows.column("schema_id")))
    if not pc.any(evidence).as_py():
        return [[g, None, v] for g, _s, v in found] if whole else found
    rows, tables = rows.filter(evidence), pc.filter(tables, evidence)
    inferred = []
    for table in pc.unique(tables).to_pylist():
        mine = rows.filter(pc.equal(tables, table))
        description = describe(mine, chain)
        if description is not None:
            inferred.append([table, description, pc.min(mine.column("version")).as_py()])
    described = {g for g, _d, _v in inferred}
    kept = [[g, None if whole else s, v] for g, s, v in found if not (whole and g in described)]
    return kept + inferred


def describe(rows: pa.Table, chain: Any) -> str | None:
    """The table of these upserts (one table's), from their images' types, as JSON (None: no field
    has a value)."""
    image = images.compact(rows.column("image"))
    children = [image.field(i) for i in range(image.type.num_fields)] if pa.types.is_union(image.type) else []
    types: dict[str, str] = {}
    for child in children:
        for field, values in zip(child.type, child.flatten(), strict=True):
            kind = mysql_type(field.type) if values.null_count < len(values) else None
            if kind is not None:
                types[field.name] = joined(types[field.name], kind) if field.name in types else kind
    if not types:
        return None
    key = key_after(chain, kafka_key(rows))
    columns = [{"name": n, "type": key_type(t) if n in key else t, "nullable": n not in key, "inferred": True}
               for n, t in types.items()]
    return json.dumps({"columns": columns, "key": [k for k in key if k in types], "properties": {}})


def kafka_key(rows: pa.Table) -> list[str]:
    """The fields of the first Kafka key among these records that is a JSON object."""
    decoder = Decoder("kafka_offset")  # a key read as the decode reads a tombstone's
    for key in json_bytes(rows, "key").to_pylist():
        fields = decoder.key_image(key)
        if fields:
            return list(fields)
    return []


# -- on the driver: a table's descriptions of the window as one (sinks.derive_from_connect) -------------
KAFKA_COLUMNS = ({"name": "__connect_topic", "type": "VARCHAR(249)", "nullable": False},
                 {"name": "__connect_partition", "type": "INT", "nullable": False},
                 {"name": "__connect_offset", "type": "BIGINT", "nullable": False})  # pk_mode kafka's key


def by_coordinates(columns: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """pk_mode kafka's table: the coordinates first, then the record's fields."""
    coordinates = {c["name"]: c for c in KAFKA_COLUMNS}
    return {**coordinates, **{n: c for n, c in columns.items() if n not in coordinates}}


def merged(prior: dict[str, Any] | None, column: dict[str, Any], latest: bool) -> dict[str, Any]:
    """A column described again by a later description: the first one's type (``latest``: the
    later one's), a Connect schema's over an inferred one's, and two inferred types joined,
    nullable where either is."""
    if prior is None:
        return column
    if prior.get("inferred") and column.get("inferred"):
        nullable = prior["nullable"] or column["nullable"]
        return {**prior, "type": joined(prior["type"], column["type"]), "nullable": nullable}
    if prior.get("inferred") or column.get("inferred"):
        return column if prior.get("inferred") else prior
    return column if latest else prior


def inferred_columns(descriptions: list[str]) -> frozenset[str]:
    """The columns only inferred types describe (no Connect schema of the window has them)."""
    inferred, described = set(), set()
    for text in descriptions:
        for column in json.loads(text)["columns"]:
            (inferred if column.get("inferred") else described).add(column["name"])
    return frozenset(inferred - described)
