"""The one Kubernetes API client: pod labels, DRA ResourceSlices and the health writer use it.

Blocking: each caller runs it on a thread of its own. Every request

- reads the service-account token again (the kubelet rotates it in place);
- opens a connection of its own and closes it, whatever happens (nothing is kept
  between requests, so nothing grows across reloads);
- trusts only the cluster CA (TLS 1.2 or later, the host name checked);
- has one deadline, ``timeout``, for the whole exchange: connect, TLS handshake,
  send, status line, headers and body (:mod:`exporter.kube_wire`);
- follows no redirect (a 3xx is a failure: the token goes to the API server only)
  and takes no proxy from the environment;
- reads at most ``max_reply_bytes`` of the reply;
- checks the reply: one that is not HTTP, a 2xx whose body is not a JSON object and,
  when the caller names the ``kind`` it asked for, a 2xx of another kind, are
  ``bad_reply``.

Any other HTTP answer is returned as a :class:`Reply` for the caller to judge (404
and 409 are part of reconciling); :func:`check` turns one that is not 2xx into an
``http_<code>`` error. Every failure is a :class:`KubeError` whose ``reason`` is one
of :data:`REASONS` or ``http_<code>``, and whose detail says what to fix.

This module imports nothing heavy: the transport (``http.client``, ``ssl``) is
loaded by the first request, so a node that never asks the API server anything
never pays for it.
"""

from __future__ import annotations

import json
import os
import threading
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from exporter import __version__
from exporter.config.kubernetes import NODE_NAME, KubernetesConfig, url_problem

# Defined below this module so that its transport (exporter.kube_wire) raises it too.
from exporter.errors import KubeError as KubeError

MAX_REPLY_BYTES = 4 * 1024 * 1024
MAX_TOKEN_BYTES = 64 * 1024
# Every reason a KubeError may carry, besides http_<code> (a non-2xx answer checked).
REASONS = (
    "not_configured",  # no API server or node name: the detail names what to set
    "token_unreadable",
    "tls_error",  # the CA, the server's certificate, or the TLS exchange
    "timeout",  # no complete reply within the deadline
    "unreachable",  # no connection
    "bad_reply",  # not HTTP, not a JSON object, not the kind asked for, cut short
    "reply_too_large",
    "dra_not_served",  # the API server serves no resource.k8s.io/v1
)
PODS = "/api/v1/pods"
RESOURCE_SLICES = "/apis/resource.k8s.io/v1/resourceslices"
# Pod metadata only; the plain PodList when the server cannot convert (both have
# items[].metadata).
POD_METADATA = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"


@dataclass(frozen=True)
class Reply:
    """An HTTP answer: its status and its JSON body (empty when a non-2xx one had none)."""

    status: int
    body: dict[str, Any]

    @property
    def ok(self) -> bool:
        """A 2xx status."""
        return 200 <= self.status < 300

    def raise_for_status(self, what: str, hint: str = "") -> Reply:
        """Itself when 2xx, else ``KubeError("http_<code>", "<what>: HTTP <code> <message>")``.

        ``message`` is the Status object's; ``hint`` (what to fix) is appended.
        """
        if self.ok:
            return self
        message = str(self.body.get("message", ""))[:300]
        hint = hint or _HINTS.get(self.status, "")
        detail = f"{what}: HTTP {self.status} {message}".rstrip()
        raise KubeError(f"http_{self.status}", f"{detail} ({hint})" if hint else detail)


_HINTS = {401: "the service-account token was refused"}


def check(reply: Reply, what: str, hint: str = "") -> Reply:
    """:meth:`Reply.raise_for_status` as a function."""
    return reply.raise_for_status(what, hint)


@dataclass(frozen=True)
class KubeAccess:
    """Where the API server is, this node's name, and how to prove who we are."""

    url: str
    node: str
    token_file: str
    ca_file: str


