"""Row images: each change's row values, typed, in one Arrow column for rows of many schemas (issue 21).

An image column is a dense union of structs, one child per row shape:

* a schema the column-wise Debezium decode read (connectors/debezium/columns.py): typed fields, as
  the schema says (int64, double, boolean, string, ``decimal128`` with the field's scale, ``date32``,
  ``timestamp[us]``, ``duration[us]`` …: connectors/debezium/typed.py);
* the rows of the per-record decoders (every format's rows, Debezium's odd records): their exact
  texts, as strings, a child per set of fields; a schemaless Debezium field's JSON numbers and
  booleans (no declared column reads them) keep their type, as the column-wise decode reads them;
  GoldenGate's, Canal's and Maxwell's rows under a chain are typed as their producer says
  (connectors/row_types.py: ``Change.types``), their texts read in those types.

A null image (a TRUNCATE; a record that changes nothing) is a null struct, and a field a row does not
have reads as null. A window holds few shapes; past :data:`MAX_CHILDREN` (a union holds 128) the
image falls back to one child of every field.

The sinks read one field of every row at once: :func:`texts` gives each value's exact MySQL text
(the projection checks it against its column: spark_jobs/project/tables.py). :func:`as_map` gives
them as ``map<string,string>`` of those texts (a key image after the key's steps, the tests).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from connectors import row_types
from connectors.debezium import typed
from connectors.debezium.logical import plain_text

MAX_CHILDREN = 120
STRING_MAP = pa.map_(pa.string(), pa.string())


# -- building ------------------------------------------------------------------------------------------
def _struct(names: Sequence[str], arrays: Sequence[pa.Array], null: pa.Array | None, n: int) -> pa.StructArray:
    if not names:  # a row of no fields (no sink reads any): Arrow's from_arrays needs a field for its length
        return pa.array([None if null is not None and null[i].as_py() else {} for i in range(n)], pa.struct([]))
    return pa.StructArray.from_arrays(list(arrays), names=list(names), mask=null)


def union(type_ids: np.ndarray, offsets: np.ndarray, children: list[pa.StructArray]) -> pa.Array:
    """An image of ``children`` (structs): row i is child ``type_ids[i]``'s element ``offsets[i]``."""
    return pa.UnionArray.from_dense(pa.array(type_ids.astype(np.int8), pa.int8()),
                                    pa.array(offsets.astype(np.int32), pa.int32()), children,
                                    [str(i) for i in range(len(children))])


def from_columns(names: Sequence[str], arrays: Sequence[pa.Array], null: pa.Array) -> pa.Array:
    """Rows of one shape: ``arrays`` are their fields, ``null`` says which rows have no image."""
    n = len(null)
    return union(np.zeros(n, np.int8), np.arange(n, dtype=np.int32), [_struct(names, arrays, null, n)])


def values_array(values: Sequence[Any]) -> pa.Array:
    """One field of per-record images as an Arrow array: texts as strings; a field whose every value
    is a JSON number or boolean (a schemaless field no column declares: connectors/debezium/envelope.py)
    typed as the column-wise decode reads it (Arrow's JSON reader: integers int64, with a fraction
    among them float64), so a chain and a table made from the values see one type whichever decode
    read the record; a field of mixed kinds as the texts of its values."""
    kinds = {type(v) for v in values if v is not None}
    if kinds <= {str}:
        return pa.array(values, pa.string())
    if kinds == {bool}:
        return pa.array(values, pa.bool_())
    try:
        if kinds == {int}:
            return pa.array(values, pa.int64())
        if kinds <= {int, Decimal, float}:
            floats = pa.array([None if v is None else float(v) for v in values], pa.float64())
            if pc.all(pc.is_finite(floats)).as_py() is not False:
                return floats
    except (OverflowError, pa.ArrowInvalid):  # past int64: its text
        pass
    return pa.array([None if v is None else plain_text(v) for v in values], pa.string())


def _field(members: Sequence[Mapping[str, Any] | None], name: str,
           types: Sequence[Mapping[str, Any] | None] | Mapping[str, Any] | None) -> pa.Array:
    """One field of a child's images: typed by ``types`` (each member's, or one for all: a format's
    rows under a chain, connectors/row_types.py), else :func:`values_array`."""
    values = [None if m is None else m.get(name) for m in members]
    if types is None:
        return values_array(values)
    if isinstance(types, Mapping):
        return row_types.typed_texts(values, types.get(name))
    kinds = [t.get(name) if t is not None else None for t, v in zip(types, values, strict=True) if v is not None]
    return row_types.typed_texts(values, row_types.common(kinds))


