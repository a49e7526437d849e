"""Resolve Airflow connection ids to client settings, inside or outside an Airflow task.

Pipelines name connections by conn id only. The lookup order is Airflow's own for environment
connections (``AIRFLOW_CONN_<ID>``, URI or JSON), then Airflow's secrets backends and metadata DB,
so the same pipeline runs under the scheduler, ``airflow dags test``, Spark executors and the CLI.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlsplit

from cdcflow.errors import ConfigError


@dataclass(frozen=True)
class ConnectionInfo:
    conn_id: str
    conn_type: str
    host: str | None = None
    port: int | None = None
    login: str | None = None
    password: str | None = field(default=None, repr=False)
    schema: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def sqlalchemy_url(self) -> str:
        """A SQLAlchemy URL for SQL connections (mysql, sqlite, postgres)."""
        kind = self.conn_type.replace("-", "_")
        if kind == "sqlite":
            return f"sqlite:///{self.host or self.schema}"
        driver = {"mysql": "mysql+pymysql", "postgres": "postgresql", "postgresql": "postgresql"}.get(kind)
        if driver is None:
            raise ConfigError(
                f"connection {self.conn_id!r} has type {self.conn_type!r}; expected mysql, postgres or sqlite"
            )
        auth = ""
        if self.login:
            auth = quote(self.login, safe="")
            if self.password:
                auth += ":" + quote(self.password, safe="")
            auth += "@"
        port = f":{self.port}" if self.port else ""
        return f"{driver}://{auth}{self.host or 'localhost'}{port}/{self.schema or ''}"

    def http_url(self) -> str:
        """Base URL of an HTTP service (Elasticsearch): scheme from extra.scheme or schema, default http."""
        scheme = str(self.extra.get("scheme") or self.schema or "http")
        if scheme not in ("http", "https"):
            raise ConfigError(f"connection {self.conn_id!r}: scheme {scheme!r} must be http or https")
        if not self.host:
            raise ConfigError(f"connection {self.conn_id!r} has no host")
        return f"{scheme}://{self.host}:{self.port or 9200}"

    def registry_url(self) -> str:
        """Base URL of a Schema Registry (Confluent's, Apicurio's ccompat API, Karapace): ``extra.url``
        whole, or scheme (extra.scheme or schema, default http), host, port (default 8081) and
        ``extra.path`` (Apicurio: /apis/ccompat/v7)."""
        if self.extra.get("url"):
            url = str(self.extra["url"]).rstrip("/")
            if not url.startswith(("http://", "https://")):
                raise ConfigError(f"connection {self.conn_id!r}: extra.url {url!r} must start with http:// or https://")
            return url
        scheme = str(self.extra.get("scheme") or self.schema or "http")
        if scheme not in ("http", "https"):
            raise ConfigError(f"connection {self.conn_id!r}: scheme {scheme!r} must be http or https (a Schema "
                              "Registry's URL)")
        if not self.host:
            raise ConfigError(f"connection {self.conn_id!r} has no host (the Schema Registry's); or set extra.url")
        path = str(self.extra.get("path") or "").strip("/")
        return f"{scheme}://{self.host}:{self.port or 8081}" + (f"/{path}" if path else "")

    def bearer_token(self) -> str | None:
        """A bearer token from the extra (``bearer_token``, or Confluent's client key ``bearer.auth.token``)."""
        token = self.extra.get("bearer_token") or self.extra.get("bearer.auth.token")
        return str(token) if token else None

    def kafka_config(self) -> dict[str, Any]:
        """librdkafka settings: the connection's extra (as the apache-kafka provider stores it)."""
        conf = {k: v for k, v in self.extra.items() if not k.startswith("__")}
        if "bootstrap.servers" not in conf:
            if not self.host:
                raise ConfigError(
                    f"connection {self.conn_id!r} has no bootstrap.servers in its extra and no host"
                )
            conf["bootstrap.servers"] = f"{self.host}:{self.port or 9092}"
        return conf


def _from_uri(conn_id: str, uri: str) -> ConnectionInfo:
    parts = urlsplit(uri)
    extra: dict[str, Any] = dict(parse_qsl(parts.query))
    if "__extra__" in extra:
        extra = json.loads(extra["__extra__"])
    return ConnectionInfo(
        conn_id=conn_id,
        conn_type=parts.scheme,
        host=unquote(parts.hostname) if parts.hostname else None,
        port=parts.port,
        login=unquote(parts.username) if parts.username else None,
        password=unquote(parts.password) if parts.password else None,
        schema=unquote(parts.path.lstrip("/")) or None,
        extra=extra,
    )


def _from_json(conn_id: str, text: str) -> ConnectionInfo:
    data = json.loads(text)
    extra = data.get("extra") or {}
    if isinstance(extra, str):
        extra = json.loads(extra)
    return ConnectionInfo(
        conn_id=conn_id,
        conn_type=data.get("conn_type", ""),
        host=data.get("host"),
        port=int(data["port"]) if data.get("port") else None,
        login=data.get("login"),
        password=data.get("password"),
        schema=data.get("schema"),
        extra=extra,
    )


def _from_airflow(conn_id: str) -> ConnectionInfo | None:
    try:
        from airflow.sdk import BaseHook  # noqa: PLC0415 - Airflow is heavy; only when needed
    except ImportError:
        return None
    try:
        conn = BaseHook.get_connection(conn_id)
    except Exception:  # noqa: BLE001 - any lookup failure means "not defined" to the caller
        return None
    return ConnectionInfo(
        conn_id=conn_id,
        conn_type=conn.conn_type or "",
        host=conn.host,
        port=conn.port,
        login=conn.login,
        password=conn.password,
        schema=conn.schema,
        extra=conn.extra_dejson,
    )


def get_connection(conn_id: str) -> ConnectionInfo:
    raw = os.environ.get(f"AIRFLOW_CONN_{conn_id.upper()}")
    if raw:
        try:
            return _from_json(conn_id, raw) if raw.lstrip().startswith("{") else _from_uri(conn_id, raw)
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"AIRFLOW_CONN_{conn_id.upper()} is not a valid connection URI or JSON: {exc}") from exc
    info = _from_airflow(conn_id)
    if info is None:
        raise ConfigError(
            f"connection {conn_id!r} is not defined: set AIRFLOW_CONN_{conn_id.upper()} "
            f"or run `airflow connections add {conn_id} ...`"
        )
    return info
