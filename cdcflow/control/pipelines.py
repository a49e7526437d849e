"""The pipeline files as the control plane sees them: every file, valid or not (:func:`pipelines`), one
by name (:func:`get`, :func:`valid`), the names a file may have, the pipeline's offset store (one per URL
for the life of the process) and the operator's times (:func:`parse_time`)."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from cdcflow.config import PipelineConfig, config_dir, load_all, parse_instant
from cdcflow.errors import BadRequest, NotFound
from cdcflow.state import StateStore
from cdcflow.window import clients


@dataclass(frozen=True)
class Pipeline:
    """A pipeline file: its config when valid, else the errors that make it invalid."""

    name: str
    path: Path
    config: PipelineConfig | None
    error: str | None = None


def _name_of_invalid(path: Path) -> str:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        if isinstance(data, dict) and isinstance(data.get("name"), str) and data["name"]:
            return data["name"]
    except (OSError, yaml.YAMLError):
        pass
    return path.stem


def pipelines(directory: Path | None = None) -> list[Pipeline]:
    """Every pipeline file, valid or not, sorted by name."""
    loaded, errors = load_all(directory)
    out = [Pipeline(i.config.name, i.path, i.config) for i in loaded]
    names = {p.name for p in out}
    for path, message in errors.items():
        name = _name_of_invalid(path)
        out.append(Pipeline(name if name not in names else f"{name} ({path.name})", path, None, message))
    return sorted(out, key=lambda p: p.name)


def get(name: str, directory: Path | None = None) -> Pipeline:
    for p in pipelines(directory):
        if p.name == name:
            return p
    raise NotFound(f"Connector {name} not found (no pipeline named {name!r} in {directory or config_dir()})")


def valid(name: str) -> PipelineConfig:
    p = get(name)
    if p.config is None:
        raise BadRequest(f"pipeline {name!r} has an invalid config, fix it first:\n{p.error}")
    return p.config


def _name_pattern() -> str:
    return next(m.pattern for m in PipelineConfig.model_fields["name"].metadata if getattr(m, "pattern", None))


NAME_PATTERN = _name_pattern()


def check_name(name: str) -> str:
    """A pipeline name as the config model allows it; it also names the file ``<name>.yaml`` in the
    config directory, so no name reaches outside it (no '/', no leading '.')."""
    if not re.fullmatch(NAME_PATTERN, name):
        raise BadRequest(f"{name!r} is not a valid pipeline name: expected 1 to 200 letters, digits, '_', '.' or "
                         "'-', starting with a letter, a digit or '_' (it names the file <name>.yaml in the "
                         "config directory)")
    return name


@functools.lru_cache(maxsize=32)
def _store(url: str) -> StateStore:
    return StateStore(url)


def store_for(cfg: PipelineConfig | None) -> StateStore:
    """The pipeline's offset store, one per URL for the life of the process: the api-server serves
    every request and scrape from it instead of building an engine (and checking the schema) each time."""
    from cdcflow.state import default_store_url  # noqa: PLC0415

    return _store(clients.offset_store_url(cfg) if cfg is not None else default_store_url())


def parse_time(value: str | int) -> int:
    """Epoch milliseconds from an ISO 8601 time with a zone, or from epoch milliseconds."""
    try:
        return parse_instant(value)
    except ValueError as exc:
        raise BadRequest(f"timestamp {exc}") from None