def _shared(types: list[Mapping[str, Any] | None]) -> list[Mapping[str, Any] | None] | Mapping[str, Any]:
    """The members' types, or the one mapping they all share (Canal's rows of one ``mysqlType``)."""
    first = types[0] if types else None
    return first if first is not None and all(t is first for t in types) else types


def from_texts(images: Sequence[Mapping[str, Any] | None],
               types: Sequence[Mapping[str, pa.DataType] | None] | None = None) -> pa.Array:
    """The per-record decoders' images ({field: exact text, or a schemaless JSON number or boolean},
    None for none): a child per field set (:func:`values_array`). ``types``: each image's fields'
    Arrow types (a format's rows a chain reads: connectors/row_types.py), their texts read in them."""
    shapes: dict[tuple[str, ...], int] = {}
    shape_of = np.zeros(len(images), np.int32)
    for i, image in enumerate(images):
        shape_of[i] = shapes.setdefault(tuple(image) if image is not None else (), len(shapes))
    children, offsets = [], np.zeros(len(images), np.int32)
    for shape, code in shapes.items():
        rows = np.flatnonzero(shape_of == code)
        offsets[rows] = np.arange(len(rows))
        members = [images[i] for i in rows]
        kinds = None if types is None else _shared([types[i] for i in rows])
        arrays = [_field(members, name, kinds) for name in shape]  # type: ignore[arg-type]
        null = pa.array([m is None for m in members], pa.bool_())
        children.append(_struct(shape, arrays, null, len(rows)))
    if not children:
        return from_columns([], [], pa.array([], pa.bool_()))
    if len(children) > MAX_CHILDREN:  # one child of every field name
        names = list(dict.fromkeys(name for image in images if image is not None for name in image))
        return from_columns(names, [_field(images, name, types) for name in names],
                            pa.array([i is None for i in images], pa.bool_()))
    return union(shape_of, offsets, children)


