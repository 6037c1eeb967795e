"""Pod labels and DRA ResourceSlices of this node, from the Kubernetes API server.

Blocking: the workload source runs each listing on its own thread and interval.
Both are lists narrowed to this node by a field selector. The ResourceSlices
(``GET /apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.nodeName=<node>``,
from the watch cache as well) map DRA devices to hardware; a server without
``resource.k8s.io/v1`` (Kubernetes before 1.34) answers 404, ``dra_not_served``.
One request lists the pods bound to this node
(``GET /api/v1/pods?fieldSelector=spec.nodeName=<node>&resourceVersion=0``: served
from the API server's watch cache, so N nodes asking do not load etcd), asking
for metadata only (``PartialObjectMetadataList``; a server that cannot answer
so sends the full ``PodList``, whose items carry the same ``metadata``). It
authenticates with the pod's service-account token, re-read for every request
because the kubelet rotates it, and trusts only the cluster CA.

The reply is read up to ``max_bytes`` and refused beyond. Every failure is an
:class:`AttributionError` whose reason says what to fix: ``api_forbidden``
(RBAC: get/list/watch pods), ``api_unauthorized`` (token), ``api_tls_error``
(CA), ``api_not_configured`` (not in a cluster, or no node name), ...
"""

from __future__ import annotations

import json
import socket
import ssl
import urllib.error
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from exporter.enrich.errors import AttributionError

# Metadata only; the plain list when the server cannot convert (both have items[].metadata).
ACCEPT = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
MAX_TOKEN_BYTES = 64 * 1024


@dataclass(frozen=True)
class ApiAccess:
    """Where the API server is and how to prove who we are."""

    url: str
    node: str
    token_file: str
    ca_file: str


@dataclass(frozen=True)
class PodLabels:
    """The allowlisted labels of one pod (keys the pod does not have are left out)."""

    namespace: str
    pod: str
    labels: Mapping[str, str]


def access(
    api_server: str, node_name: str, token_file: str, ca_file: str, env: Mapping[str, str]
) -> ApiAccess:
    """The configured API server, or the in-cluster one from the environment."""
    url = api_server.rstrip("/")
    if not url:
        host, port = env.get("KUBERNETES_SERVICE_HOST", ""), env.get("KUBERNETES_SERVICE_PORT", "")
        if not host or not port:
            raise AttributionError(
                "api_not_configured",
                "KUBERNETES_SERVICE_HOST/PORT are not set (not in a pod?): set"
                " workload.k8s.pod_labels.api_server",
            )
        # An IPv6 service address needs brackets in a URL.
        url = f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"
    node = node_name or env.get("NODE_NAME", "")
    if not node:
        raise AttributionError(
            "api_not_configured",
            "no node name: set NODE_NAME (downward API spec.nodeName) or"
            " workload.k8s.pod_labels.node_name",
        )
    return ApiAccess(url, node, token_file, ca_file)


