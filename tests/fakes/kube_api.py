"""A fake Kubernetes API server over HTTPS on loopback: pods, ResourceSlices, DeviceTaintRules,
Node status.

``GET /apis/resource.k8s.io/v1/resourceslices`` serves ``slices`` (each validated
against the official Kubernetes OpenAPI schema when served, so a test cannot feed
the client a slice no API server would hold), honouring the same field selector;
``dra_served`` False answers 404 as a server before 1.34 does.

It does what the real one does for this request: checks the bearer token (401),
can refuse the service account (403, as missing RBAC does), honours
``fieldSelector=spec.nodeName=<node>``, answers ``PartialObjectMetadataList``
when the Accept header asks for it (else a ``PodList`` with spec and status),
and records every request. A test can make it slow, send garbage, pad the reply,
or stream it without a Content-Length.

It can also lie and stall as a broken server or a middlebox would: ``trickle``
sends every reply (status line, headers, body) one byte at a time, that many
seconds apart; ``hang_after_tls`` completes TLS, reads the request and never
answers; ``garbage_for`` and ``wrong_kind`` answer the requests they match (a
method such as ``"PATCH"`` or a path prefix such as ``"/api/v1/nodes/"``) with 200
and a body that is not JSON, or JSON of another kind, without acting on them. Each
stops when the server does.

For the health writer it also keeps ``resource.k8s.io/v1beta2`` DeviceTaintRules
(create, get, list by label selector, JSON merge patch, delete with a uid
precondition) and Node status (strategic merge patch of ``status.conditions``, merged
by type; and GET), validating every object it stores against Kubernetes' own OpenAPI
schema of ``kube_version`` (kubernetes-validate, strict): an invalid one is answered
422, as the real server's validation would. It can refuse one path with a status of
its own (``path_status``), and leave some rules out of its lists (``unlisted``: a
list answered from a cache that has not seen them yet).
"""

from __future__ import annotations

import itertools
import json
import ssl
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any, BinaryIO

import kubernetes_validate

from tests.helpers.http_server import LoopbackServer

METADATA_ONLY = "as=PartialObjectMetadataList"
RULES = "/apis/resource.k8s.io/v1beta2/devicetaintrules"
RESOURCE_SLICES = "/apis/resource.k8s.io/v1/resourceslices"
# What a wrong_kind request is answered: valid JSON, a real kind, never the one asked for.
WRONG_KIND = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": {}}
# The longest a hang_after_tls request is held (the server's stop ends it sooner).
HANG_SECONDS = 120.0


@dataclass
class FakeApiPod:
    namespace: str
    name: str
    node: str
    labels: dict[str, str] = field(default_factory=dict)


