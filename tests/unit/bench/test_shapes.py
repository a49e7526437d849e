"""The benchmark's real-shaped streams (bench/shapes.py) against cdcflow's own Debezium decoder: every
event decodes, value for value, into the final state the benchmark checks the sinks by; the bytes are
the fixture's encoding of the same change (tests/fixtures/debezium/mysql_all_types.py, Debezium 3.7's
MySQL connector and JsonConverter with schemas, tombstones.on.delete=true)."""

from __future__ import annotations

import base64
import datetime as dt
import json
import struct
from collections import Counter
from decimal import Decimal
from functools import partial
from typing import Any

import pytest

from bench import realrows, shapes
from connectors import images
from connectors.changes import RecordDecoder
from connectors.debezium import columns
from connectors.debezium.envelope import Decoder
from tests.fixtures.debezium import mysql_all_types as fx
from tests.unit.decoding import raw_batch


def decoder_text(kind: str, value: Any) -> str | None:
    """The exact text the decoder gives MySQL for a source value (docs/types.md, "MySQL is given"),
    written from the mapping table rather than from bench/realrows.py."""
    if value is None:
        return None
    if kind in ("boolean", "bit1"):
        return "true" if value else "false"
    if kind in ("float", "double"):
        return repr(value)  # the number as written (the column-wise decode may drop a ".0": see _numbers)
    if kind == "decimal":
        return format(value, "f")
    if kind == "binary":
        return base64.b64encode(value).decode()
    if kind == "date":
        return value.isoformat()
    if kind == "time":
        micros = value // dt.timedelta(microseconds=1)
        return f"{micros // 3_600_000_000:02d}:{micros // 60_000_000 % 60:02d}:{micros // 1_000_000 % 60:02d}." \
               f"{micros % 1_000_000:06d}"
    if kind == "datetime":
        return value.isoformat(sep=" ", timespec="microseconds")
    if kind == "timestamp":
        return value.astimezone(dt.UTC).replace(tzinfo=None).isoformat(sep=" ", timespec="microseconds")
    if kind == "point":  # MySQL's internal form: SRID (4 bytes, little-endian) + WKB
        wkb = b"\x01" + struct.pack("<Idd", 1, value["x"], value["y"])
        return base64.b64encode(struct.pack("<I", value["srid"]) + wkb).decode()
    return str(value)


def _numbers(image: dict[str, str | None]) -> dict[str, Any]:
    """FLOAT and DOUBLE texts as the numbers MySQL reads from them: 5596.0 and 5596 are one value
    (tests/unit/connectors/debezium/test_columns.py compares the two decodes the same way)."""
    return {k: Decimal(v) if v is not None and realrows.KIND[k] in ("float", "double") else v for k, v in image.items()}


def expected_images(shape: shapes.RealShape) -> dict[tuple[str, str], dict[str, Any]]:
    out = {}
    for table, stored in shape.final_state().items():
        for values in shape.rows(stored):
            out[(table, str(values[0]))] = _numbers({name: decoder_text(kind, v) for (name, kind, _o, _a), v
                                                     in zip(realrows.COLUMNS, values, strict=True)})
    return out


def applied(decoded: list[tuple[str, dict[str, Any]]]) -> dict[tuple[str, str], dict[str, Any]]:
    """The tables the changes leave: the last change per key, in log order (by version, as the sink's guard)."""
    state: dict[tuple[str, str], tuple[int, dict[str, str | None] | None]] = {}
    for topic, row in decoded:
        assert row["error_stage"] is None, row["error_message"]
        key = (topic.rsplit(".", 1)[-1], row["image"]["id"])
        version = row["version"] if row["version"] is not None else state[key][0]  # a tombstone: the delete's
        if key not in state or version >= state[key][0]:
            state[key] = (version, row["image"] if row["change_op"] == "upsert" else None)
    return {k: _numbers(image) for k, (_v, image) in state.items() if image is not None}


def decode(messages: list[shapes.Message], column_wise: bool) -> list[tuple[str, dict[str, Any]]]:
    """Each topic's records as one read task decodes them (column-wise, or record by record): (topic, change)."""
    out: list[tuple[str, dict[str, Any]]] = []
    for topic in dict.fromkeys(t for t, _k, _v in messages):
        records: list[tuple[bytes | None, bytes | None]] = [(k, v) for t, k, v in messages if t == topic]
        batch = raw_batch(records, topic)
        decoder = Decoder("source_ts_ms", need_json=False)
        if column_wise:
            decoded = columns.decode_columns(decoder, batch, partial(RecordDecoder.decode_batch, decoder))
        else:
            decoded = RecordDecoder.decode_batch(decoder, batch)
        i = decoded.schema.get_field_index("image")
        rows = decoded.set_column(i, "image", images.as_map(decoded.column(i))).to_pylist()
        for r in rows:
            r["image"] = dict(r["image"]) if r["image"] is not None else None
        out += [(topic, r) for r in rows]
    return out


