"""A TEST STAND-IN for a Schema Registry: an in-process HTTP server that serves only the part of
Confluent Schema Registry's REST API that confluent-kafka's serializers (AvroSerializer,
JSONSerializer, ProtobufSerializer) and cdcflow (connectors/registry/client.py) call. It is not a
registry: no compatibility checks, no persistence, no modes, no contexts, no deletes.

No Schema Registry server can be installed here (Confluent's, Apicurio's and Karapace are not in
the package registries this project reaches), so the tests produce with the real serializers
against this stand-in. Endpoints, with the shapes of Confluent's API reference
(docs.confluent.io/platform/current/schema-registry/develop/api.html):

* ``POST /subjects/{subject}/versions`` {schema, schemaType?, references?} -> {id}: registers (the
  same schema text, type and references keep their id, across subjects, as the registry does);
* ``POST /subjects/{subject}`` -> {subject, id, version, schema, schemaType?}: looks a schema up;
  404 with error_code 40401 (subject) / 40403 (schema) when unknown;
* ``GET /schemas/ids/{id}`` -> {schema, schemaType? (left out for AVRO), references?}; 404 with
  error_code 40403 when unknown. ``?format=serialized`` answers the text as registered: the Protobuf
  serializer registers a base64 FileDescriptorProto, which is what the registry answers for that
  format (it answers .proto text without it, which this stand-in cannot write);
* ``GET /subjects/{subject}/versions/{version|latest}``, ``GET /subjects/{subject}/versions``,
  ``GET /subjects``, ``GET /schemas/types``, ``GET|PUT /config[/{subject}]``;
* anything else answers 404 with an error code, as a registry without that feature does:
  confluent-kafka 2.16's serializers first ask ``GET /associations/resources/-/{topic}`` (Confluent
  Cloud's data contracts) and go on without them on a 404.

Test controls: ``requests`` counts every request by (method, path without the query); ``fail_with``
makes every request answer that HTTP status; ``stop`` closes the socket (connection refused);
``credentials`` / ``token`` make it require Basic auth / a bearer token (401 otherwise).
"""

from __future__ import annotations

import base64
import json
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlsplit


class RegistryStandIn:
    """The stand-in's state and server (``url`` once started)."""

    def __init__(self, credentials: tuple[str, str] | None = None, token: str | None = None) -> None:
        self.credentials, self.token = credentials, token
        self.schemas: dict[int, dict[str, Any]] = {}  # id -> {schema, schemaType, references}
        self.subjects: dict[str, list[int]] = {}  # subject -> ids by version (version = index + 1)
        self.requests: Counter[tuple[str, str]] = Counter()
        self.failing: int | None = None
        self.lock = threading.Lock()
        self.server: ThreadingHTTPServer | None = None
        self.url = ""

    # -- lifecycle -----------------------------------------------------------------------------------
    def start(self, port: int = 0) -> RegistryStandIn:
        standin = self

        class Handler(_Handler):
            registry = standin

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, name="registry-standin", daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    def fail_with(self, status: int | None) -> None:
        self.failing = status

    def gets_of_ids(self) -> Counter[str]:
        """GET /schemas/ids/{id} requests, by id."""
        return Counter({p.rsplit("/", 1)[1]: n for (m, p), n in self.requests.items()
                        if m == "GET" and p.startswith("/schemas/ids/")})

    # -- the registry ----------------------------------------------------------------------------------
    def register(self, subject: str, body: dict[str, Any]) -> int:
        entry = {"schema": body["schema"], "schemaType": body.get("schemaType", "AVRO") or "AVRO",
                 "references": body.get("references") or []}
        with self.lock:
            found = next((i for i, s in self.schemas.items() if s == entry), None)
            if found is None:
                found = len(self.schemas) + 1
                self.schemas[found] = entry
            versions = self.subjects.setdefault(subject, [])
            if found not in versions:
                versions.append(found)
            return found

    def version(self, subject: str, version: str) -> dict[str, Any] | None:
        versions = self.subjects.get(subject)
        if not versions:
            return None
        index = len(versions) if version in ("latest", "-1") else int(version)
        if not 1 <= index <= len(versions):
            return None
        return self.answer(versions[index - 1], subject, index)

    def answer(self, schema_id: int, subject: str | None = None, version: int | None = None) -> dict[str, Any]:
        entry = self.schemas[schema_id]
        out: dict[str, Any] = {"schema": entry["schema"]}
        if subject is not None:
            out = {"subject": subject, "version": version, "id": schema_id, **out}
        if entry["schemaType"] != "AVRO":
            out["schemaType"] = entry["schemaType"]
        if entry["references"]:
            out["references"] = entry["references"]
        return out