class FakeApiServer(LoopbackServer):
    """``with FakeApiServer(pki_dir, token="t") as api: api.pods = [...]; api.url``."""

    def __init__(self, pki: Path, token: str) -> None:
        self.token = token
        self.pods: list[FakeApiPod] = []
        self.status: int | None = None  # answer every request with this code
        self.delay = 0.0
        self.garbage = False
        self.padding = 0  # bytes of annotation per pod, to make replies large
        self.chunked = False  # no Content-Length
        self.metadata_only = True  # whether PartialObjectMetadataList is offered
        self.slices: list[dict[str, Any]] = []
        # The device names each ResourceSlice listing served, in the order served.
        self.slice_listings: list[list[str]] = []
        self.dra_served = True
        self.requests: list[dict[str, Any]] = []
        self.kube_version = "1.36.0"  # whose OpenAPI schema every object must satisfy
        self.rules: dict[str, dict[str, Any]] = {}  # DeviceTaintRules by name
        self.nodes: dict[str, dict[str, Any]] = {}  # Node objects by name
        self.invalid: list[str] = []  # validation errors answered 422
        self.trickle = 0.0  # seconds between two bytes of every reply
        self.hang_after_tls = False  # complete TLS, read the request, never answer
        self.garbage_for: set[str] = set()  # methods or path prefixes answered 200, not JSON
        self.wrong_kind: set[str] = set()  # methods or path prefixes answered 200, a ConfigMap
        self.path_status: dict[str, int] = {}  # path prefix -> answer it with this code
        self.unlisted: set[str] = set()  # rule names its lists leave out
        self._stopping = threading.Event()
        self._uids = itertools.count(1)
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                owner._answer(self)

            def do_POST(self) -> None:
                owner._answer(self)

            def do_PATCH(self) -> None:
                owner._answer(self)

            def do_DELETE(self) -> None:
                owner._answer(self)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(pki / "server.pem"), str(pki / "server.key"))
        super().__init__(Handler, context)

    def __exit__(self, *exc: object) -> None:
        self._stopping.set()  # ends every trickle and hang, so the handler threads end
        super().__exit__(*exc)

    def _matches(self, entries: set[str], method: str, path: str) -> bool:
        return any(entry == method or path.startswith(entry) for entry in entries)

    def _answer(self, handler: BaseHTTPRequestHandler) -> None:
        if self.trickle and not isinstance(handler.wfile, _Trickle):
            handler.wfile = _Trickle(handler.wfile, self.trickle, self._stopping)  # type: ignore[assignment]
        try:
            self._route(handler)
        except OSError:  # the client gave up (a deadline): nothing to answer
            handler.close_connection = True

    def _route(self, handler: BaseHTTPRequestHandler) -> None:
        parsed = urllib.parse.urlsplit(handler.path)
        query = urllib.parse.parse_qs(parsed.query)
        length = int(handler.headers.get("Content-Length") or 0)
        body = json.loads(handler.rfile.read(length)) if length else None
        self.requests.append(
            {
                "method": handler.command,
                "path": parsed.path,
                "query": query,
                "body": body,
                **dict(handler.headers),
            }
        )
        if self.hang_after_tls:
            self._stopping.wait(HANG_SECONDS)
            handler.close_connection = True
            return None
        if self.delay:
            time.sleep(self.delay)
        if handler.headers.get("Authorization") != f"Bearer {self.token}":
            return self._send(handler, 401, self._status("Unauthorized", 401))
        if self.status is not None:
            return self._send(handler, self.status, self._status("Forbidden", self.status))
        for prefix, code in self.path_status.items():
            if parsed.path.startswith(prefix):
                return self._send(handler, code, self._status("Refused", code))
        if self._matches(self.garbage_for, handler.command, parsed.path):
            return self._send(handler, 200, b"<html><body>Gateway says hello</body></html>")
        if self._matches(self.wrong_kind, handler.command, parsed.path):
            return self._send(handler, 200, json.dumps(WRONG_KIND).encode())
        if parsed.path.startswith(RULES) or parsed.path.startswith("/api/v1/nodes/"):
            code, reply = self._object(handler.command, parsed.path, query, body, handler.headers)
            return self._send(handler, code, json.dumps(reply).encode())
        if parsed.path == RESOURCE_SLICES and self.dra_served:
            return self._send(handler, 200, json.dumps(self._slice_list(query)).encode())
        if parsed.path != "/api/v1/pods" or handler.command != "GET":
            return self._send(handler, 404, self._status("NotFound", 404))
        if self.garbage:
            return self._send(handler, 200, b"<html>not the API server</html>")
        node = ""
        for selector in query.get("fieldSelector", []):
            key, _, value = selector.partition("=")
            if key == "spec.nodeName":
                node = value
        pods = [p for p in self.pods if not node or p.node == node]
        metadata = self.metadata_only and METADATA_ONLY in handler.headers.get("Accept", "")
        self._send(handler, 200, json.dumps(self._list(pods, metadata)).encode())

    def _list(self, pods: list[FakeApiPod], metadata_only: bool) -> dict[str, Any]:
        items = []
        for pod in pods:
            meta: dict[str, Any] = {
                "name": pod.name,
                "namespace": pod.namespace,
                "uid": f"uid-{pod.name}",
                "labels": dict(pod.labels),
                "annotations": {"padding": "x" * self.padding} if self.padding else {},
            }
            if metadata_only:
                items.append({"kind": "PartialObjectMetadata", "metadata": meta})
            else:
                items.append(
                    {
                        "metadata": meta,
                        "spec": {"nodeName": pod.node, "containers": [{"name": "c"}]},
                        "status": {"phase": "Running"},
                    }
                )
        kind = "PartialObjectMetadataList" if metadata_only else "PodList"
        return {"kind": kind, "apiVersion": "v1", "metadata": {}, "items": items}

    # -- DeviceTaintRules and Node status --------------------------------------------

    def _valid(self, obj: dict[str, Any]) -> str:
        """ "" when ``obj`` validates against the schema of ``kube_version``, else why not."""
        try:
            kubernetes_validate.validate(obj, self.kube_version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            self.invalid.append(str(exc))
            return str(exc)
        return ""

    def _object(
        self, method: str, path: str, query: dict[str, list[str]], body: Any, headers: Any
    ) -> tuple[int, dict[str, Any]]:
        if path.startswith("/api/v1/nodes/"):
            return self._node_status(method, path, body, headers)
        name = path[len(RULES) + 1 :] if path.startswith(RULES + "/") else ""
        if method == "GET" and not name:
            wanted = dict(
                pair.split("=", 1)
                for selector in query.get("labelSelector", [])
                for pair in selector.split(",")
            )
            items = [
                rule
                for name, rule in self.rules.items()
                if all(rule["metadata"].get("labels", {}).get(k) == v for k, v in wanted.items())
                and name not in self.unlisted
            ]
            return 200, {
                "apiVersion": "resource.k8s.io/v1beta2",
                "kind": "DeviceTaintRuleList",
                "metadata": {},
                "items": items,
            }
        if method == "POST" and not name:
            name = body["metadata"]["name"]
            if name in self.rules:
                return 409, json.loads(self._status("AlreadyExists", 409))
            problem = self._valid(body)
            if problem:
                return 422, {**json.loads(self._status("Invalid", 422)), "message": problem}
            stored = json.loads(json.dumps(body))
            stored["metadata"].update(uid=f"uid-{next(self._uids)}", resourceVersion="1")
            self.rules[name] = stored
            return 201, stored
        rule = self.rules.get(name)
        if rule is None:
            return 404, json.loads(self._status("NotFound", 404))
        if method == "GET":
            return 200, rule
        if method == "PATCH":
            assert headers.get("Content-Type") == "application/merge-patch+json"
            patched = _merge(json.loads(json.dumps(rule)), body)
            problem = self._valid(patched)
            if problem:
                return 422, {**json.loads(self._status("Invalid", 422)), "message": problem}
            self.rules[name] = patched
            return 200, patched
        if method == "DELETE":
            uid = ((body or {}).get("preconditions") or {}).get("uid")
            if uid and uid != rule["metadata"]["uid"]:
                return 409, json.loads(self._status("Conflict", 409))
            del self.rules[name]
            return 200, json.loads(self._status("Success", 200))
        return 405, json.loads(self._status("MethodNotAllowed", 405))

    def _node_status(
        self, method: str, path: str, body: Any, headers: Any
    ) -> tuple[int, dict[str, Any]]:
        parts = path.split("/")  # "", api, v1, nodes, <name>[, status]
        node = self.nodes.get(parts[4])
        if node is not None and method == "GET" and parts[5:] in ([], ["status"]):
            return 200, node
        if node is None or len(parts) != 6 or parts[5] != "status" or method != "PATCH":
            return 404, json.loads(self._status("NotFound", 404))
        assert headers.get("Content-Type") == "application/strategic-merge-patch+json"
        patched = json.loads(json.dumps(node))
        conditions = patched.setdefault("status", {}).setdefault("conditions", [])
        for new in body.get("status", {}).get("conditions", []):  # merged by type
            same = [i for i, c in enumerate(conditions) if c["type"] == new["type"]]
            if same:
                conditions[same[0]] = {**conditions[same[0]], **new}
            else:
                conditions.append(new)
        problem = self._valid(patched)
        if problem:
            return 422, {**json.loads(self._status("Invalid", 422)), "message": problem}
        self.nodes[parts[4]] = patched
        return 200, patched

    # -- ResourceSlices ---------------------------------------------------------------

    def _slice_list(self, query: dict[str, list[str]]) -> dict[str, Any]:
        node = ""
        for selector in query.get("fieldSelector", []):
            key, _, value = selector.partition("=")
            if key == "spec.nodeName":
                node = value
        items = []
        for item in self.slices:
            kubernetes_validate.validate(item, self.kube_version, strict=True)
            if not node or item["spec"].get("nodeName") == node:
                items.append({k: v for k, v in item.items() if k not in ("apiVersion", "kind")})
        self.slice_listings.append(
            [device["name"] for item in items for device in item["spec"].get("devices", [])]
        )
        return {
            "kind": "ResourceSliceList",
            "apiVersion": "resource.k8s.io/v1",
            "metadata": {"resourceVersion": "1"},
            "items": items,
        }

    @staticmethod
    def _status(reason: str, code: int) -> bytes:
        outcome = "Success" if code < 300 else "Failure"
        body = {"kind": "Status", "status": outcome, "reason": reason, "code": code}
        return json.dumps(body).encode()

    def _send(self, handler: BaseHTTPRequestHandler, code: int, body: bytes) -> None:
        handler.send_response(code)
        handler.send_header("Content-Type", "application/json")
        if self.chunked:
            handler.send_header("Transfer-Encoding", "chunked")
            handler.end_headers()
            for start in range(0, len(body), 65536):
                chunk = body[start : start + 65536]
                handler.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
            handler.wfile.write(b"0\r\n\r\n")
        else:
            handler.send_header("Content-Length", str(len(body)))
            handler.end_headers()
            handler.wfile.write(body)


class _Trickle:
    """A handler's output stream that sends one byte per ``seconds`` until ``stopping``."""

    def __init__(self, inner: BinaryIO, seconds: float, stopping: threading.Event) -> None:
        self._inner = inner
        self._seconds = seconds
        self._stopping = stopping

    def write(self, data: bytes) -> int:
        for i in range(len(data)):
            if self._stopping.is_set():
                raise ConnectionAbortedError("the fake API server is stopping")
            self._inner.write(data[i : i + 1])
            self._stopping.wait(self._seconds)
        return len(data)

    def flush(self) -> None:
        self._inner.flush()

    @property
    def closed(self) -> bool:
        return self._inner.closed

    def close(self) -> None:
        self._inner.close()


def _merge(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return patch
    if not isinstance(target, dict):
        target = {}
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        else:
            target[key] = _merge(target.get(key), value)
    return target


def node(name: str, conditions: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A minimal Node object for ``FakeApiServer.nodes``."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "uid": f"uid-node-{name}"},
        "status": {"conditions": list(conditions or [])},
    }
