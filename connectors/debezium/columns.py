"""Debezium envelopes decoded column-wise: each distinct row schema once, every record of it at once,
in Arrow (issue 21; the per-record decode, connectors/debezium/envelope.py, stays for the rest).

A batch's records are grouped by shape: the envelopes without the JsonConverter's wrapper (their
types come from the sinks' declared columns), and, per distinct ``schema``, the wrapped ones (their
payload is cut out of the value by the wrapper's byte prefix, so the schema is parsed once, not once
per record). Each group is parsed by Arrow's JSON reader into typed columns (int64, string, decimal,
struct …) under a read schema made from the Connect schema or the declared columns, and each used
field becomes its exact MySQL text: a cast where the text is the value's own (strings, integers,
booleans, decimals), the field's converter (connectors/debezium/types.py) per value for the logical
types (Decimal bytes, dates, times …).

Where a sink needs documents (Elasticsearch), each row's JSON document is made column-wise too:
strings escaped, numbers and booleans as they read, each logical type's document value by its
converter. Without a field list (no declared columns name every field a sink uses), a schemaless
group reads the first record's fields, and any other field the records have by its JSON type.

The reader is strict: a value of another JSON type than its column's, a duplicate field, a line that
is not one object, or a value a converter refuses fails the group, and its records take the
per-record decode, which says per record what is wrong (a dead letter) or reads the odd shape.
Tombstones, the unwrapped rows of ExtractNewRecordState, deletes without a ``before`` image and
records that are not a JSON object take it too. So the result is the per-record decode's, record for
record, except that a number's text is Arrow's (a DOUBLE's 19.90 is 19.9, a DECIMAL read from a JSON
number has its column's scale: the same value), and that a field a record lacks is null in its image
and document (the per-record decode leaves it out: the same row in MySQL and the same document in
Elasticsearch searches).
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from typing import Any

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from connectors import images
from connectors.changes import DECODED_NAMES, JSON_DECODE
from connectors.debezium.arrow_read import Unsupported, connect_type, declared_type
from connectors.debezium.envelope_parts import WRAPPER_DECODER
from connectors.debezium.group_decode import Decoder, Group, decode_group

WRAPPED = b'{"schema":'
MAX_GROUPS = 16  # schemas per batch read column-wise; a batch of more takes the per-record decode for the rest


# -- grouping ------------------------------------------------------------------------------------------
def _plain_group(decoder: Decoder, rows: np.ndarray, lines: pa.Array) -> Group:
    """The envelopes without the wrapper: their fields are the sinks' (decoder.fields), read by the
    declared columns."""
    try:
        env = JSON_DECODE.decode(lines[0].as_py())
    except (msgspec.DecodeError, RecursionError, UnicodeDecodeError):
        raise Unsupported("the first record is not an envelope") from None
    sample = env if decoder.rows else env.get("before" if env.get("op") == "d" else "after") if isinstance(
        env, dict) else None
    sample = sample if isinstance(sample, dict) else {}
    infer = decoder.fields is None  # every field: the first record's, and any other the records have
    names = list(sample) if infer else sorted(decoder.fields)  # type: ignore[arg-type]
    if decoder.rows and decoder.nested:  # objects, arrays (and nulls, which may be either): by their JSON types
        names = [n for n in names if not isinstance(sample.get(n), dict | list)
                 and (sample.get(n) is not None or n in decoder.hints)]  # a declared column keeps its type
    # with ``infer``, a field no column declares whose first value is a number or null is typed by Arrow
    # over the whole group: integers int64, with a fraction among them float64 (not the first value's type,
    # which would send a later 2.5 to the per-record decode)
    pinned = [n for n in names if not (infer and n not in decoder.hints and _open(sample.get(n)))]
    row_type = pa.struct([(n, declared_type(decoder.hints.get(n), sample.get(n))) for n in pinned])
    reader = decoder.schemaless
    return Group(rows, lines, row_type, {n: reader.converters.get(n, reader.fallback) for n in names}, None, False,
                  infer, reader.fallback, frozenset(names) - set(pinned))


def _open(sample: Any) -> bool:
    """A first value whose type the group's other values may widen: a JSON number, or null."""
    return sample is None or isinstance(sample, int | Decimal | float) and not isinstance(sample, bool)