# -- reading -------------------------------------------------------------------------------------------
def _codes_offsets(image: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """The type code and child offset of each row (pyarrow's properties ignore a slice's offset)."""
    start, end = image.offset, image.offset + len(image)
    return (np.frombuffer(image.buffers()[1], np.int8)[start:end],
            np.frombuffer(image.buffers()[2], np.int32)[start:end])


def text_of(values: pa.Array) -> pa.Array:
    """A field's values as exact MySQL texts (those of connectors/debezium/types.py)."""
    kind = values.type
    if pa.types.is_string(kind):
        return values
    if pa.types.is_null(kind):
        return pa.nulls(len(values), pa.string())
    if pa.types.is_struct(kind) or pa.types.is_list(kind):  # kept whole for a chain that takes it apart
        return typed.nested_json(values)
    if pa.types.is_decimal(kind) or pa.types.is_timestamp(kind) or pa.types.is_duration(kind) \
            or pa.types.is_date(kind):
        return typed.mysql_texts(values)
    return pc.cast(values, pa.string())


def _gather(codes: np.ndarray, offsets: np.ndarray | None, parts: list[pa.Array]) -> pa.Array:
    """Per row, its child's value: ``parts[i]`` is child i's, aligned with the child; ``codes`` and
    ``offsets`` are each row's child and place in it (:func:`_layout`; None: one child, in order)."""
    if offsets is None:
        return parts[0]
    if len(parts) == 1:
        return parts[0].take(pa.array(offsets))
    starts = np.concatenate([[0], np.cumsum([len(p) for p in parts])[:-1]]).astype(np.int64)
    return pa.concat_arrays(parts).take(pa.array(starts[codes] + offsets))


def _layout(image: pa.Array) -> tuple[np.ndarray, np.ndarray | None]:
    """Each row's child and place in it; the place is None where the image is its only child, in order."""
    codes, offsets = _codes_offsets(image)
    if image.type.num_fields == 1 and len(image.field(0)) == len(image) and np.array_equal(
            offsets, np.arange(len(image))):
        return codes, None
    return codes, offsets


def _children(image: pa.Array) -> list[pa.StructArray]:
    return [image.field(i) for i in range(image.type.num_fields)]


def _whole(image: pa.Array | pa.ChunkedArray) -> pa.Array:
    if not isinstance(image, pa.ChunkedArray):
        return image
    if image.num_chunks == 1:
        return image.chunk(0)
    if image.num_chunks == 0 and pa.types.is_union(image.type):  # pa.array([], a union type) is not implemented
        return pa.UnionArray.from_dense(pa.array([], pa.int8()), pa.array([], pa.int32()),
                                        [pa.array([], f.type) for f in image.type],
                                        [f.name for f in image.type], list(image.type.type_codes))
    return image.combine_chunks()


class Fields:
    """An image column read field by field: its layout (children, each row's child and place) worked
    out once for every field read. Takes a map<string,string> of texts too (:func:`as_map`)."""

    def __init__(self, image: pa.Array | pa.ChunkedArray) -> None:
        self.image = image = compact(image)
        self._union = pa.types.is_union(image.type)
        self._children = _children(image) if self._union else []
        # each child's fields with the child's nulls applied, in one call per child (not one per field)
        self._fields = [dict(zip(c.type.names, c.flatten(), strict=True)) for c in self._children]
        if self._union:
            self._codes, self._offsets = _layout(image)  # once, for every field read

    def type_of(self, name: str) -> pa.DataType | None:
        """The field's Arrow type where every child that has it agrees (a map's: string), else None."""
        if not self._union:
            return pa.string() if pa.types.is_map(self.image.type) else None
        kinds = {c.type.field(name).type for c in self._children if c.type.get_field_index(name) >= 0}
        return kinds.pop() if len(kinds) == 1 else None

    def texts(self, name: str) -> pa.Array:
        """Field ``name`` of every row as its MySQL text; null where the row has no image or no such
        field."""
        image = self.image
        if pa.types.is_null(image.type):
            return pa.nulls(len(image), pa.string())
        if pa.types.is_map(image.type):
            return pc.map_lookup(image, pa.scalar(name, pa.string()), "first")
        parts = [text_of(fields[name]) if name in fields else pa.nulls(len(child), pa.string())
                 for child, fields in zip(self._children, self._fields, strict=True)]
        return _gather(self._codes, self._offsets, parts)


def texts(image: pa.Array | pa.ChunkedArray, name: str) -> pa.Array:
    """Field ``name`` of every row as its MySQL text (:class:`Fields`, for one field)."""
    return Fields(image).texts(name)


def compact(image: pa.Array | pa.ChunkedArray) -> pa.Array:
    """The image with only the children its rows use, each cut to those rows (a table's slice of a
    task's changes reads one child, not every table's: spark_jobs/tables.project_rows)."""
    image = _whole(image)
    if not pa.types.is_union(image.type) or not len(image):
        return image
    codes, offsets = _layout(image)
    if offsets is None:
        return image
    children = _children(image)
    type_codes = list(image.type.type_codes)
    new_codes, new_offsets, kept = np.zeros(len(image), np.int8), np.zeros(len(image), np.int32), []
    for code in np.unique(codes):
        rows = np.flatnonzero(codes == code)
        new_codes[rows] = len(kept)
        new_offsets[rows] = np.arange(len(rows))
        kept.append(children[type_codes.index(int(code))].take(pa.array(offsets[rows])))
    return union(new_codes, new_offsets, kept)


def field_names(image: pa.Array) -> list[str]:
    """The fields the image's rows have, in the order first seen."""
    seen: dict[str, None] = {}
    for child in _children(image):
        seen.update((f.name, None) for f in child.type)
    return list(seen)


def as_map(image: pa.Array | pa.ChunkedArray) -> pa.Array:
    """The images as map<string,string> of exact texts (a key image after the key's steps, the tests')."""
    image = _whole(image)
    if pa.types.is_map(image.type):
        return image
    if pa.types.is_null(image.type):
        return pa.nulls(len(image), STRING_MAP)
    parts = []
    for child in _children(image):
        n, names = len(child), [f.name for f in child.type]
        k = len(names)
        offsets = pa.array(np.arange(0, n * k + 1, k, dtype=np.int32) if k else np.zeros(n + 1, np.int32))
        mask = child.is_null()
        if not k:
            parts.append(pa.MapArray.from_arrays(offsets, pa.array([], pa.string()), pa.array([], pa.string()),
                                                 mask=mask))
            continue
        order = (np.arange(k)[None, :] * n + np.arange(n)[:, None]).ravel()
        values = pa.concat_arrays([text_of(child.field(i)) for i in range(k)]).take(pa.array(order))
        keys = pa.array(names, pa.string()).take(pa.array(np.tile(np.arange(k), n)))
        parts.append(pa.MapArray.from_arrays(offsets, keys, values, mask=mask))
    return _gather(*_layout(image), parts)


# -- combining -----------------------------------------------------------------------------------------
def _wide(images: list[pa.Array]) -> tuple[list[str], list[pa.Array], pa.Array]:
    """Images of too many shapes as one child of texts: every field name, null where a row lacks it."""
    combined = [i for i in images if len(i)]
    names: dict[str, None] = {}
    for image in combined:
        names.update((name, None) for name in field_names(image))
    null = pa.concat_arrays([pc.is_null(as_map(i)) for i in combined]) if combined else pa.array([], pa.bool_())
    arrays = [pa.concat_arrays([texts(i, name) for i in combined]) if combined else pa.array([], pa.string())
              for name in names]
    return list(names), arrays, null


def concat(images: Sequence[pa.Array]) -> pa.Array:
    """Image arrays of any shapes as one (children of one type merged)."""
    images = [i for i in images if len(i)] or list(images[:1])
    if len(images) == 1:
        return images[0]
    kinds: dict[pa.DataType, int] = {}
    pieces: list[list[pa.Array]] = []
    for image in images:
        for child in _children(image):
            if child.type not in kinds:
                kinds[child.type] = len(kinds)
                pieces.append([])
    if len(kinds) > MAX_CHILDREN:
        return from_columns(*_wide(list(images)))
    sizes = [0] * len(kinds)
    all_codes, all_offsets = [], []
    for image in images:
        codes, offsets = _codes_offsets(image)
        remap = np.zeros(max(image.type.num_fields, 1), np.int64)
        shift = np.zeros(max(image.type.num_fields, 1), np.int64)
        for i, child in enumerate(_children(image)):
            code = kinds[child.type]
            remap[i], shift[i] = code, sizes[code]
            pieces[code].append(child)
            sizes[code] += len(child)
        type_codes = np.asarray(image.type.type_codes, np.int64)
        position = np.zeros(int(type_codes.max()) + 1, np.int64)
        position[type_codes] = np.arange(len(type_codes))
        child_index = position[codes]
        all_codes.append(remap[child_index])
        all_offsets.append(offsets + shift[child_index])
    children = [pa.concat_arrays(p) for p in pieces]
    return union(np.concatenate(all_codes), np.concatenate(all_offsets), children)


def concat_tables(tables: Sequence[pa.Table], columns: Sequence[str] = ("image",)) -> pa.Table:
    """Tables whose image columns may differ in type, as one (pa.concat_tables needs one schema)."""
    tables = list(tables)
    present = [c for c in columns if tables and c in tables[0].column_names]
    if len(tables) == 1 or not present or all(t.schema == tables[0].schema for t in tables):
        return pa.concat_tables(tables) if len(tables) != 1 else tables[0]
    merged = {c: concat([_whole(t.column(c)) for t in tables]) for c in present}
    rest = pa.concat_tables([t.drop_columns(present) for t in tables])
    for c in present:
        rest = rest.add_column(tables[0].schema.get_field_index(c), c, merged[c])
    return rest


# -- one struct ----------------------------------------------------------------------------------------
def common_type(kinds: list[pa.DataType]) -> pa.DataType:
    """The type the fields of several children share: theirs when they agree, a number's widest, else
    text (each value's MySQL text, :func:`text_of`)."""
    kinds = [k for k in dict.fromkeys(kinds) if not pa.types.is_null(k)]
    if not kinds:
        return pa.null()
    if len(kinds) == 1:
        return kinds[0]
    if all(pa.types.is_integer(k) for k in kinds):
        return pa.int64()
    if all(pa.types.is_integer(k) or pa.types.is_floating(k) for k in kinds):
        return pa.float64()
    return pa.string()


def as_type(values: pa.Array, kind: pa.DataType) -> pa.Array:
    if values.type == kind:
        return values
    if pa.types.is_string(kind):
        return text_of(values)
    return pc.cast(values, kind)


def as_struct(image: pa.Array | pa.ChunkedArray) -> pa.StructArray:
    """The images as one struct (Spark has no unions: spark_jobs/transform/spark_stage.py): every field of every
    child, in the order first seen, of the type :func:`common_type` gives; null where a row lacks it."""
    image = compact(image)
    if pa.types.is_struct(image.type):
        return image
    if pa.types.is_null(image.type) or not pa.types.is_union(image.type):
        return pa.array([None] * len(image), pa.struct([]))
    children = _children(image)
    names = field_names(image)
    kinds = {n: common_type([c.type.field(n).type for c in children if c.type.get_field_index(n) >= 0]) for n in names}
    layout = _layout(image)
    arrays = []
    for name in names:
        parts = [as_type(c.field(name), kinds[name]) if c.type.get_field_index(name) >= 0
                 else pa.nulls(len(c), kinds[name]) for c in children]
        arrays.append(_gather(*layout, parts))
    null = _gather(*layout, [c.is_null() for c in children])
    return _struct(names, arrays, null, len(image))


def from_struct(values: pa.StructArray) -> pa.Array:
    """A struct of rows (what :func:`as_struct` made, after a Spark stage) as an image of one child."""
    values = _whole(values)
    names = [f.name for f in values.type]
    return from_columns(names, [values.field(i) for i in range(len(names))], values.is_null())
