"""A fake Kubernetes API server: pods and ResourceSlices over HTTPS on loopback.

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
"""

from __future__ import annotations

import json
import ssl
import time
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import kubernetes_validate

from tests.helpers.http_server import LoopbackServer

METADATA_ONLY = "as=PartialObjectMetadataList"
RESOURCE_SLICES = "/apis/resource.k8s.io/v1/resourceslices"


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
        self.dra_served = True
        self.kube_version = "1.34"  # whose OpenAPI schema the slices must satisfy
        self.requests: list[dict[str, Any]] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                owner._answer(self)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(pki / "server.pem"), str(pki / "server.key"))
        super().__init__(Handler, context)

    def _answer(self, handler: BaseHTTPRequestHandler) -> None:
        parsed = urllib.parse.urlsplit(handler.path)
        query = urllib.parse.parse_qs(parsed.query)
        self.requests.append({"path": parsed.path, "query": query, **dict(handler.headers)})
        if self.delay:
            time.sleep(self.delay)
        if handler.headers.get("Authorization") != f"Bearer {self.token}":
            return self._send(handler, 401, self._status("Unauthorized", 401))
        if self.status is not None:
            return self._send(handler, self.status, self._status("Forbidden", self.status))
        if parsed.path == RESOURCE_SLICES and self.dra_served:
            return self._send(handler, 200, json.dumps(self._slice_list(query)).encode())
        if parsed.path != "/api/v1/pods":
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
        return {
            "kind": "ResourceSliceList",
            "apiVersion": "resource.k8s.io/v1",
            "metadata": {"resourceVersion": "1"},
            "items": items,
        }

    @staticmethod
    def _status(reason: str, code: int) -> bytes:
        body = {"kind": "Status", "status": "Failure", "reason": reason, "code": code}
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