def _wrapper_prefix(first: bytes) -> tuple[bytes, msgspec.Raw] | None:
    """The bytes before the payload in a JsonConverter value ({"schema":…,"payload":), and its schema;
    None for a value of another layout."""
    try:
        top = WRAPPER_DECODER.decode(first)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError, UnicodeDecodeError):
        return None
    prefix = WRAPPED + bytes(top.schema) + b',"payload":'
    return (prefix, top.schema) if first.startswith(prefix) else None


def _wrapped_group(decoder: Decoder, rows: np.ndarray, payloads: pa.Array, closed: np.ndarray,
                   schema: msgspec.Raw) -> Group:
    """The records of one schema, whose values start with its wrapper's prefix: ``payloads``, the
    batch's values with that prefix and the last byte cut off (``closed``: that byte is the
    wrapper's ``}``). The payloads are cut from the whole batch and then taken: a take of the
    values themselves would copy each schema again (~7 KB a record for a 33-column table)."""
    after = decoder.reader(schema, "" if decoder.rows else "after")  # compiled once per schema
    before = after if decoder.rows else decoder.reader(schema, "before")
    if after.schema is None or before.schema != after.schema:
        raise Unsupported("a schema without one row struct")
    if not closed[rows].all():
        raise Unsupported("a wrapper of another layout")
    used = [(n, s) for n, s in after.schema.fields if decoder.fields is None or n in decoder.fields]
    row_type = pa.struct([(n, connect_type(s)) for n, s in used])
    return Group(rows, payloads.take(pa.array(rows)), row_type, {n: after.converters[n] for n, _s in used}, after,
                  True)


def _starts_with(values: pa.Array, prefix: bytes) -> np.ndarray:
    head = pc.binary_slice(values, 0, len(prefix))
    return pc.fill_null(pc.equal(head, pa.scalar(prefix, pa.binary())), False).to_numpy(zero_copy_only=False)


def _ends_with(values: pa.Array, suffix: bytes) -> np.ndarray:
    tail = pc.binary_slice(values, -len(suffix))
    return pc.fill_null(pc.equal(tail, pa.scalar(suffix, pa.binary())), False).to_numpy(zero_copy_only=False)


def _members(values: pa.Array, rows: np.ndarray, prefix: bytes) -> np.ndarray:
    """Those of ``rows`` whose value starts with ``prefix``. Compared in place when the rows are
    most of the batch (a take would copy each value first), else on the rows taken."""
    if 2 * len(rows) >= len(values):
        return rows[_starts_with(values, prefix)[rows]]
    return rows[_starts_with(values.take(pa.array(rows)), prefix)]


def payloads(values: pa.Array) -> pa.Array:
    """``values`` with the JsonConverter's wrapper cut off each (its ``{"schema":…,"payload":`` and
    last ``}``), schema by schema as :func:`decode_columns` cuts them; the others as they are. For a
    reader of a few envelope fields (spark_jobs/transform/row_unwrap.py): a wrapped value is mostly its schema."""
    pending = _starts_with(values, WRAPPED) & _ends_with(values, b"}")
    out = values
    for _ in range(MAX_GROUPS):
        if not pending.any():
            break
        first = int(np.flatnonzero(pending)[0])
        found = _wrapper_prefix(values[first].as_py())
        if found is None:
            pending[first] = False
            continue
        members = pending & _starts_with(values, found[0])
        out = pc.if_else(pa.array(members), pc.binary_slice(values, len(found[0]), -1), out)
        pending &= ~members
    return out


HALVE_DOWN_TO = 64  # records: a group that fails is decoded in halves down to this, the rest record by record


