"""The source formats cdcflow decodes (``source.format``), registered explicitly: each is a
decoder of the same change model (connectors/changes.py), built inside the read task."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Literal

from connectors.canal.decode import CanalDecoder
from connectors.changes import ChangeDecoder
from connectors.debezium.envelope import Decoder as DebeziumDecoder
from connectors.debezium.types import ColumnHint
from connectors.goldengate.decode import GoldenGateDecoder
from connectors.maxwell.decode import MaxwellDecoder

SourceFormat = Literal["debezium", "goldengate", "canal", "maxwell"]


def _debezium(versioning: str, hints: Mapping[str, ColumnHint], need_json: bool, _key_fields: frozenset[str],
              fields: frozenset[str] | None = None) -> ChangeDecoder:
    return DebeziumDecoder(versioning, hints, need_json, fields)  # Debezium sends a key change as delete + create


def _all_fields(cls: Callable[[str, Mapping[str, ColumnHint], bool, frozenset[str]], ChangeDecoder]) -> Any:
    """A format whose decoder reads every field (``fields`` is not used)."""
    def build(versioning: str, hints: Mapping[str, ColumnHint], need_json: bool, key_fields: frozenset[str],
              _fields: frozenset[str] | None = None) -> ChangeDecoder:
        return cls(versioning, hints, need_json, key_fields)
    return build


FORMATS: dict[str, Callable[[str, Mapping[str, ColumnHint], bool, frozenset[str], frozenset[str] | None],
                            ChangeDecoder]] = {
    "debezium": _debezium,
    "goldengate": _all_fields(GoldenGateDecoder),
    "canal": _all_fields(CanalDecoder),
    "maxwell": _all_fields(MaxwellDecoder),
}


def decoder(source_format: str, versioning: str, hints: Mapping[str, ColumnHint], need_json: bool,
            key_fields: frozenset[str] = frozenset(), fields: frozenset[str] | None = None) -> ChangeDecoder:
    """The decoder of ``source_format``. ``hints``: the sinks' declared columns by source field (how
    to read values that come without types); ``key_fields``: the sinks' declared key fields (an
    update that changes them moves the row); ``fields``: the only row fields the sinks use, where
    that is known (Debezium reads just those; None: every field)."""
    return FORMATS[source_format](versioning, hints, need_json, key_fields, fields)
