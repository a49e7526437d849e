"""The operator's pages, rendered on the server: the list of pipelines (``/``, which answers a client
that does not ask for HTML with Connect's root resource) and one pipeline's page (``/pipelines/{name}``).
A section that cannot be loaded shows its error; the rest of the page still renders."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import yaml
from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, JSONResponse
from jinja2 import Environment, FileSystemLoader, select_autoescape

from cdcflow import control as ctl
from cdcflow.errors import CdcflowError
from cdcflow.web import charts
from cdcflow.web.deps import PREFIX, SERVICE, USER, authorize, may
from cdcflow.web.shapes import dead_letter_json, parse_before

log = logging.getLogger("cdcflow.web")
TEMPLATES = Environment(loader=FileSystemLoader(Path(__file__).parent / "templates"),
                        autoescape=select_autoescape(["html"]))
router = APIRouter()


@router.get("/", response_class=HTMLResponse)
def index(request: Request, user: Any = USER, svc: ctl.Control = SERVICE) -> Any:
    if "text/html" not in request.headers.get("accept", ""):  # Connect's root: a client asking what it talks to
        return JSONResponse(svc.cluster_info())
    rows = []
    for p in ctl.pipelines():
        if not may(user, p.name, "GET"):
            continue
        rows.append({"p": p, "status": _safe(lambda p=p: svc.status(p.name))})
    from cdcflow.metrics import spark_states  # noqa: PLC0415 - one probe per 30 s, shared with the metrics

    return _render("index.html", request, user=user, rows=rows, sparks=spark_states([r["p"] for r in rows]))


@router.get("/pipelines/{name}", response_class=HTMLResponse)
def page(request: Request, name: str, user: Any = USER, svc: ctl.Control = SERVICE, before: str | None = None) -> Any:
    authorize(user, name, "GET")
    p = ctl.get(name)
    ctx: dict[str, Any] = {"p": p, "user": user, "before": before, "status": _safe(lambda: svc.status(name)),
                           "can_edit": may(user, name, "PUT"), "can_run": may(user, name, "POST", runs=True)}
    if p.config is not None:
        ctx["offsets"] = _safe(lambda: svc.offsets(name))
        ctx["lag"] = _safe(lambda: svc.lag(name))  # samples the broker first when its samples are stale
        ctx["lag_chart"] = _safe(lambda: charts.lag_chart(svc.lag_history(name, charts.LAG_SAMPLES)))
        ctx["windows"] = _safe(lambda: svc.windows(name, charts.WINDOWS))  # the table shows the newest 15
        ctx["window_charts"] = (ctx["windows"] if isinstance(ctx["windows"], Failed)
                                else _safe(lambda: charts.window_charts(ctx["windows"])))
        ctx["dlq"] = _safe(lambda: svc.dlq(name, 20, parse_before(before))) if p.config.errors.dlq_topic else None
        ctx["schema_changes"] = _safe(lambda: svc.schema_changes(name)) if p.config.schema_changes == "pause" else []
        ctx["composed"] = _safe(lambda: svc.composed(name))
        ctx["config_yaml"] = yaml.safe_dump(p.config.model_dump(mode="json", exclude_none=True), sort_keys=False)
    return _render("pipeline.html", request, **ctx)


class Failed:
    """A section of a page that could not be loaded (the rest of the page still renders)."""

    def __init__(self, error: Exception) -> None:
        self.error = f"{error.__class__.__name__}: {error}"


def _safe(fn: Any) -> Any:
    try:
        return fn()
    except CdcflowError as exc:
        return Failed(exc)
    except Exception as exc:  # a page shows what failed instead of a 500
        log.exception("page section failed")
        return Failed(exc)


def wants_html(request: Request) -> bool:
    """Whether the request is a browser's for a page (a 401 then redirects to Airflow's login)."""
    path = request.url.path.removeprefix(PREFIX)
    return (path in ("", "/") or path.startswith("/pipelines")) and "text/html" in request.headers.get("accept", "")


def _render(template: str, request: Request, **ctx: Any) -> HTMLResponse:
    root = str(request.scope.get("root_path", "")).rstrip("/") or PREFIX
    html = TEMPLATES.get_template(template).render(root=root, Failed=Failed, json=json,
                                                   dead_letter_json=dead_letter_json, **ctx)
    return HTMLResponse(html)
