"""The Elasticsearch sink's bulk actions, built from the window's changes (connectors/elasticsearch/sink.py
sends them): an index, a delete and its tombstone, and the two actions that need the stored
document first (docs/soft-deletes.md):

* a **partial** index: an upsert some of whose fields keep the stored values (connectors/partial.py:
  Debezium's placeholder for an unchanged TOASTed column, a null in ``ignore_null_updates``). It is
  sent as an ``index`` of the stored document with the change's fields laid over it, with the
  change's version (``external_gte``): Elasticsearch's ``update`` takes no external version
  ("Update requests do not support versioning"), and its internal one would leave the document's
  ``_version`` off the change's, so that the version guard of every later change would compare with
  the wrong number. Without a stored document the kept fields are left out.
* a **soft delete** (``delete: soft``): an ``index`` of the stored document with the delete's before
  image over it (:func:`before_image`: Debezium's ``before``, when it holds more than the id) and
  ``deleted_field`` set to the delete's source time, at the delete's version, and the tombstone a
  delete writes. The document keeps the delete's version, so an older change is refused as it is by
  a newer one; a newer change replaces the document, and the field with it. A soft delete of a
  document the index does not hold writes its before image, marked, or, without one, the tombstone
  alone.

The stored documents are read in one ``mget`` per bulk request, just before it. A second writer of
the same document between that read and the request (two tasks writing one key at once: records of
one key in two partitions) could have its fields replaced by the older ones read; one writer per key,
as a Debezium topic keyed by the primary key gives, never meets this.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import msgspec

from connectors.base import Change
from connectors.elasticsearch.config import ElasticsearchSinkConfig
from connectors.partial import PartialRule

TOMBSTONES = "cdcflow-tombstones"
SOURCE_MS = 1 << 20  # a source_ts_ms version is ts_ms * 2^20 + (offset mod 2^20) (connectors.changes.VERSION_SHIFT)
STORED_ANSWER = ["docs._index", "docs._id", "docs.found", "docs._source"]
_DECODE = msgspec.json.Decoder(float_hook=Decimal)  # numbers keep their digits: 19.90 stays 19.90
_ENCODE = msgspec.json.Encoder(decimal_format="number")


@dataclass
class Item:
    """One bulk action of a change: ``kind`` index, delete, tombstone or soft (a soft delete's index of
    the stored document); ``kept``: an index's fields that keep the stored values, its ``doc`` parsed."""

    change: Change
    kind: str
    lines: bytes
    kept: frozenset[str] = frozenset()
    doc: dict[str, Any] | None = field(default=None, repr=False)

    @property
    def needs_stored(self) -> bool:
        return self.kind == "soft" or bool(self.kept)


def tombstone_id(index: str, doc_id: str) -> str:
    raw = f"{index}|{doc_id}"
    return raw if len(raw.encode()) <= 512 else hashlib.sha1(raw.encode()).hexdigest()


def deleted_at(version: int) -> str:
    """A soft delete's time, ISO 8601 in UTC with milliseconds: the source time in its version."""
    at = dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(milliseconds=version // SOURCE_MS)
    return at.strftime("%Y-%m-%dT%H:%M:%S.") + f"{at.microsecond // 1000:03d}Z"


def _meta(index: str, doc_id: str, version: int, versioned: bool) -> bytes:
    meta: dict[str, Any] = {"_index": index, "_id": doc_id}
    if versioned:
        meta.update(version=version, version_type="external_gte")
    return json.dumps({"index": meta}).encode()


def items_for(change: Change, cfg: ElasticsearchSinkConfig, rule: PartialRule,
              left_out: Mapping[str, frozenset[str]]) -> list[Item]:
    """The bulk actions of one change (``left_out``: per index, the fields its documents go without)."""
    index, doc_id = change.key
    if change.op == "upsert":
        doc = change.values["doc"]
        if index in left_out:  # schema_changes ignore: the index keeps the fields it has
            doc = json.dumps({k: v for k, v in json.loads(doc).items() if k not in left_out[index]})
        head = _meta(index, doc_id, change.version, not cfg.key_ignore)
        if rule.active and not cfg.key_ignore and rule.may_keep_in(doc):
            parsed = _DECODE.decode(doc)
            kept = rule.document_kept(parsed) if isinstance(parsed, dict) else frozenset()
            if kept:  # its lines are made once the stored document is read (resolve)
                return [Item(change, "index", head, kept, parsed)]
        return [Item(change, "index", head + b"\n" + doc.encode() + b"\n")]
    versioned = {"_id": doc_id, "version": change.version, "version_type": "external_gte"}
    tomb = {"_index": TOMBSTONES, "_id": tombstone_id(index, doc_id), "version": change.version,
            "version_type": "external_gte"}
    first = (Item(change, "soft", _meta(index, doc_id, change.version, True)) if cfg.delete == "soft" else
             Item(change, "delete", json.dumps({"delete": {"_index": index, **versioned}}).encode() + b"\n"))
    return [
        first,
        Item(change, "tombstone", json.dumps({"index": tomb}).encode() + b"\n"
             + json.dumps({"index": index, "id": doc_id, "deleted_at": int(time.time() * 1000)}).encode() + b"\n"),
    ]


def resolve(items: list[Item], cfg: ElasticsearchSinkConfig, read: Callable[[list[dict[str, str]]], list[Any]],
            ) -> tuple[list[Item], int]:
    """The partial indexes and soft deletes made whole from the stored documents (``read``: an mget
    of ``docs``, answering each with its ``found`` and ``_source``). Returns the items to send and how
    many soft deletes met no document (nothing to mark: unchanged; their tombstones are sent)."""
    waiting = [i for i in items if i.needs_stored]
    if not waiting:
        return items, 0
    found = read([{"_index": i.change.key[0], "_id": i.change.key[1]} for i in waiting])
    dropped: set[int] = set()
    for item, stored_doc in zip(waiting, found, strict=True):
        stored = stored_doc.get("_source") if stored_doc.get("found") else None
        if item.kind == "soft":
            before = before_image(item.change.values.get("doc"), cfg)
            if stored is None and before is None:
                dropped.add(id(item))
                continue
            doc = {**(stored or {}), **(before or {}), cfg.deleted_field: deleted_at(item.change.version)}
        else:
            assert item.doc is not None
            doc = merged(stored, item.doc, item.kept, cfg.deleted_field if cfg.delete == "soft" else None)
        item.lines = item.lines + b"\n" + _ENCODE.encode(doc) + b"\n"
    return [i for i in items if id(i) not in dropped], len(dropped)


def before_image(doc: str | None, cfg: ElasticsearchSinkConfig) -> dict[str, Any] | None:
    """A soft delete's document: its before image (Debezium's ``before``), unless it holds the id
    fields alone (a tombstone's key; PostgreSQL's REPLICA IDENTITY DEFAULT): it is the document the
    delete marks, even when the window's changes before it were reduced away."""
    parsed = _DECODE.decode(doc) if doc else None
    if not isinstance(parsed, dict) or all(v is None for k, v in parsed.items() if k not in cfg.id_fields):
        return None
    return parsed


def merged(stored: Mapping[str, Any] | None, doc: Mapping[str, Any], kept: frozenset[str],
           deleted_field: str | None) -> dict[str, Any]:
    """A partial change laid over the stored document: the change's fields but the kept ones, which
    keep the stored values (left out when there are none); the soft delete's field cleared (the row
    lives)."""
    out = {k: v for k, v in (stored or {}).items() if k != deleted_field}
    out.update({k: v for k, v in doc.items() if k not in kept})
    return out
