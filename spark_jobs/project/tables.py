"""Many tables of one MySQL sink in one write job: a Debezium deployment's tables created from the
record schema (``{source.table}`` routing, no declared ``columns:``).

One Spark job per table cost about a quarter of a second each (scheduling, a scan of the window's
frame, a per-key window; docs/benchmarks.md, "Real tables"), so a 50-table window spent seconds on
tables that had a record or two. Here the whole sink is one job: its tasks get the window's valid
changes tagged with their table (all the changes of a table in one task) and, per table, in Arrow:

1. :func:`project_rows` reads each column's text from the typed row image (connectors/images.py)
   and checks that it fits the column;
2. :func:`latest_rows` keeps the last change per key (connectors/changes.py's rules);
3. the table's writer applies them (``spark_jobs.write.target_writes.write_target``), rows that do not fit to the DLQ.

The driver creates or evolves each table before the job (spark_jobs/sinks.prepare_tables, one
connection).
A table's columns come from the same Connect schema as its values, so a value that does not fit is
rare (the source column changed type within the window); its row never wins its key.
"""

from __future__ import annotations

import base64
import binascii
import itertools
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from connectors import base64_columns, images
from connectors.mysql.config import MySqlSinkConfig
from connectors.mysql.types import parse_type
from spark_jobs.raw_values import omitted
from spark_jobs.sink_targets import SinkTarget

RAW_COLUMNS = ["topic", "partition", "offset", "timestamp", "key", "value", "headers"]
def raw_columns(rows: pa.Table) -> list[pa.ChunkedArray | pa.Array]:
    """The RAW_COLUMNS of projected rows, the value ``omitted`` (spark_jobs/read/ranges.py; already so
    in a window without a chain): the projection, the last change per key and the writes carry it
    without copying ~9 KB a row, twice."""
    return [omitted(rows.column(c)) if c == "value" else rows.column(c) for c in RAW_COLUMNS]
TABLE_COLUMN = "_table"  # the table a change goes to, on the frame the write job gets
GROUP_COLUMNS = [*RAW_COLUMNS, "route", "change_op", "version", "row_index", "image", "key_image", TABLE_COLUMN]

_DATETIME = r"^\d{4}-\d{2}-\d{2}([ T]\d{2}:\d{2}(:\d{2}(\.\d+)?)?)?$"
_INTEGER = r"^\s*[+-]?\d+\s*$"
_NUMBER = r"^\s*[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?\s*$"
_DECIMAL = r"^\s*[+-]?(\d+(\.\d*)?|\.\d+)\s*$"
# what a value that does not fit its column may need declared (streams without schemas write some
# types in several forms)
EPOCH_NUMBER, BASE64_TEXT = r"^-?[0-9]+$", r"^[A-Za-z0-9+/]+={0,2}$"
_MYSQL_DATETIME = r"^\d{4}-\d{2}-\d{2}( \d{2}:\d{2}(:\d{2}(\.\d+)?)?)?$"  # already MySQL's form: goes as it is
DECLARE_TIME_ENCODING = (
    " (a number is time since the epoch, or since midnight for TIME: declare the column's "
    "encoding: ms, us or ns, as the connector's time.precision.mode writes it)"
)
DECLARE_DECIMAL_ENCODING = (
    " (this looks like the base64 Decimal of Debezium's decimal.handling.mode=precise, which "
    "needs the schema: declare encoding: base64)"
)
DECLARE_BINARY_ENCODING = (
    " (binary values are read as base64; declare encoding: hex or text if the stream writes those)"
)


def key_columns(sink: MySqlSinkConfig) -> list[str]:
    """The projected columns (c_<i>) of the primary key, in its order."""
    index = {c.name: i for i, c in enumerate(sink.columns)}
    return [f"c_{index[k]}" for k in sink.primary_key]


def _null_where(mask: pa.Array, values: pa.Array) -> pa.Array:
    return pc.if_else(mask, pa.nulls(len(values), values.type), values)