def _url(config: KubernetesConfig, env: Mapping[str, str]) -> str:
    url = config.api_server.rstrip("/")
    if not url:
        host, port = env.get("KUBERNETES_SERVICE_HOST", ""), env.get("KUBERNETES_SERVICE_PORT", "")
        if not host or not port:
            raise KubeError(
                "not_configured",
                "KUBERNETES_SERVICE_HOST/PORT are not set (not in a pod?):"
                " set kubernetes.api_server",
            )
        # An IPv6 service address needs brackets in a URL.
        url = f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"
    problem = url_problem(url)
    if problem:
        raise KubeError("not_configured", f"the API server {url!r} {problem}")
    return url


def _node(config: KubernetesConfig, env: Mapping[str, str]) -> str:
    node = config.node_name or env.get("NODE_NAME", "")
    if not node:
        raise KubeError(
            "not_configured",
            "no node name: set NODE_NAME (downward API spec.nodeName) or kubernetes.node_name",
        )
    if not NODE_NAME.match(node):  # it goes into request paths: nothing else may
        raise KubeError("not_configured", f"the node name {node!r} is not a Kubernetes node name")
    return node


def resolve_access(config: KubernetesConfig, env: Mapping[str, str]) -> KubeAccess:
    """The configured API server and node, or the in-cluster ones from the environment."""
    return KubeAccess(_url(config, env), _node(config, env), config.token_file, config.ca_file)


