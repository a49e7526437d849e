"""Partial updates (issue 44): the values of a change that carry nothing new, so that the sink keeps
the value it holds (docs/soft-deletes.md).

* ``unavailable_value`` (a sink option; Debezium's ``__debezium_unavailable_value`` by default for
  Debezium sources): the placeholder Debezium's PostgreSQL connector writes for an unchanged
  TOASTed column of a table with ``REPLICA IDENTITY DEFAULT`` (its ``unavailable.value.placeholder``;
  with a ``hex:`` prefix the rest is the placeholder's bytes in hex, as Debezium reads it). A text
  field equal to it, or a binary field equal to its bytes, keeps the stored value.
* ``ignore_null_updates`` (a list of columns or document fields): a null there (or, in a document,
  the field missing) keeps the stored value.
  That is how a MySQL ``binlog_row_image=MINIMAL`` update arrives: its after image has the key and
  the changed columns only, and the others are null in the decoded row (a field a record lacks is
  null in its image: connectors/images.py), indistinguishable from a column set to NULL. So nulls
  are kept only in the columns listed, where NULL is never a value the source writes on purpose.

A kept value is never written: MySQL's upsert leaves the column out (a new row gets the column's
default), Elasticsearch's document takes the stored document's field. Within one window the changes
of a key are reduced to the last one; its kept values are first filled from the key's earlier
changes of the window (spark_jobs/project/partial.py), so only what no change of the window carried is
left to the stored row.
"""

from __future__ import annotations

import base64
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.compute as pc

DEBEZIUM_UNAVAILABLE = "__debezium_unavailable_value"  # Debezium's unavailable.value.placeholder default
HEX_PREFIX = "hex:"


def placeholder_bytes(placeholder: str) -> bytes:
    """The placeholder as Debezium sends it in a binary column: ``hex:<octets>``, else its UTF-8 bytes.
    ValueError when the hex is not hex."""
    if placeholder.startswith(HEX_PREFIX):
        return bytes.fromhex(placeholder[len(HEX_PREFIX):])
    return placeholder.encode("utf-8")


def checked_placeholder(value: str | None) -> str | None:
    """A sink's ``unavailable_value`` as its config takes it (MySQL and Elasticsearch sinks alike)."""
    if value is not None:
        try:
            placeholder_bytes(value)
        except ValueError:
            raise ValueError(f"expected a placeholder text, or hex: followed by hexadecimal octets (as "
                             f"Debezium's unavailable.value.placeholder takes it); got {value!r}") from None
    return value


class PartialOptions(Protocol):
    """What a sink config says of partial updates (connectors/mysql/config.py, connectors/elasticsearch/config.py)."""

    @property
    def unavailable_value(self) -> str | None: ...
    @property
    def ignore_null_updates(self) -> list[str]: ...


@dataclass(frozen=True)
class PartialRule:
    """Which values keep the stored one: the placeholder's (as text and as bytes), and nulls in
    ``null_keeps``. ``never``: fields that are never kept (the primary key, the document id)."""

    placeholder: str | None = None
    null_keeps: frozenset[str] = frozenset()
    never: frozenset[str] = frozenset()
    _text: str | None = field(default=None, init=False, repr=False, compare=False)
    _bytes: bytes | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.placeholder is not None:
            raw = placeholder_bytes(self.placeholder)
            hexed = self.placeholder.startswith(HEX_PREFIX)
            text = raw.decode("utf-8", errors="replace") if hexed else self.placeholder
            object.__setattr__(self, "_bytes", raw)
            object.__setattr__(self, "_text", text)

    @classmethod
    def of(cls, options: PartialOptions, never: Collection[str] = ()) -> PartialRule:
        return cls(options.unavailable_value, frozenset(options.ignore_null_updates), frozenset(never))

    @property
    def active(self) -> bool:
        return self._text is not None or bool(self.null_keeps)

    @property
    def placeholder_bytes(self) -> bytes | None:
        return self._bytes

    @property
    def texts(self) -> tuple[str, ...]:
        """How the placeholder reads in a JSON document: its text, and a binary field's base64."""
        if self._text is None or self._bytes is None:
            return ()
        return (self._text, base64.b64encode(self._bytes).decode("ascii"))

    # -- one value ---------------------------------------------------------------------------------
    def keeps(self, name: str, value: Any) -> bool:
        """Whether ``value`` of field ``name`` keeps the stored value (a row's Python value)."""
        if name in self.never:
            return False
        if value is None:
            return name in self.null_keeps
        if self._text is None:
            return False
        if isinstance(value, str):
            return value == self._text
        if isinstance(value, bytes | bytearray | memoryview):
            return bytes(value) == self._bytes
        return False

    def kept_fields(self, values: Mapping[str, Any], names: Collection[str] | None = None) -> frozenset[str]:
        """The fields of a row (or of ``names`` only) whose values keep the stored ones."""
        return frozenset(n for n in (values if names is None else names) if self.keeps(n, values.get(n)))

    def document_keeps(self, name: str, value: Any) -> bool:
        """Whether a JSON document's field keeps the stored one (a binary field is base64 there)."""
        if name in self.never:
            return False
        if value is None:
            return name in self.null_keeps
        return isinstance(value, str) and value in self.texts

    def document_kept(self, document: Mapping[str, Any]) -> frozenset[str]:
        """The fields of a parsed document that keep the stored ones: those :meth:`document_keeps`,
        and the listed fields it lacks (the per-record decode leaves a field the payload lacks out of
        the document, where the column-wise one writes a null: both keep)."""
        kept = {k for k, v in document.items() if self.document_keeps(k, v)}
        return frozenset(kept | {f for f in self.null_keeps - self.never if f not in document})

    def may_keep_in(self, document: str) -> bool:
        """A cheap look at a JSON document's text: False when no field of it can keep a value."""
        if any(t in document for t in self.texts):
            return True
        return bool(self.null_keeps) and ("null" in document or any(f'"{f}"' not in document for f in self.null_keeps))

    # -- a column ----------------------------------------------------------------------------------
    def kept(self, name: str, values: pa.Array | pa.ChunkedArray) -> pa.Array | None:
        """Per row, whether column ``name``'s value keeps the stored one; None when none can (the
        column cannot hold the placeholder and is not listed for nulls)."""
        if name in self.never:
            return None
        masks = []
        kind = values.type
        if self._text is not None and (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
            masks.append(pc.equal(values, pa.scalar(self._text, kind)))
        elif self._bytes is not None and (pa.types.is_binary(kind) or pa.types.is_large_binary(kind)):
            masks.append(pc.equal(values, pa.scalar(self._bytes, kind)))
        if name in self.null_keeps:
            masks.append(pc.is_null(values))
        if not masks:
            return None
        mask = pc.fill_null(masks[0], False)
        if len(masks) > 1:
            mask = pc.or_(mask, masks[1])
        return mask.combine_chunks() if isinstance(mask, pa.ChunkedArray) else mask
