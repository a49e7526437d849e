"""Partial changes within one window (issue 44): before a target's changes are reduced to the last one
per key, a change's values that keep the stored ones (connectors/partial.py: Debezium's placeholder
for an unchanged TOASTed column, a null in ``ignore_null_updates``) take the value of the same field
in the key's change before it in the window, when one carried it.

Without this, an insert and a later update of the same row in one window (the update's TOASTed text
a placeholder) would reduce to the update alone, and the row would be written without the text the
insert carried. What no change of the window carried is left to the sink, which keeps the stored value.

The changes of a key are taken in the order the reduction ranks them (version, then offset,
partition and place in the record: spark_jobs/tables.latest_rows; a tombstone after the change
before it in the log); a delete ends what the changes before it can give. Only the keys with a
kept value and more than one change are looked at, in Python; the rest of the frame is left as it is.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from connectors.elasticsearch.config import ElasticsearchSinkConfig
from connectors.mysql.config import MySqlSinkConfig
from connectors.partial import PartialRule

_DECODE = msgspec.json.Decoder(float_hook=Decimal)
_ENCODE = msgspec.json.Encoder(decimal_format="number")


def fill_kept(frame: pa.Table, cfg: MySqlSinkConfig | ElasticsearchSinkConfig, keys: list[str] | None) -> pa.Table:
    """A target's projected changes (the sink frame: c_0… and change_op, version, partition, offset,
    row_index) with each kept value filled from the key's earlier change, where one had it."""
    if not keys or frame.num_rows < 2:
        return frame
    if isinstance(cfg, MySqlSinkConfig):
        if cfg.pk_mode == "kafka":  # every change is a row of its own: no earlier change of its key
            return frame
        rule = PartialRule.of(cfg, never=cfg.primary_key)
        fields = [f"c_{i}" for i, c in enumerate(cfg.columns) if c.name not in cfg.primary_key]
        names = {f"c_{i}": c.name for i, c in enumerate(cfg.columns)}
        return _fill_columns(frame, keys, rule, {f: names[f] for f in fields}) if rule.active else frame
    rule = PartialRule.of(cfg, never=cfg.id_fields)
    return _fill_documents(frame, keys, rule) if rule.active and not cfg.key_ignore else frame


def _groups(frame: pa.Table, keys: list[str], candidate: np.ndarray) -> list[np.ndarray]:
    """The rows of each key that has a ``candidate`` row and another change, in the reduction's order."""
    codes = []
    for k in keys:
        column = frame.column(k).combine_chunks()
        codes.append(pc.dictionary_encode(column).indices.fill_null(-1).to_numpy(zero_copy_only=False))
    _unique, group = np.unique(np.stack(codes, axis=1), axis=0, return_inverse=True)
    group = group.reshape(-1)
    wanted = np.unique(group[candidate])
    sizes = np.bincount(group)
    wanted = wanted[sizes[wanted] > 1]
    if not len(wanted):
        return []
    partition = frame.column("partition").to_numpy().astype(np.int64)
    offset = frame.column("offset").to_numpy().astype(np.int64)
    sub = (frame.column("row_index").to_numpy().astype(np.int64) if "row_index" in frame.column_names
           else np.zeros(frame.num_rows, np.int64))
    versions = frame.column("version").to_pylist()
    out = []
    for g in wanted:
        rows = np.flatnonzero(group == g)
        rows = rows[np.lexsort((sub[rows], offset[rows], partition[rows]))]  # the log order
        effective, last = [], None
        for r in rows:  # a tombstone takes the version of the change before it
            last = versions[r] if versions[r] is not None else last
            effective.append(-(1 << 63) if last is None else last)
        ranked = np.lexsort((sub[rows], partition[rows], offset[rows], np.array(effective, np.int64)))
        out.append(rows[ranked])
    return out


def _fill_columns(frame: pa.Table, keys: list[str], rule: PartialRule, fields: dict[str, str]) -> pa.Table:
    upsert = pc.fill_null(pc.equal(frame.column("change_op"), "upsert"), False)
    masks: dict[str, np.ndarray] = {}
    for column, name in fields.items():
        mask = rule.kept(name, frame.column(column))
        if mask is not None:
            found = pc.and_(mask, upsert).to_numpy(zero_copy_only=False)
            if found.any():
                masks[column] = found
    if not masks:
        return frame
    ops = frame.column("change_op").to_pylist()
    groups = _groups(frame, keys, np.logical_or.reduce(list(masks.values())))
    for column, kept in masks.items():
        values = frame.column(column).to_pylist()
        fills: dict[int, Any] = {}
        for rows in groups:
            known, has = None, False  # the last value of the field a change of the key carried
            for r in rows:
                if ops[r] != "upsert":
                    has = False
                elif kept[r]:
                    if has:
                        fills[int(r)] = known
                else:
                    known, has = values[r], True
        if fills:
            at = np.zeros(frame.num_rows, bool)
            at[list(fills)] = True
            replacements = pa.array([fills[r] for r in sorted(fills)], frame.schema.field(column).type)
            filled = pc.replace_with_mask(frame.column(column).combine_chunks(), pa.array(at), replacements)
            frame = frame.set_column(frame.schema.get_field_index(column), column, filled)
    return frame


def _fill_documents(frame: pa.Table, keys: list[str], rule: PartialRule) -> pa.Table:
    docs = frame.column("c_2").combine_chunks()
    upsert = pc.fill_null(pc.equal(frame.column("change_op"), "upsert"), False)
    hints = [pc.match_substring(docs, t) for t in rule.texts]
    if rule.null_keeps:  # a listed field null, or missing (the per-record decode leaves it out)
        hints.append(pc.match_substring(docs, "null"))
        hints += [pc.invert(pc.match_substring(docs, f'"{f}"')) for f in sorted(rule.null_keeps)]
    if not hints:
        return frame
    maybe = pc.fill_null(pc.and_(upsert, _any(hints)), False).to_numpy(zero_copy_only=False)
    if not maybe.any():
        return frame
    texts = docs.to_pylist()
    parsed: dict[int, dict[str, Any]] = {}
    kept_rows = np.zeros(frame.num_rows, bool)
    for r in np.flatnonzero(maybe):
        doc = _DECODE.decode(texts[r])
        if isinstance(doc, dict) and rule.document_kept(doc):
            parsed[int(r)], kept_rows[r] = doc, True
    if not kept_rows.any():
        return frame
    ops = frame.column("change_op").to_pylist()
    changed = False
    for rows in _groups(frame, keys, kept_rows):
        known: dict[str, Any] = {}
        for r in rows:
            if ops[r] != "upsert":
                known = {}
                continue
            doc = parsed.get(int(r)) or _DECODE.decode(texts[r])
            filled = {k: known[k] if rule.document_keeps(k, v) and k in known else v for k, v in doc.items()}
            filled.update({f: known[f] for f in rule.document_kept(doc) if f not in doc and f in known})
            known.update({k: v for k, v in doc.items() if not rule.document_keeps(k, v)})
            if filled != doc:
                texts[r], changed = _ENCODE.encode(filled).decode("utf-8"), True
    if not changed:
        return frame
    return frame.set_column(frame.schema.get_field_index("c_2"), "c_2", pa.array(texts, pa.string()))


def _any(masks: list[pa.Array]) -> pa.Array:
    out = masks[0]
    for mask in masks[1:]:
        out = pc.or_(out, mask)
    return out