def _read_token(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as fh:
            token = fh.read(MAX_TOKEN_BYTES).strip()
    except (OSError, UnicodeDecodeError) as exc:
        detail = getattr(exc, "strerror", None) or exc
        raise KubeError(
            "token_unreadable", f"{path}: {detail} (automountServiceAccountToken?)"
        ) from None
    if not token:
        raise KubeError("token_unreadable", f"{path} is empty")
    if not all(33 <= ord(c) <= 126 for c in token):  # it goes into a header as it is
        raise KubeError("token_unreadable", f"{path} holds no bearer token (not printable ASCII)")
    return token


def _document(raw: bytes) -> dict[str, Any] | None:
    """The JSON object ``raw`` holds, or None."""
    try:
        value = json.loads(raw)
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


class KubeClient:
    """Requests to one API server, each under one deadline; see the module docstring.

    ``requests`` counts the requests sent, by method (for /status and benchmarks).
    """

    def __init__(
        self, access: KubeAccess, timeout: float, max_reply_bytes: int = MAX_REPLY_BYTES
    ) -> None:
        from urllib.parse import urlsplit

        self.access = access
        self.timeout = timeout
        self.max_reply_bytes = max_reply_bytes
        self.requests: Counter[str] = Counter()
        self._lock = threading.Lock()
        # Why every request fails before it is sent (from_config could not resolve).
        self.problem: KubeError | None = None
        self._host, self._port, self._prefix = "", 443, ""
        problem = url_problem(access.url)
        if problem:
            self.problem = KubeError("not_configured", f"the API server {access.url!r} {problem}")
            return
        parts = urlsplit(access.url)
        self._host = parts.hostname or ""
        self._port = parts.port or 443
        self._prefix = parts.path.rstrip("/")  # an API server behind a path (Rancher)

    @classmethod
    def from_config(
        cls,
        config: KubernetesConfig,
        timeout: float,
        max_reply_bytes: int = MAX_REPLY_BYTES,
        env: Mapping[str, str] | None = None,
    ) -> KubeClient:
        """The client of the ``kubernetes`` section; never raises.

        When the API server or node cannot be resolved (not in a cluster), every
        request raises that ``not_configured`` error, which names what to set.
        """
        env = os.environ if env is None else env
        problem = None
        parts = []
        for resolve in (_url, _node):
            try:
                parts.append(resolve(config, env))
            except KubeError as exc:
                problem = problem or exc
                parts.append("")
        url, node = parts
        access = KubeAccess(url, node, config.token_file, config.ca_file)
        client = cls(access, timeout, max_reply_bytes)
        client.problem = problem or client.problem
        return client

    @property
    def url(self) -> str:
        """The API server's URL ("" when not configured)."""
        return self.access.url

    @property
    def node(self) -> str:
        """The name of the node this daemon runs on ("" when not configured)."""
        return self.access.node

    def stats(self) -> dict[str, int]:
        """Requests sent so far, by method."""
        with self._lock:
            return dict(self.requests)

    def request(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        content_type: str = "application/json",
        *,
        accept: str = "application/json",
        kind: str | tuple[str, ...] | None = None,
    ) -> Reply:
        """Send one request; its answer, or KubeError (see the module docstring).

        ``path`` is the API path and query (``/api/v1/pods?fieldSelector=...``);
        ``kind``, when given, is what a 2xx answer must be (one of them, for a tuple).
        """
        if self.problem is not None:
            raise KubeError(self.problem.reason, self.problem.detail)
        token = _read_token(self.access.token_file)
        headers = {
            "Authorization": f"Bearer {token}",
            "Accept": accept,
            "User-Agent": f"accel-exporter/{__version__}",
            "Connection": "close",
        }
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = content_type
        from exporter.kube_wire import exchange, tls_context  # the transport, on first use

        context = tls_context(self.access.ca_file)  # read again: the CA may be rotated too
        with self._lock:
            self.requests[method] += 1
        answer = exchange(
            host=self._host,
            port=self._port,
            context=context,
            method=method,
            target=self._prefix + path,
            headers=headers,
            body=data,
            timeout=self.timeout,
            max_bytes=self.max_reply_bytes,
        )
        what = f"{method} {path.partition('?')[0]}"
        if 300 <= answer.status < 400:
            raise KubeError(
                f"http_{answer.status}",
                f"{what}: HTTP {answer.status} to {answer.location[:200]!r}, not followed"
                " (the token goes to the API server only)",
            )
        document = _document(answer.body)
        if not 200 <= answer.status < 300:
            return Reply(answer.status, document or {})
        if document is None:
            shown = answer.body[:80].decode("utf-8", "replace")
            raise KubeError(
                "bad_reply", f"{what}: HTTP {answer.status}, not a JSON object: {shown!r}"
            )
        if kind is not None:
            kinds = (kind,) if isinstance(kind, str) else kind
            if document.get("kind") not in kinds:
                raise KubeError(
                    "bad_reply",
                    f"{what}: HTTP {answer.status} with a {str(document.get('kind'))[:80]!r},"
                    f" not a {' or '.join(kinds)}",
                )
        return Reply(answer.status, document)


def on_node(path: str, node: str) -> str:
    """``path`` narrowed to ``node`` by a field selector, from the API server's watch cache.

    ``resourceVersion=0`` lets the server answer from its cache, so N nodes asking do
    not load etcd.
    """
    from urllib.parse import urlencode

    query = urlencode({"fieldSelector": f"spec.nodeName={node}", "resourceVersion": "0"})
    return f"{path}?{query}"


def _items(reply: Reply, what: str) -> list[Any]:
    items = reply.body.get("items")
    if not isinstance(items, list):
        raise KubeError("bad_reply", f"{what}: the {reply.body.get('kind')} has no items list")
    return items


def _rbac(resource: str) -> str:
    return f"the service account may not list {resource} (RBAC: get, list, watch on {resource})"


def list_pods(client: KubeClient, node: str) -> list[Any]:
    """The items of the pods bound to ``node``: metadata only where the server can."""
    what = "list pods"
    kinds = ("PartialObjectMetadataList", "PodList")
    reply = client.request("GET", on_node(PODS, node), accept=POD_METADATA, kind=kinds)
    check(reply, what, _rbac("pods") if reply.status == 403 else "")
    return _items(reply, what)


def list_resource_slices(client: KubeClient, node: str) -> list[Any]:
    """The items of ``node``'s ResourceSliceList (``resource.k8s.io/v1``).

    A server that serves no such API (Kubernetes before 1.34) answers 404:
    ``dra_not_served``.
    """
    what = "list resourceslices"
    reply = client.request("GET", on_node(RESOURCE_SLICES, node), kind="ResourceSliceList")
    if reply.status == 404:
        raise KubeError(
            "dra_not_served", "the API server serves no resource.k8s.io/v1 (before 1.34)"
        )
    check(reply, what, _rbac("resourceslices.resource.k8s.io") if reply.status == 403 else "")
    return _items(reply, what)