def _halving(decoder: Decoder, batch: pa.RecordBatch, rows: np.ndarray,
             group: Callable[[np.ndarray], Group]) -> list[tuple[np.ndarray, list[pa.Array]]]:
    """``rows`` decoded column-wise as one group, or, where that fails (one odd or bad record fails
    its group), in halves: so an odd record leaves the per-record decode its own few neighbours, not
    the whole group (whose images would then be texts, not typed)."""
    try:
        return [(rows, decode_group(decoder, batch, group(rows)))]
    except Unsupported:
        # a chain that takes structs apart (``nested``) reads an odd record alone, to keep its structs
        if len(rows) <= (1 if decoder.nested else HALVE_DOWN_TO):
            return []
        half = len(rows) // 2
        return _halving(decoder, batch, rows[:half], group) + _halving(decoder, batch, rows[half:], group)


def decode_columns(decoder: Decoder, batch: pa.RecordBatch,
                   per_record: Callable[[pa.RecordBatch], pa.RecordBatch]) -> pa.RecordBatch:
    """``batch`` decoded: its groups column-wise, the rest by ``per_record``, in the batch's order."""
    if decoder.rows in ("string", "bytes"):  # a text or bytes, whatever they look like (not a row)
        return per_record(batch)
    values = batch.column("value")
    n = batch.num_rows
    wrapped = _starts_with(values, WRAPPED)
    plain = _starts_with(values, b"{") & ~wrapped
    if decoder.rows == "json":  # every object is a row (a {schema, payload} one too: two fields)
        plain, wrapped = plain | wrapped, np.zeros(n, dtype=bool)
    elif decoder.rows == "json_schema":  # a value without the wrapper: the per-record decode refuses it
        plain = np.zeros(n, dtype=bool)
    parts: list[tuple[np.ndarray, list[pa.Array]]] = []
    slow = np.ones(n, dtype=bool)
    if plain.any():
        rows = np.flatnonzero(plain)
        for done, columns in _halving(decoder, batch, rows,
                                      lambda r: _plain_group(decoder, r, values.take(pa.array(r)))):
            parts.append((done, columns))
            slow[done] = False
    pending = wrapped.copy()
    closed = _ends_with(values, b"}") if wrapped.any() else np.zeros(n, dtype=bool)
    for _ in range(MAX_GROUPS):  # one schema at a time: the first pending record's, byte for byte
        if not pending.any():
            break
        rows = np.flatnonzero(pending)
        found = _wrapper_prefix(values[int(rows[0])].as_py())
        if found is None:
            pending[rows[0]] = False
            continue
        prefix, schema = found
        members = _members(values, rows, prefix)
        pending[members] = False
        payloads = pc.binary_slice(values, len(prefix), -1)
        for done, columns in _halving(decoder, batch, members, lambda r, p=payloads, sc=schema: _wrapped_group(
                decoder, r, p, closed, sc)):
            parts.append((done, columns))
            slow[done] = False
    if not parts:
        return per_record(batch)
    if slow.any():
        rows = np.flatnonzero(slow)
        decoded = per_record(batch.take(pa.array(rows)))
        if decoded.num_rows != len(rows):  # a record of several changes: keep the batch whole
            return per_record(batch)
        parts.append((rows, [decoded.column(f) for f in DECODED_NAMES]))
    order = np.argsort(np.concatenate([rows for rows, _c in parts]), kind="stable")
    back = None if np.array_equal(order, np.arange(n)) else pa.array(order)  # one group of every record: in order
    columns = []
    for i, name in enumerate(DECODED_NAMES):
        pieces = [cols[i] for _r, cols in parts]
        whole = images.concat(pieces) if name == "image" else pa.concat_arrays(pieces)
        columns.append(whole if back is None else whole.take(back))
    return pa.RecordBatch.from_arrays([*batch.columns, *columns], names=[*batch.schema.names, *DECODED_NAMES])
