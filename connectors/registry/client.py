"""The Schema Registry's REST API, the part a reader needs: a schema by its id
(``GET /schemas/ids/{id}``, Confluent Schema Registry's API, also served by Apicurio Registry's
``ccompat`` endpoint and Karapace), and a referenced schema by subject and version
(``GET /subjects/{subject}/versions/{version}``).

A schema id names one schema forever (the registry never reuses an id), so each is fetched once per
process and kept: a Spark Python worker reads window after window with the schemas it already has.
What goes wrong is told apart by what the runner must do:

* the registry cannot be reached, times out or answers a server error (5xx), or refuses the
  credentials: :class:`RegistryUnavailable`, an infrastructure error. The window fails at once and
  no offset moves; no record is dead-lettered for the registry's fault.
* the registry does not know the id (404 with error code 40403): :class:`UnknownSchema`, a fault
  of that one record, which goes to the DLQ with the reason. A 404 without the registry's error
  code is a URL that is not the registry's API: RegistryUnavailable, never a dead letter.
"""

from __future__ import annotations

import base64
import json
import socket
import threading
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from connectors.errors import RegistryUnavailable

TIMEOUT = 10.0  # seconds per request: a registry slower than this is treated as down
UNKNOWN_CODES = (40401, 40402, 40403)  # subject, version, schema not found (Confluent's error codes)


class UnknownSchema(LookupError):
    """The registry does not know the schema id (or the referenced subject/version): a record fault."""


