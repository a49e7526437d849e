"""An Elasticsearch sink's documents: a read task's valid changes projected onto the index each goes
to, its document id and its JSON."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from connectors import images
from connectors.elasticsearch.config import ElasticsearchSinkConfig
from spark_jobs.project.routes import index_names, join_texts
from spark_jobs.project.tables import RAW_COLUMNS, raw_columns


def _messages(errors: list[pa.Array], n: int) -> pa.Array:
    """The rows' error texts "; "-joined (nulls skipped), null where there is none."""
    message = pa.nulls(n, pa.string())
    for error in errors:
        message = pc.coalesce(pc.binary_join_element_wise(message, error, "; "), message, error)
    return message


def project_documents(rows: pa.Table, sink: ElasticsearchSinkConfig) -> pa.Table:
    """Valid changes -> RAW_COLUMNS + route, change_op, version, row_index, c_0 (index), c_1 (document
    id), c_2 (the document as JSON) and error_message."""
    tombstone = pc.is_null(rows.column("value"))
    if sink.behavior_on_null_values == "ignore" or sink.key_ignore:
        rows = rows.filter(pc.invert(tombstone))
    if sink.key_ignore:  # no stable id: every change is its own document, deletes have no target
        rows = rows.filter(pc.equal(rows.column("change_op"), "upsert"))
    n = rows.num_rows
    tombstone = pc.is_null(rows.column("value"))
    errors: list[pa.Array] = []
    if sink.key_ignore:
        doc_id = join_texts([rows.column("topic"), pc.cast(rows.column("partition"), pa.string()),
                        pc.cast(rows.column("offset"), pa.string())], "+", "skip")
    else:
        image = images.Fields(rows.column("image"))  # its layout worked out once for every id field
        parts = [image.texts(f) for f in sink.id_fields]
        if "key_image" in rows.column_names and pa.types.is_map(rows.schema.field("key_image").type):
            # the key a step on it left (spark_jobs/row_keys.finished): its fields first
            keys = images.Fields(rows.column("key_image"))
            parts = [pc.coalesce(keys.texts(f), p) for f, p in zip(sink.id_fields, parts, strict=True)]
        doc_id = join_texts(parts, "+", "skip")
        errors += [pc.if_else(pc.is_null(p), f"document id field '{f}' is missing or null", None)
                   for p, f in zip(parts, sink.id_fields, strict=True)]
    index = index_names(rows, sink.index)
    if sink.behavior_on_null_values == "fail":
        errors.append(pc.if_else(tombstone, "null value (tombstone) with behavior_on_null_values: fail", None))
    base = [*RAW_COLUMNS, "route", "change_op", "version", "row_index"]
    return pa.table([*raw_columns(rows), *[rows.column(c) for c in base[len(RAW_COLUMNS):]], index, doc_id,
                     rows.column("image_json"), _messages(errors, n)],
                    names=[*base, "c_0", "c_1", "c_2", "error_message"])
