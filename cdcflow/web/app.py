"""The cdcflow plugin's FastAPI app, mounted by Airflow's api-server under ``/cdcflow``, built from one
router per area:

* api_connect.py   a Kafka-Connect-compatible REST API (``/connectors``, ``/connector-plugins``);
* api_pipelines.py cdcflow's own endpoints for windows, run-now, replay, offset resets and dead letters;
* api_metrics.py   lag (cdcflow's and Burrow's paths), Prometheus metrics, the health check;
* pages.py         the operator's pages (``/``, ``/pipelines/{name}``), rendered on the server.

Authentication and authorisation are Airflow's (deps.py): every route resolves its caller and checks
the pipeline's DAG permissions. Every action calls :class:`cdcflow.control.Control`, as the CLI does;
the routes find it with the ``SERVICE`` dependency (the app's ``state.cdcflow_service``).
"""

from __future__ import annotations

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse, RedirectResponse, Response

from cdcflow import control as ctl
from cdcflow.errors import CdcflowError, ConfigError, ControlError
from cdcflow.web import api_connect, api_metrics, api_pipelines, pages
from cdcflow.web.deps import PREFIX

__all__ = ["PREFIX", "create_app"]


def create_app(service: ctl.Control | None = None) -> FastAPI:
    app = FastAPI(title="cdcflow", description="cdcflow's control plane: Kafka Connect's REST API for "
                  "cdcflow pipelines, their windows and dead letters", version="1")
    app.state.cdcflow_service = service or ctl.Control()
    app.add_exception_handler(HTTPException, http_error)  # type: ignore[arg-type]
    app.add_exception_handler(CdcflowError, cdcflow_error)  # type: ignore[arg-type]
    for area in (api_connect, api_pipelines, api_metrics, pages):  # in this order: the routes' order as before
        app.include_router(area.router)
    return app


async def http_error(request: Request, exc: HTTPException) -> Response:
    """Connect's error shape; a page asked for without a login goes to Airflow's login instead."""
    if exc.status_code == 401 and pages.wants_html(request):
        from airflow.api_fastapi.app import get_auth_manager  # noqa: PLC0415

        return RedirectResponse(get_auth_manager().get_url_login(next_url=str(request.url)), status_code=303)
    return JSONResponse({"error_code": exc.status_code, "message": str(exc.detail)}, status_code=exc.status_code)


async def cdcflow_error(_request: Request, exc: CdcflowError) -> Response:
    """A cdcflow error in Connect's error shape, with its HTTP status (a ControlError's, 400 for a config)."""
    code = exc.status if isinstance(exc, ControlError) else 400 if isinstance(exc, ConfigError) else 500
    return JSONResponse({"error_code": code, "message": str(exc)}, status_code=code)
