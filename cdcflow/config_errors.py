"""A config that does not validate, reported as the user wrote it: one message naming the file,
each problem's line and field path (as in the YAML, without pydantic's union tags), the value found
and what was expected; every problem at once, not just the first.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError


def line_index(text: str) -> dict[tuple[str, ...], int]:
    """Map each YAML node path to its 1-based line, so errors can point at the line."""
    index: dict[tuple[str, ...], int] = {}
    try:
        root = yaml.compose(text)
    except yaml.YAMLError:
        return index

    def walk(node: yaml.Node, path: tuple[str, ...]) -> None:
        index[path] = node.start_mark.line + 1
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                index[(*path, str(key.value))] = key.start_mark.line + 1
                walk(value, (*path, str(key.value)))
                index[(*path, str(key.value))] = key.start_mark.line + 1
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                walk(item, (*path, str(i)))

    if root is not None:
        walk(root, ())
    return index


def expected(err: dict[str, Any]) -> str:
    kind, msg = err["type"], err["msg"].removeprefix("Value error, ")
    if kind == "extra_forbidden":
        return "no such field (unknown keys are rejected; check the spelling)"
    if kind == "missing":
        return "a value (this field is required)"
    msg = msg.removeprefix("expected ")
    return msg[0].lower() + msg[1:] if msg else kind


def user_path(data: Any, loc: tuple[Any, ...]) -> tuple[str, ...]:
    """The error location as the user wrote it: pydantic adds the tag of a discriminated union
    (``mysql``, ``Cast`` …) to the location; a step that is not a key or index of the data is one."""
    shown: list[str] = []
    node = data
    for part in loc:
        if isinstance(node, dict) and part in node or isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            node = node[part]
        elif isinstance(node, dict) and node.get("type") == part:
            continue  # the union tag: this node's own 'type', not a key the user wrote
        elif isinstance(part, str) and node is not None and not isinstance(node, dict):
            continue  # a member of a plain union (str | int …) tried on a list or a scalar
        else:
            node = None
        shown.append(str(part))
    return tuple(shown)


def one_of(saids: list[str]) -> str:
    """'expected input should be a valid string' ×2 -> 'expected a valid string or a valid integer'."""
    if len(saids) == 1:
        return saids[0]
    if all(x.startswith("expected ") for x in saids):
        options = [x.removeprefix("expected ").removeprefix("input should be ") for x in saids]
        return "expected " + ", ".join(options[:-1]) + " or " + options[-1]
    return "; or ".join(saids)


def format_validation_error(path: Path | str, text: str, exc: ValidationError, data: Any = None) -> str:
    lines_by_path = line_index(text)
    # one problem per field: the members of a union (str | int …) each report the same value
    by_field: dict[tuple[str, str], tuple[list[str], str]] = {}
    for err in exc.errors():
        shown = user_path(data, tuple(err["loc"]))
        field = ".".join(shown) or "(top level)"
        line = None
        for n in range(len(shown), -1, -1):
            if shown[:n] in lines_by_path:
                line = lines_by_path[shown[:n]]
                break
        where = f"line {line}, " if line else ""
        value = "" if err["type"] == "missing" or "got " in err["msg"] else f"; got {err.get('input')!r}"
        if err["type"] == "value_error":  # our own validators word the whole sentence
            said = err["msg"].removeprefix("Value error, ")
        else:
            said = f"expected {expected(err)}"
        saids, _value = by_field.setdefault((where, field), ([], value))
        if said not in saids:
            saids.append(said)
    problems = [f"  - {where}{field}: {one_of(saids)}{value}" for (where, field), (saids, value) in by_field.items()]
    count = len(problems)
    return f"{path}: {count} error{'s' if count != 1 else ''}\n" + "\n".join(problems)
