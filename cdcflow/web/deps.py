"""What the routes of the cdcflow app depend on: the caller, resolved and authorised by Airflow's auth
manager, and the control service (:class:`cdcflow.control.Control`) the app was built with.

Authentication and authorisation are Airflow's: the caller is resolved by Airflow's ``get_user``
(a Bearer token, or the UI's ``_token`` cookie), or by HTTP Basic against Airflow's own login, and every
request is checked with the auth manager's ``is_authorized_dag`` for the pipeline's DAG: GET to read,
PUT to change, POST on runs to trigger.
"""

from __future__ import annotations

from typing import Any

from fastapi import Depends, HTTPException, Request

from cdcflow import control as ctl

PREFIX = "/cdcflow"  # where Airflow's api-server mounts the app (cdcflow/web/plugin.py)


async def current_user(request: Request) -> Any:
    """The caller, as Airflow's auth manager knows them: a Bearer token or the UI's cookie (Airflow's
    ``get_user``), or HTTP Basic, the way Kafka Connect's ``BasicAuthSecurityRestExtension`` and
    Connect's clients and tools log in: the user name and password are checked by the auth manager's
    own login (Airflow's users and roles, nothing of cdcflow's own)."""
    from airflow.api_fastapi.core_api.security import bearer_scheme, get_user  # noqa: PLC0415

    scheme, _, credentials = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "basic":
        return await _basic_user(credentials.strip())
    return await get_user(request, None, await bearer_scheme(request))


async def _basic_user(credentials: str) -> Any:
    import base64  # noqa: PLC0415
    import binascii  # noqa: PLC0415

    from airflow.api_fastapi.app import get_auth_manager  # noqa: PLC0415

    try:
        username, sep, password = base64.b64decode(credentials, validate=True).decode("utf-8").partition(":")
    except (binascii.Error, UnicodeDecodeError):
        sep = ""
    if not sep:
        raise HTTPException(401, "Basic credentials must be base64 of USER:PASSWORD")
    manager = get_auth_manager()
    if type(manager).__name__ != "SimpleAuthManager":
        raise HTTPException(401, f"HTTP Basic is checked against Airflow's SimpleAuthManager; with "
                                 f"{type(manager).__name__}, send a Bearer token from POST /auth/token")
    from airflow.api_fastapi.auth.managers.simple.datamodels.login import LoginBody  # noqa: PLC0415
    from airflow.api_fastapi.auth.managers.simple.services.login import SimpleAuthManagerLogin  # noqa: PLC0415

    try:
        token = SimpleAuthManagerLogin.create_token(LoginBody(username=username, password=password), 60)
    except HTTPException as exc:
        raise HTTPException(401, f"user {username!r}: {exc.detail}") from None
    return await manager.get_user_from_token(token)


def service(request: Request) -> ctl.Control:
    """The control service of the app serving the request (create_app's ``service``)."""
    return request.app.state.cdcflow_service


USER: Any = Depends(current_user)  # a route's ``user: Any = USER``
SERVICE: Any = Depends(service)  # a route's ``svc: ctl.Control = SERVICE``


def authorize(user: Any, name: str, method: str, runs: bool = False) -> None:
    """403 unless Airflow's auth manager lets ``user`` do ``method`` on the pipeline's DAG."""
    from airflow.api_fastapi.app import get_auth_manager  # noqa: PLC0415
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity, DagDetails  # noqa: PLC0415

    allowed = get_auth_manager().is_authorized_dag(
        method=method, access_entity=DagAccessEntity.RUN if runs else None, details=DagDetails(id=name), user=user)
    if not allowed:
        verb = {"GET": "read", "PUT": "change", "POST": "trigger runs of", "DELETE": "delete"}.get(method, method)
        raise HTTPException(403, f"user {user.get_name()!r} may not {verb} pipeline {name!r} (Airflow DAG permissions)")


def may(user: Any, name: str, method: str, runs: bool = False) -> bool:
    """Whether :func:`authorize` lets ``user`` through (lists and pages show only what one may)."""
    try:
        authorize(user, name, method, runs)
        return True
    except HTTPException:
        return False
