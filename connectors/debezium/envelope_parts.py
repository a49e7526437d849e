"""The parts of a Debezium record as msgspec reads them, for the per-record decode
(connectors/debezium/envelope.py) and the column-wise one (connectors/debezium/columns.py).

A value is either the JsonConverter's ``{schema, payload}`` wrapper or the envelope itself
(``op``, ``before``, ``after``, ``source``, ``ts_ms``; Debezium's mysql.adoc, "Change events");
each part is left as raw JSON until it is needed, except in :class:`Plain`, the common unwrapped
envelope read in one pass. The topic name, ``<topic.prefix>.<db>.<table>``, names the table of a
record that carries no source block (a tombstone).
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import msgspec


class Envelope(msgspec.Struct):
    """A Debezium envelope, its parts left as raw JSON until they are needed."""

    op: Any = None
    before: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)
    after: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)
    source: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)
    ts_ms: Any = None


class Top(Envelope):
    """The top level of a value: the JsonConverter's wrapper (schema, payload), or the envelope itself."""

    schema: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)
    payload: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)


class Wrapper(msgspec.Struct):
    """The JsonConverter's wrapper of a key or a value (schemas.enable=true), its parts as raw JSON."""

    schema: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)
    payload: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)


class Source(msgspec.Struct):
    ts_ms: Any = None
    db: Any = None
    table: Any = None


class Plain(msgspec.Struct):
    """The common case in one decode: an envelope without the {schema, payload} wrapper, its row
    images and source block parsed at once (anything else: ``payload`` set, or a part of another
    shape, fails this decode and takes the general path)."""

    op: Any = None
    before: dict[str, Any] | None = None
    after: dict[str, Any] | None = None
    source: Source | None = None
    ts_ms: Any = None
    payload: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)


PLAIN_DECODER = msgspec.json.Decoder(Plain, float_hook=Decimal)  # numbers keep their digits, as JSON_DECODE
TOP_DECODER = msgspec.json.Decoder(Top)
ENVELOPE_DECODER = msgspec.json.Decoder(Envelope)
SOURCE_DECODER = msgspec.json.Decoder(Source)
WRAPPER_DECODER = msgspec.json.Decoder(Wrapper)
_RAW_NULL = b"null"


def is_null(raw: msgspec.Raw | None) -> bool:
    """An absent part (empty Raw) or a JSON null."""
    return raw is None or len(raw) == 0 or bytes(raw).strip() == _RAW_NULL


def table_of_topic(topic: str) -> tuple[str | None, str | None]:
    """(database, table) from a Debezium topic name, <topic.prefix>.<db>.<table> (mysql.adoc, "Topic
    names"): where a tombstone, which has no source block, is routed by {source.table}."""
    parts = topic.split(".")
    return (parts[-2], parts[-1]) if len(parts) >= 3 else (None, None)