def _read_token(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as fh:
            token = fh.read(MAX_TOKEN_BYTES).strip()
    except OSError as exc:
        raise AttributionError(
            "api_token_unreadable", f"{path}: {exc.strerror or exc} (automountServiceAccountToken?)"
        ) from None
    if not token:
        raise AttributionError("api_token_unreadable", f"{path} is empty")
    return token


def _tls(ca_file: str) -> ssl.SSLContext:
    try:
        return ssl.create_default_context(cafile=ca_file)
    except (OSError, ssl.SSLError) as exc:
        raise AttributionError("api_tls_error", f"cannot load the CA {ca_file}: {exc}") from None


PODS = "/api/v1/pods"
RESOURCE_SLICES = "/apis/resource.k8s.io/v1/resourceslices"


def _url(api: ApiAccess, path: str = PODS) -> str:
    query = urllib.parse.urlencode(
        {"fieldSelector": f"spec.nodeName={api.node}", "resourceVersion": "0"}
    )
    return f"{api.url}{path}?{query}"


_HTTP_REASONS = {401: "api_unauthorized", 403: "api_forbidden"}
_HTTP_HINTS = {
    401: "the service-account token was refused",
    403: "the service account may not list {what} (RBAC: get, list, watch on {what})",
}
_WHAT = {PODS: "pods", RESOURCE_SLICES: "resourceslices.resource.k8s.io"}


def _fetch(api: ApiAccess, timeout: float, max_bytes: int, path: str = PODS) -> bytes:
    # Imported here: urllib.request (with hashlib) costs a MiB of resident memory on
    # every node, and only a node with the Kubernetes API in reach asks it anything.
    import urllib.request

    what = _WHAT[path]
    request = urllib.request.Request(
        _url(api, path),
        headers={"Authorization": f"Bearer {_read_token(api.token_file)}", "Accept": ACCEPT},
    )
    context = _tls(api.ca_file)
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=context) as resp:
            length = resp.headers.get("Content-Length", "")
            if length.isdigit() and int(length) > max_bytes:
                raise AttributionError(
                    "api_reply_too_large", f"the {what} list is {length} bytes (limit {max_bytes})"
                )
            body: bytes = resp.read(max_bytes + 1)
    except urllib.error.HTTPError as exc:
        if exc.code == 404 and path == RESOURCE_SLICES:
            raise AttributionError(
                "dra_not_served", "the API server serves no resource.k8s.io/v1 (before 1.34)"
            ) from None
        reason = _HTTP_REASONS.get(exc.code, "api_http_error")
        hint = _HTTP_HINTS.get(exc.code, str(exc.reason)).format(what=what)
        raise AttributionError(reason, f"HTTP {exc.code}: {hint}") from None
    except urllib.error.URLError as exc:
        raise _connect_error(api, exc.reason) from None
    except (OSError, ssl.SSLError) as exc:
        raise _connect_error(api, exc) from None
    if len(body) > max_bytes:
        raise AttributionError("api_reply_too_large", f"the {what} list exceeds {max_bytes} bytes")
    return body


def _connect_error(api: ApiAccess, cause: object) -> AttributionError:
    if isinstance(cause, ssl.SSLError):
        return AttributionError("api_tls_error", f"{api.url}: {cause}")
    if isinstance(cause, (socket.timeout, TimeoutError)):
        return AttributionError("api_timeout", f"{api.url} did not answer in time")
    return AttributionError("api_connect_failed", f"{api.url}: {cause}")


def _items(body: bytes, what: str) -> list[Any]:
    try:
        document = json.loads(body)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise AttributionError(
            "api_bad_reply", f"the {what} list is not JSON: {exc}"[:300]
        ) from None
    items = document.get("items") if isinstance(document, dict) else None
    if not isinstance(items, list):
        raise AttributionError("api_bad_reply", "the reply has no items list")
    return items


def parse_pods(body: bytes, keys: Sequence[str]) -> list[PodLabels]:
    """The allowlisted labels of each pod in a PodList or PartialObjectMetadataList."""
    items = _items(body, "pod")
    wanted = frozenset(keys)
    out = []
    for item in items:
        meta = item.get("metadata") if isinstance(item, dict) else None
        if not isinstance(meta, dict):
            continue
        namespace, name = meta.get("namespace"), meta.get("name")
        if not isinstance(namespace, str) or not isinstance(name, str):
            continue
        labels = meta.get("labels")
        found = (
            {k: v for k, v in labels.items() if k in wanted and isinstance(v, str)}
            if isinstance(labels, dict)
            else {}
        )
        out.append(PodLabels(namespace, name, found))
    return out


def list_pod_labels(
    api: ApiAccess, timeout: float, max_bytes: int, keys: Sequence[str]
) -> list[PodLabels]:
    """The allowlisted labels of every pod bound to this node."""
    return parse_pods(_fetch(api, timeout, max_bytes), keys)


def list_resource_slices(api: ApiAccess, timeout: float, max_bytes: int) -> list[Any]:
    """The ``items`` of this node's ResourceSliceList (parsed by :mod:`exporter.enrich.dra`)."""
    return _items(_fetch(api, timeout, max_bytes, RESOURCE_SLICES), "ResourceSlice")
