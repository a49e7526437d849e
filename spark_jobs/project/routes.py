"""Where a change goes: the index or table its sink's template names for it, and why a change cannot
go there (a name no Kafka topic could have, cdcflow's own, a source field the template needs and the
change lacks)."""

from __future__ import annotations

import re
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from spark_jobs.transform.row_changes import Rows

ROUTE = r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,248}$"  # a name a Kafka topic could have (in RE2)


RESERVED = r"^(?i)cdcflow[_-]"


def join_texts(parts: list[pa.Array], sep: str, nulls: str) -> pa.Array:
    """``sep``-joined; nulls "skip" (Spark's concat_ws: nulls left out, "" when all are) or "emit_null".
    pyarrow's own skip mode drops the rows whose every part is null (pyarrow 21), so it is not used."""
    if nulls == "emit_null":
        return pc.binary_join_element_wise(*parts, sep)
    joined = parts[0]
    for part in parts[1:]:
        joined = pc.coalesce(pc.binary_join_element_wise(joined, part, sep), joined, part)
    return pc.fill_null(joined, "")


def index_names(rows: pa.Table, template: str) -> Any:
    """The index of each change: the template with {topic} filled by its route, lower-cased."""
    pieces = template.split("{topic}")
    index: Any = pa.array([pieces[0]] * rows.num_rows, pa.string())
    for piece in pieces[1:]:
        index = pc.binary_join_element_wise(index, pc.utf8_lower(rows.column("route")), piece, "")
    return index


def table_names(rows: pa.Table, template: str) -> pa.Array:
    """The table of each change: the template with {topic}, {source.table}, {source.db} filled (null
    where the change lacks one): as a MySQL sink's ``table`` names it."""
    columns = {"{topic}": "route", "{source.table}": "source_table", "{source.db}": "source_db"}
    parts = [p for p in re.split(r"(\{[^}]*\})", template) if p]
    arrays = [rows.column(columns[p]) if p in columns else pa.array([p] * rows.num_rows, pa.string()) for p in parts]
    return arrays[0] if len(arrays) == 1 else join_texts(arrays, "", "emit_null")


def bad_route(names: pa.Array, template: str) -> pa.Array:
    """Why a change cannot go to a table (a name no topic could have, or cdcflow's own), or null."""
    shown = pc.utf8_slice_codeunits(names, 0, 80)
    no_field = f"the change has no source field for table {template!r} (source.table / source.db)"
    invalid = pc.binary_join_element_wise("the routed topic '", shown, "' cannot name a table or an index: expected "
                                          "1-249 of A-Z a-z 0-9 . _ -, not starting with '.'", "")
    reserved = pc.binary_join_element_wise("the routed topic '", shown, "' is reserved: names starting with cdcflow_ "
                                           "or cdcflow- are cdcflow's own tables and indices", "")
    ok_name = pc.fill_null(pc.match_substring_regex(names, ROUTE), False)
    is_reserved = pc.fill_null(pc.match_substring_regex(names, RESERVED), False)
    return pc.if_else(pc.is_null(names), no_field,
                      pc.if_else(pc.invert(ok_name), invalid, pc.if_else(is_reserved, reserved, None)))


def routes_checked(decoded: pa.Table) -> pa.Table:
    """After a chain: a change routed (RegexRouter) to a topic that could not name a table or is
    cdcflow's own fails (:func:`bad_route`)."""
    if not decoded.num_rows or pc.all(pc.equal(decoded.column("route"), decoded.column("topic"))).as_py():
        return decoded
    rows = Rows(decoded)
    reason = bad_route(decoded.column("route"), "{topic}")
    rows.fail(pc.is_valid(reason), reason)
    return rows.table
