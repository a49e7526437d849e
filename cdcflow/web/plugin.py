"""The Airflow plugin: registers cdcflow's FastAPI app (mounted at ``/cdcflow``) and its links in
Airflow's navigation and on every pipeline DAG's page.

Airflow imports plugins in every component, task processes included, so nothing heavy happens at
import: the app is built on its first request (:class:`LazyApp`), and reads pipeline configs per
request, so a broken config never breaks the plugin.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from airflow.plugins_manager import AirflowPlugin

Scope = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Callable[[], Awaitable[Any]], Callable[[Any], Awaitable[None]]], Awaitable[None]]
URL_PREFIX = "/cdcflow"


class LazyApp:
    """An ASGI app that builds cdcflow.web.app.create_app() on first use."""

    def __init__(self) -> None:
        self._app: ASGIApp | None = None

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if self._app is None:
            from cdcflow.web.app import create_app  # noqa: PLC0415

            self._app = create_app()
        await self._app(scope, receive, send)


class BareRoot:
    """Root middleware: ``/cdcflow`` without its slash is the Connect-shaped API's root (Connect's
    clients are given ``http://host/cdcflow`` and GET it for the cluster info); Airflow's UI would
    otherwise answer it with its single-page app."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope.get("type") == "http" and scope.get("path") == URL_PREFIX:
            scope = {**scope, "path": URL_PREFIX + "/", "raw_path": (URL_PREFIX + "/").encode()}
        await self.app(scope, receive, send)


class CdcflowPlugin(AirflowPlugin):
    name = "cdcflow"
    fastapi_apps = [{"app": LazyApp(), "url_prefix": URL_PREFIX, "name": "cdcflow control plane"}]
    fastapi_root_middlewares = [{"middleware": BareRoot, "name": "cdcflow bare root"}]
    external_views = [
        {"name": "cdcflow", "href": f"{URL_PREFIX}/", "destination": "nav", "category": "browse",
         "url_route": "cdcflow"},
        {"name": "cdcflow pipeline", "href": f"{URL_PREFIX}/pipelines/{{DAG_ID}}", "destination": "dag",
         "url_route": "cdcflow-pipeline"},
    ]