@dataclass(frozen=True)
class RegistrySettings:
    """Where the registry is and how to log in, resolved from the Airflow connection on the driver
    (cdcflow/connections.py), so the read tasks need no Airflow."""

    url: str  # base URL, e.g. http://registry:8081 or http://apicurio:8080/apis/ccompat/v7
    conn_id: str = ""
    login: str | None = None
    password: str | None = field(default=None, repr=False)
    token: str | None = field(default=None, repr=False)  # a bearer token instead of Basic auth
    timeout: float = TIMEOUT

    def headers(self) -> dict[str, str]:
        headers = {"Accept": "application/vnd.schemaregistry.v1+json, application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        elif self.login:
            basic = base64.b64encode(f"{self.login}:{self.password or ''}".encode()).decode("ascii")
            headers["Authorization"] = f"Basic {basic}"
        return headers

    @property
    def described(self) -> str:
        return f"the Schema Registry at {self.url}" + (f" (connection {self.conn_id!r})" if self.conn_id else "")


@dataclass(frozen=True)
class RegisteredSchema:
    """A schema as the registry answers it: its text, type and references (name, subject, version)."""

    schema_id: int
    schema: str
    schema_type: str = "AVRO"  # AVRO (absent in the answer), JSON or PROTOBUF
    references: tuple[tuple[str, str, int], ...] = ()


_SCHEMAS: dict[tuple[str, str], RegisteredSchema] = {}  # (base URL, path) -> schema, for the process's life
_LOCK = threading.Lock()


class RegistryClient:
    """Schemas by id, each fetched once per process (:data:`_SCHEMAS`)."""

    def __init__(self, settings: RegistrySettings) -> None:
        self.settings = settings

    def by_id(self, schema_id: int, fmt: str | None = None) -> RegisteredSchema:
        """The schema of ``schema_id``; ``fmt="serialized"`` asks for a Protobuf schema as a base64
        FileDescriptorProto instead of .proto text."""
        path = f"/schemas/ids/{schema_id}" + (f"?format={fmt}" if fmt else "")
        return self._cached(path, schema_id, f"schema id {schema_id}")

    def by_subject(self, subject: str, version: int, fmt: str | None = None) -> RegisteredSchema:
        """A referenced schema: ``subject`` at ``version``."""
        path = (f"/subjects/{urllib.parse.quote(subject, safe='')}/versions/{version}" +
                (f"?format={fmt}" if fmt else ""))
        return self._cached(path, None, f"subject {subject!r} version {version}")

    def _cached(self, path: str, schema_id: int | None, what: str) -> RegisteredSchema:
        key = (self.settings.url, path)
        found = _SCHEMAS.get(key)
        if found is None:
            with _LOCK:  # one request per schema, also when two threads of a worker ask at once
                found = _SCHEMAS.get(key)
                if found is None:
                    found = _SCHEMAS[key] = _parse(self._get(path, what), schema_id, what)
        return found

    def _get(self, path: str, what: str) -> dict[str, Any]:
        url = self.settings.url.rstrip("/") + path
        request = urllib.request.Request(url, headers=self.settings.headers())
        try:
            with urllib.request.urlopen(request, timeout=self.settings.timeout) as answer:  # noqa: S310 - http(s) only
                body = answer.read()
        except urllib.error.HTTPError as exc:
            raise self._refused(exc, what) from None
        except (urllib.error.URLError, TimeoutError, socket.timeout, ConnectionError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise RegistryUnavailable(
                f"{self.settings.described} cannot be reached while fetching {what}: {reason}. The window failed "
                "and no offset moved; start the registry or fix the connection's host and port, "
                "then retry the window") from None
        try:
            doc = json.loads(body)
        except ValueError:
            raise RegistryUnavailable(f"{self.settings.described} answered {what} with something that is not JSON "
                                      f"({body[:80]!r}): is the connection's URL the registry's?") from None
        if not isinstance(doc, dict):
            raise RegistryUnavailable(f"{self.settings.described} answered {what} with {str(doc)[:80]}, not a schema")
        return doc

    def _refused(self, exc: urllib.error.HTTPError, what: str) -> Exception:
        """A 404 with the registry's error code 4040x is the record's fault (UnknownSchema); anything
        else is the deployment's, a 404 without that code too: a URL that is not the registry's API
        would otherwise send every record to the DLQ."""
        try:
            detail = json.loads(exc.read() or b"{}")
        except ValueError:
            detail = {}
        code = detail.get("error_code") if isinstance(detail, dict) else None
        message = detail.get("message") if isinstance(detail, dict) else None
        if exc.code == 404 and code not in UNKNOWN_CODES:
            return RegistryUnavailable(f"{self.settings.described} answered HTTP 404 without a registry error code "
                                       f"fetching {what}: is the URL the registry's API (Apicurio: "
                                       "http://host:8080/apis/ccompat/v7, in the connection's extra.url)?")
        if code in UNKNOWN_CODES:
            return UnknownSchema(f"{self.settings.described} does not know {what} (HTTP {exc.code}, error_code "
                                 f"{code}: {message or 'not found'})")
        if exc.code in (401, 403):
            return RegistryUnavailable(f"{self.settings.described} refused the credentials fetching {what} (HTTP "
                                       f"{exc.code}): set the connection's login/password, or a bearer token in its "
                                       "extra (bearer_token)")
        return RegistryUnavailable(f"{self.settings.described} failed fetching {what}: HTTP {exc.code} "
                                   f"{message or exc.reason}. The window failed and no offset moved; retry it when "
                                   "the registry answers again")


def _parse(doc: dict[str, Any], schema_id: int | None, what: str) -> RegisteredSchema:
    schema = doc.get("schema")
    if not isinstance(schema, str):
        raise RegistryUnavailable(f"the registry's answer for {what} has no schema text: {str(doc)[:120]}")
    refs = tuple((str(r.get("name")), str(r.get("subject")), int(r.get("version", -1)))
                 for r in doc.get("references") or () if isinstance(r, dict))
    return RegisteredSchema(schema_id if schema_id is not None else int(doc.get("id", -1)), schema,
                            str(doc.get("schemaType") or "AVRO"), refs)


def forget() -> None:
    """Drop the process's schemas (tests that count requests start from none)."""
    with _LOCK:
        _SCHEMAS.clear()
