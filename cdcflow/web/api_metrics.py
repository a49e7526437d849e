"""Lag, metrics and health: a pipeline's Burrow-style lag (cdcflow's path and Burrow's own),
Prometheus metrics of every pipeline, and KIP-1017's health check."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import JSONResponse, Response

from cdcflow import control as ctl
from cdcflow.lag import burrow_json
from cdcflow.web.deps import PREFIX, SERVICE, USER, authorize

router = APIRouter()


@router.get("/connectors/{name}/lag")
def lag(name: str, user: Any = USER, svc: ctl.Control = SERVICE, refresh: bool = False) -> Any:
    authorize(user, name, "GET")
    cfg = ctl.valid(name)
    return burrow_json(svc.lag(name, refresh=refresh or None), cfg.source.kafka_conn_id,
                       f"/v3/kafka/{cfg.source.kafka_conn_id}/consumer/{cfg.group_id}/lag")


@router.get("/v3/kafka/{cluster}/consumer/{group}/lag")
def burrow_lag(cluster: str, group: str, request: Request, user: Any = USER, svc: ctl.Control = SERVICE) -> Any:
    """Burrow's endpoint: the group is the pipeline's consumer group (cdcflow-<name>) or its name;
    the cluster is the pipeline's Kafka connection id."""
    for p in ctl.pipelines():
        cfg = p.config
        if cfg is not None and group in (cfg.group_id, cfg.name) and cluster == cfg.source.kafka_conn_id:
            authorize(user, cfg.name, "GET")
            return burrow_json(svc.lag(cfg.name), cluster, request.url.path.removeprefix(PREFIX))
    raise HTTPException(404, f"cluster or consumer group not found: no pipeline with consumer group {group!r} "
                             f"on Kafka connection {cluster!r}")


@router.get("/metrics")
def metrics(request: Request, svc: ctl.Control = SERVICE) -> Response:
    """Prometheus metrics of every pipeline. Open by default (the figures name pipelines, topics and
    tables, nothing more); with CDCFLOW_METRICS_TOKEN_FILE (or CDCFLOW_METRICS_TOKEN) set, a Bearer
    token equal to it is required: Prometheus's ``authorization: {credentials_file: …}`` sends it."""
    import hmac  # noqa: PLC0415

    from cdcflow.metrics import render  # noqa: PLC0415

    token = _metrics_token()
    if token and not hmac.compare_digest(request.headers.get("authorization", "").encode(),
                                         f"Bearer {token}".encode()):
        raise HTTPException(401, "metrics need the Bearer token of CDCFLOW_METRICS_TOKEN_FILE "
                                 "(Prometheus: authorization.credentials_file)")
    body, content_type = render(svc)
    return Response(body, media_type=content_type)


@router.get("/health")
def health(svc: ctl.Control = SERVICE) -> Response:
    """KIP-1017's health check: 200 ``healthy`` when requests can be served (the offset store
    answers), else 503 ``unhealthy`` with why. Open, as a liveness probe needs it."""
    why = svc.health()
    if why is not None:
        return JSONResponse({"status": "unhealthy", "message": why}, status_code=503)
    return JSONResponse({"status": "healthy", "message": "cdcflow is ready to handle requests"})


def _metrics_token() -> str | None:
    path = os.environ.get("CDCFLOW_METRICS_TOKEN_FILE")
    if path:
        try:
            return Path(path).read_text(encoding="utf-8").strip() or None
        except OSError as exc:  # refuse rather than serve openly what was meant to be closed
            raise HTTPException(503, f"CDCFLOW_METRICS_TOKEN_FILE {path} cannot be read: {exc.strerror}") from None
    return os.environ.get("CDCFLOW_METRICS_TOKEN") or None