def _per_value(raw: pa.Array, convert: object, kind: pa.DataType) -> pa.Array:
    """A Python conversion per value, for the rare column types Arrow has no kernel for."""
    out = []
    for text in raw.to_pylist():
        try:
            out.append(None if text is None else convert(text))  # type: ignore[operator]
        except (ValueError, binascii.Error, OverflowError):
            out.append(None)
    return pa.array(out, kind)


def _bits(size: int) -> object:
    def convert(text: str) -> bytes | None:
        low = text.strip().lower()
        n = {"true": 1, "false": 0}.get(low)
        n = int(low) if n is None else n
        return n.to_bytes(-(-size // 8), "big") if 0 <= n < (1 << size) else None

    return convert


def typed(raw: pa.Array, sql_type: str) -> pa.Array:
    """A column's texts as the values a MySQL column of ``sql_type`` is given; null where a value does
    not fit (text where MySQL itself checks, in strict mode; binary, spatial and BIT values as bytes)."""
    t = parse_type(sql_type)
    # the texts the decoders write (digits; YYYY-MM-DD hh:mm:ss.ffffff) go as they are: two Arrow calls
    # instead of up to ten, which is most of a small table's projection (bench/tables.py)
    if (t.is_integer and _all_match(raw, EPOCH_NUMBER)) or (
            t.base in ("DATETIME", "TIMESTAMP") and _all_match(raw, _MYSQL_DATETIME)):
        return raw
    if t.base in ("DATETIME", "TIMESTAMP"):
        # ISO text -> MySQL's form; a bare number that is not one of MySQL's own numeric forms (YYMMDD,
        # YYYYMMDD, YYMMDDhhmmss, YYYYMMDDhhmmss) is epoch time without its declared encoding: refused,
        # with what to declare; any other text goes as it is and MySQL checks it (the Spark projection's rules)
        iso = pc.fill_null(pc.match_substring_regex(raw, _DATETIME), False)
        epoch = pc.and_(pc.fill_null(pc.match_substring_regex(raw, EPOCH_NUMBER), False),
                        pc.invert(pc.is_in(pc.utf8_length(raw), pa.array([6, 8, 12, 14], pa.int32()))))
        return _null_where(epoch, pc.if_else(iso, pc.replace_substring(raw, "T", " "), raw))
    if t.base == "TIME":  # a number of 8+ digits is time since midnight in ms/µs/ns, not [H]HHMMSS
        return _null_where(pc.match_substring_regex(raw, r"^-?[0-9]{8,}$"), raw)
    if t.is_binary or t.is_spatial:  # base64 in the image; spatial: MySQL's internal form (SRID + WKB)
        column = base64_columns.decode(raw)  # the whole column at once; value by value where one is not base64
        return column if column is not None else _per_value(raw, lambda s: base64.b64decode(s, validate=True),
                                                            pa.binary())
    if t.base == "BIT":
        return _per_value(raw, _bits(t.args[0] if t.args else 1), pa.binary())
    if t.is_integer:
        lower = pc.utf8_lower(raw)
        boolean = pc.if_else(pc.equal(lower, "true"), "1", pc.if_else(pc.equal(lower, "false"), "0", None))
        return pc.coalesce(
            _null_where(pc.invert(pc.match_substring_regex(raw, _INTEGER)), pc.utf8_trim_whitespace(raw)), boolean
        )
    if t.base in ("FLOAT", "DOUBLE"):
        return _null_where(pc.invert(pc.match_substring_regex(raw, _NUMBER)), raw)
    if t.base == "DECIMAL" and t.precision <= 38:
        digits = pc.utf8_length(pc.utf8_ltrim(pc.extract_regex(raw, r"^\s*[+-]?(?P<i>\d*)").field("i"), "0"))
        fits = pc.and_(pc.match_substring_regex(raw, _DECIMAL), pc.less_equal(digits, t.precision - t.scale))
        return _null_where(pc.invert(fits), raw)
    return raw


def _canonical(kind: pa.DataType | None, sql_type: str) -> bool:
    """Whether the texts of a typed field are already what a column of ``sql_type`` is given, as
    :func:`typed` would pass them (an integer's digits, a datetime's YYYY-MM-DD hh:mm:ss.ffffff, a
    date's YYYY-MM-DD): then nothing needs checking here, and MySQL checks the range."""
    if kind is None:
        return False
    t = parse_type(sql_type)
    if pa.types.is_integer(kind):
        return t.is_integer
    if pa.types.is_timestamp(kind):
        return t.base in ("DATETIME", "TIMESTAMP")
    if pa.types.is_date(kind):
        return t.base in ("DATE", "DATETIME", "TIMESTAMP")
    return False


def _passing(raws: list[pa.Array], sql_types: list[str]) -> set[int]:
    """The columns (by index) whose texts :func:`typed` passes as they are by its first check: every
    text an integer's digits for an integer column, MySQL's own datetime form for DATETIME/TIMESTAMP.
    One regex pass per form over all those columns' texts at once: a table of a few rows has the
    per-call cost of Arrow, not its per-row cost, to save (spark_jobs/project/tables.py, bench.tables)."""
    out: set[int] = set()
    for pattern, wanted in ((EPOCH_NUMBER, lambda t: t.is_integer),
                            (_MYSQL_DATETIME, lambda t: t.base in ("DATETIME", "TIMESTAMP"))):
        which = [i for i, kind in enumerate(sql_types) if wanted(parse_type(kind))]
        if not which:
            continue
        texts = pa.concat_arrays([raws[i] for i in which])
        ok = pc.fill_null(pc.match_substring_regex(texts, pattern), True).to_numpy(zero_copy_only=False)
        bounds = np.cumsum([0, *[len(raws[i]) for i in which]])
        out.update(i for j, i in enumerate(which) if ok[bounds[j]:bounds[j + 1]].all())
    return out


def _all_match(raw: pa.Array, pattern: str) -> bool:
    """Every non-null text matches ``pattern``."""
    return bool(pc.all(pc.match_substring_regex(raw, pattern)).as_py() is not False)


def what_to_declare(raw: pa.Array, sql_type: str) -> pa.Array:
    t = parse_type(sql_type)
    none = pa.array([""] * len(raw), pa.string())
    if t.base in ("DATETIME", "TIMESTAMP", "TIME"):
        return pc.if_else(pc.fill_null(pc.match_substring_regex(raw, EPOCH_NUMBER), False), DECLARE_TIME_ENCODING, none)
    if t.base == "DECIMAL":
        base64ish = pc.and_(
            pc.match_substring_regex(raw, BASE64_TEXT), pc.equal(pc.bit_wise_and(pc.utf8_length(raw), 3), 0)
        )
        return pc.if_else(pc.fill_null(base64ish, False), DECLARE_DECIMAL_ENCODING, none)
    if t.is_binary:
        return pa.array([DECLARE_BINARY_ENCODING] * len(raw), pa.string())
    return none


def project_rows(rows: pa.Table, sink: MySqlSinkConfig) -> pa.Table:
    """A table's valid changes -> RAW_COLUMNS + route, change_op, version, one column per sink column
    (c_<i>) and error_message for the rows whose values do not fit. With pk_mode kafka every record is a row of its own,
    keyed by its coordinates (the columns ``__connect_topic``, ``__connect_partition`` and
    ``__connect_offset``, as Kafka Connect's JDBC sink names them): there is nothing to delete."""
    if sink.pk_mode == "kafka":
        rows = rows.filter(pc.equal(rows.column("change_op").combine_chunks(), "upsert"))
    image = images.Fields(rows.column("image"))
    keys = images.Fields(rows.column("key_image")) if sink.pk_mode == "record_key" else None
    upsert = pc.equal(rows.column("change_op").combine_chunks(), "upsert")
    coordinates = {"__connect_topic": "route", "__connect_partition": "partition", "__connect_offset": "offset"}
    raws = []
    for col in sink.columns:
        raw = image.texts(col.source_field)
        if keys is not None and col.name in sink.primary_key:
            raw = pc.coalesce(keys.texts(col.source_field), raw)
        if sink.pk_mode == "kafka" and col.name in coordinates:
            raw = pc.cast(rows.column(coordinates[col.name]).combine_chunks(), pa.string())
        raws.append(raw)
    passing = _passing(raws, [c.type for c in sink.columns])
    values, errors = [], []
    for i, (col, raw) in enumerate(zip(sink.columns, raws, strict=True)):
        is_key = col.name in sink.primary_key
        fits = i in passing or (keys is None and _canonical(image.type_of(col.source_field), col.type))
        value = raw if fits else typed(raw, col.type)
        values.append(value)
        if is_key and raw.null_count:
            errors.append(pc.if_else(pc.is_null(raw), f"primary key field '{col.source_field}' is missing or null", None))
        if value is raw or value.null_count == raw.null_count:  # text MySQL checks itself, or every value fit
            continue  # (a value is null where its text is, and where the text does not fit)
        bad = pc.and_(pc.is_valid(raw), pc.is_null(value))
        bad = bad if is_key else pc.and_(bad, upsert)
        if not pc.any(bad).as_py():
            continue
        text = pc.binary_join_element_wise(f"field '{col.source_field}' = '", raw, f"' is not a valid {col.type}",
                                           what_to_declare(raw, col.type), "")
        errors.append(pc.if_else(bad, text, None))
    message = pa.nulls(rows.num_rows, pa.string())
    for error in errors:  # "; "-joined, nulls skipped (null_handling="skip" drops all-null rows in pyarrow 21)
        message = pc.coalesce(pc.binary_join_element_wise(message, error, "; "), message, error)
    base = [*RAW_COLUMNS, "route", "change_op", "version"]
    row_index = rows.column("row_index") if "row_index" in rows.column_names else pa.array([0] * rows.num_rows,
                                                                                            pa.int32())
    source_op = rows.column("source_op") if "source_op" in rows.column_names else pa.nulls(rows.num_rows, pa.string())
    return pa.table(
        [*raw_columns(rows), *[rows.column(n) for n in base[len(RAW_COLUMNS):]], row_index, *values, message,
         source_op],
        names=[*base, "row_index", *[f"c_{i}" for i in range(len(values))], "error_message", "source_op"],
    )


def by_table(changes: pa.Table) -> Iterator[tuple[str, pa.Table]]:
    """The task's changes, table by table: one sort, then slices (a filter per table would scan
    every change once per table)."""
    ordered = changes.take(pc.sort_indices(changes.column(TABLE_COLUMN)))
    names = ordered.column(TABLE_COLUMN).to_numpy(zero_copy_only=False)
    bounds = [0, *(np.flatnonzero(names[1:] != names[:-1]) + 1).tolist(), len(names)]
    for start, end in itertools.pairwise(bounds):
        yield names[start], ordered.slice(start, end - start)


def _codes(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """Equal values -> equal integers, null -> -1."""
    encoded = pc.dictionary_encode(column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column)
    return encoded.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)


def latest_rows(projected: pa.Table, key_columns: list[str], keep_unresolved: bool = False,
                every_version: bool = False) -> pa.Table:
    """The last change per key, by version, then offset, then partition, then row_index (the changes
    of one record, connectors/changes.py); with
    ``keep_unfit``: a tombstone (null version) deletes at the version of the change before it in the
    log (none: dropped); a row that does not fit (error_message set) never wins its key and is kept,
    for the writer to send to the DLQ. ``keep_unresolved``: a key whose only changes here are
    tombstones keeps its last one, version null, for a later reduction that sees the changes before it
    (the rows of a key from several read tasks, spark_jobs/write/tasks.py). ``every_version``: the last
    change per key and version instead (a history table keeps every version: sink_targets.is_history)."""
    n = projected.num_rows
    if n == 0:
        return projected
    codes = [_codes(projected.column(c)) for c in key_columns]
    partition = projected.column("partition").to_numpy().astype(np.int64)
    offset = projected.column("offset").to_numpy().astype(np.int64)
    sub = (projected.column("row_index").to_numpy().astype(np.int64) if "row_index" in projected.column_names
           else np.zeros(n, dtype=np.int64))
    version_col = projected.column("version").combine_chunks()
    has_version = version_col.is_valid().to_numpy(zero_copy_only=False)
    version = version_col.fill_null(0).to_numpy().astype(np.int64)
    fit = projected.column("error_message").combine_chunks().is_null().to_numpy(zero_copy_only=False)
    # the log order within each key: key, then partition, offset, row_index (np.lexsort: last key is primary)
    order = np.lexsort((sub, offset, partition, *reversed(codes)))
    starts = np.ones(n, dtype=bool)
    starts[1:] = np.any(np.stack([c[order][1:] != c[order][:-1] for c in codes]), axis=0)
    group = np.cumsum(starts) - 1
    first_of_group = np.flatnonzero(starts)[group]
    # a tombstone's version: that of the last change before it in its key's log order
    last_valid = np.maximum.accumulate(np.where(has_version[order], np.arange(n), -1))
    filled_ok = last_valid >= first_of_group
    filled = np.where(filled_ok, version[order][np.maximum(last_valid, 0)], 0)
    keyed = np.all(np.stack([c[order] >= 0 for c in codes]), axis=0)
    resolved = filled_ok
    if keep_unresolved:  # the last change of its key, a tombstone with nothing before it to take a version from
        last_of_group = np.ones(n, dtype=bool)
        last_of_group[:-1] = starts[1:]
        resolved = filled_ok | (last_of_group & ~has_version[order])
    candidate = fit[order] & resolved & keyed
    rows = order[candidate]
    cand_group, cand_version = group[candidate], filled[candidate]
    # a delete beats its own tombstone (their one version): it has the before image (delete: soft,
    # history tables keep it); else the log order decides (a tombstone after an upsert deletes it, the
    # changes of one record keep their order)
    after_delete = np.zeros(n, dtype=bool)
    if not has_version.all():  # tombstones only (most windows have none): no pass over change_op
        is_delete = pc.fill_null(pc.equal(projected.column("change_op"), "delete"), False).to_numpy(
            zero_copy_only=False)
        after_delete[order] = ~has_version[order] & filled_ok & is_delete[order][np.maximum(last_valid, 0)]
    pick = np.lexsort((sub[rows], partition[rows], offset[rows], ~after_delete[rows], cand_version, cand_group))
    last = np.ones(len(pick), dtype=bool)
    last[:-1] = cand_group[pick][1:] != cand_group[pick][:-1]
    if every_version:
        last[:-1] |= cand_version[pick][1:] != cand_version[pick][:-1]
    winners = rows[pick][last]
    unfit = np.flatnonzero(~fit)
    take = np.sort(np.concatenate([winners, unfit]))
    versions = np.empty(n, dtype=np.int64)
    versions[order] = filled
    known = np.empty(n, dtype=bool)
    known[order] = filled_ok
    # one chunk per column first: Arrow's take over a binary column of many chunks (the raw values,
    # a chunk per read batch) cost 5-100 ms per read task, against ~2 ms to combine and 3 to take
    out = projected.combine_chunks().take(pa.array(take))
    return out.set_column(out.schema.get_field_index("version"), "version",
                          pa.array(versions[take], pa.int64(), mask=~known[take]))


def row_keys(target: SinkTarget) -> list[str] | None:
    """What "the same row" means for a static target's projected rows (None: every change is its own)."""
    cfg = target.config
    if isinstance(cfg, MySqlSinkConfig):
        return key_columns(cfg)
    return None if cfg.key_ignore else ["c_0", "c_1"]
