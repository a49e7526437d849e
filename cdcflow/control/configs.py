"""Creating, changing and deleting pipelines through the API (Connect's ``PUT /connectors/{name}/config``
and ``DELETE /connectors/{name}``): a pipeline file written whole or not at all, as nested YAML that
reads back as the same config; deleted only while STOPPED."""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from cdcflow.config import PipelineConfig, config_dir, parse_pipeline
from cdcflow.config_errors import format_validation_error
from cdcflow.control.base import ControlBase
from cdcflow.control.pipelines import check_name, get, pipelines
from cdcflow.errors import BadRequest, CdcflowError, Conflict, NotFound

log = logging.getLogger("cdcflow.control")
KEPT_ON_DELETE = ("its stored offsets, window ledger and state are kept: a pipeline created again with the same "
                  "name continues from them, STOPPED until resumed (DELETE /connectors/{name}/offsets while it "
                  "is STOPPED forgets the offsets first)")

DELETE_NEEDS_STOP = ("Connector {name} must be in the STOPPED state before it can be deleted: issue a 'PUT' request "
                     "to the '/connectors/{name}/stop' endpoint first. Deleting removes its pipeline file; "
                     + KEPT_ON_DELETE)


def pipeline_yaml(cfg: PipelineConfig, written_by: str) -> str:
    """A pipeline file for ``cfg``: nested YAML in the models' field order, settings at their defaults
    left out (they read back as the same config)."""
    header = (f"# Pipeline {cfg.name}: {written_by}.\n"
              "# Settings at their defaults are left out (README.md, config/pipeline.schema.json); the next\n"
              "# change through the API rewrites this file, comments included.\n")
    for dump in (cfg.model_dump(mode="json", exclude_defaults=True), cfg.model_dump(mode="json", exclude_none=True)):
        text = header + yaml.safe_dump({"name": cfg.name, **dump}, sort_keys=False, allow_unicode=True,
                                     default_flow_style=None, width=100)
        if parse_pipeline(text).model_dump() == cfg.model_dump():
            return text
    raise CdcflowError(f"pipeline {cfg.name!r}: its YAML does not read back as the same config")  # a bug


def write_atomically(path: Path, text: str) -> None:
    """Write ``path`` whole or not at all: a temporary file beside it (a name no reader lists), fsync,
    then os.replace. The dag-processor and every reader see the old file or the new one."""
    mode = path.stat().st_mode & 0o777 if path.exists() else 0o644
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise CdcflowError(f"cannot write {path}: {exc.strerror}") from exc
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise CdcflowError(f"cannot write {path}: {exc.strerror}") from exc
        raise
    with contextlib.suppress(OSError):  # the rename itself survives a crash
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


class Configs(ControlBase):
    """Create, change and delete pipeline files."""

    def put_config(self, name: str, data: Mapping[str, Any], user: str) -> tuple[PipelineConfig, bool]:
        """Create or replace the pipeline ``name`` from a nested config (validated by the same models as
        the files). An existing pipeline's file is rewritten in place, a new one is ``<name>.yaml`` in
        the config directory. Returns the config and whether it is new. Windows read the file when their
        tasks start; a new pipeline's DAG appears when the dag-processor re-parses (DAG_APPEARS)."""
        check_name(name)
        data = dict(data)
        if data.setdefault("name", name) != name:
            raise BadRequest(f"name: expected {name!r} (the name in the path), got {data['name']!r}")
        try:
            cfg = PipelineConfig.model_validate(data)
        except ValidationError as exc:
            raise BadRequest(format_validation_error(f"config of connector {name}", "", exc, data)) from None
        directory = config_dir()
        existing = next((p for p in pipelines(directory) if p.name == name), None)
        if existing is not None:
            path = existing.path
        else:
            path = directory / f"{name}.yaml"
            if path.exists():  # a file of another name (an invalid file's name is read from it)
                raise Conflict(f"{path} exists and does not define pipeline {name!r}; rename or remove it first")
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        write_atomically(path, pipeline_yaml(cfg, f"written by PUT /connectors/{name}/config ({user}, {stamp})"))
        log.info("pipeline %s %s by %s: %s", name, "created" if existing is None else "changed", user, path)
        return cfg, existing is None

    def delete(self, name: str, user: str) -> Path:
        """Remove the pipeline's file, only while it is STOPPED with no run queued or running (Connect
        deletes at once; a file removed under a running window would fail it midway). Its offsets,
        ledger and state stay (KEPT_ON_DELETE). The DAG leaves Airflow's DAG list when the
        dag-processor re-parses; its runs' history stays in Airflow."""
        check_name(name)
        p = get(name)
        if p.config is None:
            raise Conflict(f"pipeline {name!r} cannot be STOPPED while its file {p.path} does not validate: fix it "
                           f"(PUT /connectors/{name}/config), stop it, then delete it; or remove the file by "
                           f"hand (it has no DAG that could run):\n{p.error}")
        self._require_stopped(p.config, DELETE_NEEDS_STOP)
        try:
            p.path.unlink()
        except FileNotFoundError:
            raise NotFound(f"Connector {name} not found (its file {p.path} is gone)") from None
        except OSError as exc:
            raise CdcflowError(f"cannot remove {p.path}: {exc.strerror}") from exc
        log.info("pipeline %s deleted by %s: %s removed; %s", name, user, p.path, KEPT_ON_DELETE.replace("{name}", name))
        return p.path

