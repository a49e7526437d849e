"""Decoding records in the read task's way, for the decoders' unit tests: raw Kafka records -> the
change rows (connectors/formats.py), as Python dicts."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from connectors.debezium.envelope import hints_from_columns
from connectors.formats import decoder
from connectors.memory import MemorySource, Record


def raw_batch(records: list[tuple[bytes | None, bytes | None]], topic: str = "t") -> pa.RecordBatch:
    return MemorySource([Record(topic, 0, i, k, v, 1000 + i) for i, (k, v) in enumerate(records)]).batch()


def decode(source_format: str, records: list[tuple[bytes | None, bytes | None]],
           columns: list[dict[str, Any]] | None = None,
           versioning: str = "source_ts_ms", key_fields: frozenset[str] = frozenset(),
           topic: str = "t") -> list[dict[str, Any]]:
    """The change rows of ``records``; ``columns``: the sink's declared columns (name, type, field)."""
    hints = hints_from_columns((c.get("field", c["name"]), c["type"], c.get("encoding")) for c in columns or [])
    changes = decoder(source_format, versioning, hints, True, key_fields).decode_batch(raw_batch(records, topic))
    rows = changes.to_pylist()
    for r in rows:
        r["image"] = dict(r["image"]) if r["image"] is not None else None
    return rows


def apply(rows: list[dict[str, Any]], key: str = "id") -> dict[str, dict[str, Any]]:
    """The table the changes leave (in log order, the last change per key), as image texts."""
    table: dict[str, dict[str, Any]] = {}
    for r in rows:
        if r["change_op"] == "upsert":
            table[r["image"][key]] = r["image"]
        elif r["change_op"] == "delete":
            table.pop(r["image"][key], None)
    return table
