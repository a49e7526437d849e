"""The Elasticsearch documents of changes an SMT chain rewrote (issue 43).

The decode writes each change's document (``image_json``) beside its row image: every field as the
producer meant it (a Decimal as an exact number, a date as ISO-8601, a geometry as its ``{wkb,
srid}``, a JSON column's text). A chain then rewrites the images (spark_jobs/transform/row_transforms.py), so
the documents are written again from the rewritten images, one rule per field:

* a field the chain left as it was (renamed or not: ``chains.names_before``; its MySQL text the
  same) keeps its JSON from the decode, byte for byte, so a document after a chain holds what it
  would without one;
* a field the chain made (InsertField), cast, converted or masked gets the JSON of its new typed
  value (``typed.json_of``: a string, a number, a boolean, ISO-8601 dates and times).

Fields the chain left out are gone, and the document's fields follow the image's order.
"""

from __future__ import annotations

from typing import Any

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from connectors import images
from connectors.debezium import typed
from spark_jobs.chains import names_before

_FRAGMENTS = msgspec.json.Decoder(dict[str, msgspec.Raw])


def rewritten(before: pa.Table, after: pa.Table, chain: Any | None) -> pa.Table:
    """``after`` (the changes of ``before`` through ``chain``, row for row) with its documents
    written from its images (the module's rule). A change without a document keeps none. Without a
    ``chain`` (after a Spark stage, which may have changed any field) every field is made."""
    old_docs = before.column("image_json").combine_chunks()
    if old_docs.null_count == len(old_docs):  # no sink reads documents (the decode wrote none)
        return after
    image = images.compact(after.column("image").combine_chunks())
    if not pa.types.is_union(image.type) or not len(image):
        return after
    old = images.Fields(before.column("image")) if chain is not None else None  # none kept after Spark
    fragments = _Fragments(old_docs)
    codes = np.frombuffer(image.buffers()[1], np.int8)[image.offset:image.offset + len(image)]
    parts, order = [], []
    for code in range(image.type.num_fields):
        rows = np.flatnonzero(codes == code)
        child = image.field(code)
        fields = dict(zip(child.type.names, child.flatten(), strict=True))
        out = []
        for name, values in fields.items():
            made = typed.json_of(values)
            origin = names_before(chain, name) if old is not None else None
            if old is not None and origin is not None:
                same = pc.fill_null(pc.equal(images.text_of(values), old.texts(origin).take(pa.array(rows))), False)
                if pc.any(same).as_py():
                    made = pc.if_else(same, fragments.of(origin, rows), made)
            out.append(made)
        parts.append(typed.documents(list(fields), out, pc.is_null(child)))
        order.append(rows)
    docs = pa.concat_arrays(parts).take(pa.array(np.argsort(np.concatenate(order), kind="stable")))
    docs = pc.if_else(pc.is_null(old_docs), pa.nulls(len(docs), pa.string()), docs)
    return after.set_column(after.schema.get_field_index("image_json"), "image_json", docs)


class _Fragments:
    """The decode's JSON of each field of each change, parsed once per change when first asked."""

    def __init__(self, documents: pa.Array) -> None:
        self.documents = documents
        self.texts: list[str | None] | None = None
        self.parsed: dict[int, dict[str, msgspec.Raw]] = {}

    def of(self, name: str, rows: np.ndarray) -> pa.Array:
        """Field ``name``'s JSON in each of ``rows``' documents (null where it has none)."""
        if self.texts is None:
            self.texts = self.documents.to_pylist()
        out = []
        for row in rows.tolist():
            fields = self.parsed.get(row)
            if fields is None:
                text = self.texts[row]
                fields = self.parsed[row] = _fields(text)
            raw = fields.get(name)
            out.append(None if raw is None else bytes(raw).decode("utf-8"))
        return pa.array(out, pa.string())


def _fields(document: str | None) -> dict[str, msgspec.Raw]:
    """A decoded document's fields as their JSON (none for a value that is not an object: a text)."""
    if document is None:
        return {}
    try:
        return _FRAGMENTS.decode(document)
    except msgspec.ValidationError:
        return {}
