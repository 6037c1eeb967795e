"""A small Kubernetes API client for the health writer: one JSON request at a time.

Blocking (the writer runs on its own thread), bounded by a timeout on every socket
operation, authenticated with the pod's service-account token (re-read for every
request: the kubelet rotates it) and trusting only the cluster CA. An HTTP answer,
whatever its status, is returned for the caller to judge (404 and 409 are part of
reconciling); only failing to get one raises :class:`KubeError`.
"""

from __future__ import annotations

import json
import socket
import ssl
from dataclasses import dataclass
from typing import Any

MAX_REPLY_BYTES = 4 * 1024 * 1024
MAX_TOKEN_BYTES = 64 * 1024


class KubeError(Exception):
    """No answer from the API server; ``reason`` is a short label for counting."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True)
class Reply:
    """An HTTP answer: its status and its JSON body (empty when none or not JSON)."""

    status: int
    body: dict[str, Any]


@dataclass(frozen=True)
class KubeClient:
    """Where the API server is, how to prove who we are, how long to wait."""

    url: str
    token_file: str
    ca_file: str
    timeout: float

    def _token(self) -> str:
        try:
            with open(self.token_file, encoding="utf-8") as fh:
                token = fh.read(MAX_TOKEN_BYTES).strip()
        except OSError as exc:
            raise KubeError("token_unreadable", f"{self.token_file}: {exc}") from None
        if not token:
            raise KubeError("token_unreadable", f"{self.token_file} is empty")
        return token

    def _tls(self) -> ssl.SSLContext:
        try:
            return ssl.create_default_context(cafile=self.ca_file)
        except (OSError, ssl.SSLError) as exc:
            raise KubeError("tls_error", f"cannot load the CA {self.ca_file}: {exc}") from None

    def request(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        content_type: str = "application/json",
    ) -> Reply:
        """Send one request; the answer, or KubeError when none came in time."""
        # Imported here, as enrich/kube_api.py does: urllib.request costs memory on every
        # node and only a node that writes to Kubernetes needs it.
        import urllib.request

        data = json.dumps(body).encode() if body is not None else None
        headers = {"Authorization": f"Bearer {self._token()}", "Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = content_type
        request = urllib.request.Request(self.url + path, data, headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout, context=self._tls()) as resp:
                return Reply(resp.status, _json(resp.read(MAX_REPLY_BYTES)))
        except urllib.error.HTTPError as exc:
            return Reply(exc.code, _json(exc.read(MAX_REPLY_BYTES)))
        except urllib.error.URLError as exc:
            raise _error(exc.reason) from None
        except (OSError, ssl.SSLError) as exc:
            raise _error(exc) from None


def _json(raw: bytes) -> dict[str, Any]:
    try:
        value = json.loads(raw) if raw else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _error(cause: object) -> KubeError:
    if isinstance(cause, (TimeoutError, socket.timeout)):
        return KubeError("timeout", "the API server did not answer in time")
    if isinstance(cause, ssl.SSLError):
        return KubeError("tls_error", str(cause))
    return KubeError("unreachable", str(cause))
