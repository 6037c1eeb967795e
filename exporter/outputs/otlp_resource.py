"""The attributes of the OTLP Resource: which service pushes, from which host, node and pod.

Precedence, lowest first:

1. detection: ``service.name`` = accel-exporter, ``service.version``, ``host.name``
   (the Kubernetes node name when ``NODE_NAME`` is set, since a pod's own
   hostname is the pod's, else the machine's hostname), ``k8s.node.name``,
   ``k8s.pod.name``, ``k8s.namespace.name``, ``k8s.pod.uid`` from the downward-API
   variables ``NODE_NAME``, ``POD_NAME``, ``POD_NAMESPACE``, ``POD_UID``, and the
   ``telemetry.sdk.*`` attributes;
2. ``OTEL_RESOURCE_ATTRIBUTES`` (discarded whole, with a warning, when malformed,
   as the spec asks);
3. ``OTEL_SERVICE_NAME`` (the spec: it wins over a ``service.name`` in
   ``OTEL_RESOURCE_ATTRIBUTES``);
4. ``outputs.otlp.resource_attributes``: explicit configuration wins.

Pure: reads only the mapping it is given.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Callable, Mapping
from importlib import metadata
from urllib.parse import unquote

from exporter import __version__

SERVICE_NAME = "accel-exporter"
DOWNWARD_API = (
    ("NODE_NAME", "k8s.node.name"),
    ("POD_NAME", "k8s.pod.name"),
    ("POD_NAMESPACE", "k8s.namespace.name"),
    ("POD_UID", "k8s.pod.uid"),
)
_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")


def _decode(text: str) -> str:
    if _BAD_ESCAPE.search(text):
        raise ValueError(f"bad percent-encoding in {text!r}")
    return unquote(text)


def parse_resource_attributes(text: str) -> dict[str, str]:
    """``key1=value1,key2=value2`` with percent-encoded parts; ValueError when malformed."""
    out: dict[str, str] = {}
    for item in text.split(","):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        key = _decode(key.strip())
        if not sep or not key:
            raise ValueError(f"{item.strip()!r} is not key=value")
        out[key] = _decode(value.strip())
    return out


def _sdk_version() -> str:
    try:
        return metadata.version("opentelemetry-sdk")
    except metadata.PackageNotFoundError:
        return "unknown"


def resource_attributes(
    configured: Mapping[str, str],
    env: Mapping[str, str],
    hostname: Callable[[], str] = socket.gethostname,
) -> tuple[dict[str, str], list[str]]:
    """The Resource attributes and any warnings about the environment."""
    warnings: list[str] = []
    attributes = {
        "service.name": SERVICE_NAME,
        "service.version": __version__,
        "telemetry.sdk.name": "opentelemetry",
        "telemetry.sdk.language": "python",
        "telemetry.sdk.version": _sdk_version(),
    }
    for var, key in DOWNWARD_API:
        value = env.get(var, "").strip()
        if value:
            attributes[key] = value
    attributes["host.name"] = attributes.get("k8s.node.name") or hostname()
    raw = env.get("OTEL_RESOURCE_ATTRIBUTES", "").strip()
    if raw:
        try:
            attributes.update(parse_resource_attributes(raw))
        except ValueError as exc:
            warnings.append(f"OTEL_RESOURCE_ATTRIBUTES ignored: {exc}")
    service = env.get("OTEL_SERVICE_NAME", "").strip()
    if service:
        attributes["service.name"] = service
    attributes.update(configured)
    return attributes, warnings