@pytest.mark.parametrize("column_wise", [False, True])
def test_events_decode_into_the_final_state(column_wise: bool) -> None:
    shape = shapes.RealShape(events=2_500, keys=300, seed=5)
    messages = list(shape.messages("t1"))
    assert len(messages) == 2_500
    assert applied(decode(messages, column_wise)) == expected_images(shape)


def test_tables50_routes_by_topic_and_decodes_into_each_tables_state() -> None:
    shape = shapes.make("tables50", 3_000, 1_000, 9)
    assert isinstance(shape, shapes.RealShape)
    messages = list(shape.messages("t2"))
    topics = shape.topics("t2")
    assert len(topics) == 50 and {t for t, _k, _v in messages} == set(topics)
    assert shape.source("t2") == {"topics_regex": r"bench-t2\.inventory\..*"}
    for topic, _key, value in messages[:200]:
        if value is not None:
            payload = json.loads(value)["payload"]
            assert payload["source"]["table"] == topic.rsplit(".", 1)[-1] and payload["source"]["name"] == "bench-t2"
    assert applied(decode(messages, column_wise=True)) == expected_images(shape)


def test_events_are_the_fixtures_encoding_of_each_change() -> None:
    """Each value rebuilt with the fixture's own functions (schema, source block, row images) from the
    change it carries is the same bytes; a delete is followed by its key's tombstone."""
    shape = shapes.RealShape(events=400, keys=60, seed=3)
    topic = shape.topics("t3")[0]
    schema = json.loads(fx._dump(fx._envelope_schema(shapes.MODES)).replace(fx.TOPIC, topic))
    key_schema = json.loads(fx._dump(fx._KEY_SCHEMA).replace(fx.TOPIC, topic))
    rows: dict[int, tuple[Any, ...]] = {}
    previous: tuple[bytes, bytes | None] | None = None
    for (op, _t, key, variant), (_topic, key_bytes, value) in zip(shape.changes(), shape.messages("t3"), strict=True):
        assert key_bytes == fx._dump({"schema": key_schema, "payload": {"id": key}}).encode()
        if op == "tombstone":
            assert value is None and previous is not None and previous[0] == key_bytes
            assert json.loads(previous[1] or b"{}")["payload"]["op"] == "d"
            continue
        assert value is not None
        payload = json.loads(value)["payload"]
        source = payload["source"]
        after = realrows.row(key, variant, 3) if op != "d" else None
        before = rows.get(key) if op != "c" else None
        expected = {"before": None if before is None else fx._row_payload(dict(zip(realrows.NAMES, before)), shapes.MODES),
                    "after": None if after is None else fx._row_payload(dict(zip(realrows.NAMES, after)), shapes.MODES),
                    "source": {**fx._source(source["ts_ms"] // 1000, source["pos"]), "name": "bench-t3"},
                    "transaction": None, "op": op, "ts_ms": payload["ts_ms"], "ts_us": payload["ts_us"],
                    "ts_ns": payload["ts_ns"]}
        assert value == fx._dump({"schema": schema, "payload": expected}).encode()
        assert payload["ts_ns"] // 1000 == payload["ts_us"] and payload["ts_us"] // 1000 == payload["ts_ms"]
        if after is None:
            rows.pop(key)
        else:
            rows[key] = after
        previous = (key_bytes, value)


def test_mix_sizes_and_reproducibility() -> None:
    shape = shapes.RealShape(events=4_000, keys=500, seed=1)
    ops = Counter(op for op, *_ in shape.changes())
    assert sum(ops.values()) == 4_000 and ops["d"] == ops["tombstone"] > 50 and ops["c"] > 400 and ops["u"] > 2_500
    sizes = [len(v) for _t, _k, v in shape.messages("t4") if v is not None]
    assert 8_000 < sum(sizes) / len(sizes) < 12_000  # ~10 KB: the 33-column schema written in every value
    assert list(shape.messages("t4")) == list(shapes.RealShape(4_000, 500, 1).messages("t4"))
    live: dict[int, int] = {}
    for op, _t, key, variant in shape.changes():
        if op in ("c", "u"):
            assert (op == "c") == (key not in live)  # a create for a new row, an update of a live one
            live[key] = variant
        elif op == "d":
            assert live.pop(key) == variant  # a delete carries the row it deletes
    assert shape.final_state() == {fx.TABLE: live}


def test_source_template_is_the_fixtures_source_block() -> None:
    text = shapes.source_template("bench-x", "t07") % {"ms": 5_000, "us": 5_000_000, "ns": 5_000_000_000, "pos": 77}
    assert text == fx._dump({**fx._source(5, 77), "name": "bench-x", "table": "t07"})