class _Handler(BaseHTTPRequestHandler):
    registry: RegistryStandIn
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet in tests
        return

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self._serve("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._serve("POST")

    def do_PUT(self) -> None:  # noqa: N802
        self._serve("PUT")

    def _serve(self, method: str) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}") if length else {}
        path = urlsplit(self.path).path.rstrip("/")
        self.registry.requests[(method, path)] += 1
        if self.registry.failing is not None:
            return self._send(self.registry.failing, {"error_code": self.registry.failing * 100,
                                                      "message": "stand-in told to fail"})
        if not self._authorized():
            return self._send(401, {"error_code": 401, "message": "Unauthorized"})
        status, doc = self._route(method, [unquote(p) for p in path.split("/")[1:]], body)
        self._send(status, doc)

    def _authorized(self) -> bool:
        header = self.headers.get("Authorization") or ""
        if self.registry.token is not None:
            return header == f"Bearer {self.registry.token}"
        if self.registry.credentials is not None:
            user, password = self.registry.credentials
            return header == "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        return True

    def _route(self, method: str, parts: list[str], body: dict[str, Any]) -> tuple[int, Any]:
        reg = self.registry
        if method == "GET" and parts[:2] == ["schemas", "ids"] and len(parts) == 3:
            schema_id = int(parts[2])
            if schema_id not in reg.schemas:
                return 404, {"error_code": 40403, "message": "Schema not found"}
            return 200, reg.answer(schema_id)
        if method == "GET" and parts == ["schemas", "types"]:
            return 200, ["JSON", "PROTOBUF", "AVRO"]
        if method == "GET" and parts == ["subjects"]:
            return 200, sorted(reg.subjects)
        if parts[:1] == ["subjects"] and len(parts) >= 2:
            return self._subject(method, parts[1], parts[2:], body)
        if parts[:1] == ["config"]:
            return 200, {"compatibilityLevel": "BACKWARD"} if method == "GET" else {"compatibility": "BACKWARD"}
        return 404, {"error_code": 404, "message": f"the stand-in does not serve {method} /{'/'.join(parts)}"}

    def _subject(self, method: str, subject: str, rest: list[str], body: dict[str, Any]) -> tuple[int, Any]:
        reg = self.registry
        if method == "POST" and rest == ["versions"]:
            return 200, {"id": reg.register(subject, body)}
        if method == "POST" and not rest:
            if subject not in reg.subjects:
                return 404, {"error_code": 40401, "message": f"Subject '{subject}' not found."}
            for version, schema_id in enumerate(reg.subjects[subject], 1):
                entry = reg.schemas[schema_id]
                if entry["schema"] == body.get("schema") and entry["schemaType"] == (body.get("schemaType") or "AVRO"):
                    return 200, reg.answer(schema_id, subject, version)
            return 404, {"error_code": 40403, "message": "Schema not found"}
        if method == "GET" and rest == ["versions"]:
            if subject not in reg.subjects:
                return 404, {"error_code": 40401, "message": f"Subject '{subject}' not found."}
            return 200, list(range(1, len(reg.subjects[subject]) + 1))
        if method == "GET" and len(rest) == 2 and rest[0] == "versions":
            found = reg.version(subject, rest[1])
            if found is None:
                return 404, {"error_code": 40402 if subject in reg.subjects else 40401, "message": "Version not found."}
            return 200, found
        return 404, {"error_code": 404, "message": f"the stand-in does not serve {method} subjects/{subject}/{'/'.join(rest)}"}

    def _send(self, status: int, doc: Any) -> None:
        data = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
