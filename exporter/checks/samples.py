"""The data a check judges: metric samples and device verdicts, from a daemon or one poll.

Two paths, the same parsers: ``--url`` asks a running daemon (cheap, and exactly
what Prometheus sees: its ``/metrics``, or for the health check its ``/v1/devices``,
the verdict records themselves); ``--local`` starts the enabled sources in this
process, polls each once and renders the same exposition and the same devices
document (for nodes without a daemon, e.g. a Slurm prolog before the service is up;
it takes a worker bootstrap).
"""

from __future__ import annotations

import base64
import json
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

Labels = dict[str, str]


class SampleError(Exception):
    """The metrics could not be fetched or parsed; the check is UNKNOWN (or CRITICAL)."""


@dataclass
class Samples:
    """Samples by sample name (counters with their ``_total``), and how long fetching took.

    ``devices`` holds the entries of the ``/v1/devices`` document (docs/health-api.md)
    where the check asked for it (or the poll was local), else None.
    """

    by_name: dict[str, list[tuple[Labels, float]]] = field(default_factory=dict)
    fetch_seconds: float = 0.0
    devices: list[dict[str, Any]] | None = None

    def get(self, name: str, **match: str) -> list[tuple[Labels, float]]:
        """Samples of ``name`` whose labels include ``match``."""
        return [
            (labels, value)
            for labels, value in self.by_name.get(name, [])
            if all(labels.get(k) == v for k, v in match.items())
        ]

    def has(self, name: str) -> bool:
        """True when the family has at least one sample."""
        return bool(self.by_name.get(name))

    def __iter__(self) -> Iterator[str]:
        return iter(self.by_name)


def parse(text: str) -> Samples:
    """Parse Prometheus text exposition; SampleError when it is not valid."""
    # Here, not at the top: the health check reads JSON only and never needs it.
    from prometheus_client.parser import text_string_to_metric_families

    out = Samples()
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                out.by_name.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    except (ValueError, TypeError, IndexError) as exc:
        raise SampleError(f"the metrics are not valid exposition: {exc}") from None
    return out


@dataclass(frozen=True)
class HttpOptions:
    """How to reach a daemon: URL, deadline, TLS trust, basic-auth credentials."""

    url: str
    timeout: float = 10.0
    ca_file: str = ""
    insecure: bool = False
    basic_auth: tuple[str, str] | None = None


def metrics_url(url: str) -> str:
    """``http://host:port`` -> ``http://host:port/metrics``; a full path is kept."""
    base = url.rstrip("/")
    path = base.split("://", 1)[-1]
    return base if "/" in path else base + "/metrics"


DEVICES_PATH = "/v1/devices"


def devices_url(url: str) -> str:
    """The ``/v1/devices`` beside the daemon ``url`` names (``.../metrics`` -> ``.../v1/devices``).

    A daemon behind a path prefix (``https://proxy/node7/metrics``) keeps its prefix.
    """
    base = url.rstrip("/")
    if base.endswith(DEVICES_PATH):
        return base
    if base.endswith("/metrics"):
        base = base[: -len("/metrics")]
    return base + DEVICES_PATH


def _tls_context(options: HttpOptions) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=options.ca_file or None)
    if options.insecure:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


def _get(url: str, accept: str, options: HttpOptions) -> bytes:
    """GET ``url`` from the daemon; its body, or SampleError naming what failed."""
    request = urllib.request.Request(url, headers={"Accept": accept})
    if options.basic_auth is not None:
        user, password = options.basic_auth
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        context = _tls_context(options) if request.full_url.startswith("https:") else None
        with urllib.request.urlopen(request, timeout=options.timeout, context=context) as resp:
            body: bytes = resp.read()
    except urllib.error.HTTPError as exc:
        raise SampleError(f"{request.full_url} answered HTTP {exc.code}") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        # OSError covers an unreadable --ca-file and every ssl.SSLError.
        reason = getattr(exc, "reason", exc)
        raise SampleError(f"cannot read {request.full_url}: {reason}") from None
    return body


def fetch(options: HttpOptions) -> Samples:
    """GET the daemon's /metrics and parse it; SampleError naming what failed."""
    started = time.monotonic()
    body = _get(metrics_url(options.url), "text/plain", options)
    samples = parse(body.decode("utf-8", "replace"))
    samples.fetch_seconds = time.monotonic() - started
    return samples


def parse_devices(body: bytes, where: str) -> list[dict[str, Any]]:
    """The device entries of a ``/v1/devices`` document; SampleError when it is none."""
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise SampleError(f"{where} is not JSON: {exc}") from None
    entries = doc.get("devices") if isinstance(doc, dict) else None
    if (
        not isinstance(doc, dict)
        or doc.get("kind") != "DeviceHealthList"
        or not isinstance(entries, list)
        or not all(isinstance(e, dict) for e in entries)
    ):
        raise SampleError(f"{where} is not a DeviceHealthList document")
    return entries


def fetch_devices(options: HttpOptions) -> Samples:
    """GET the daemon's /v1/devices (the verdict records); SampleError naming what failed."""
    started = time.monotonic()
    url = devices_url(options.url)
    entries = parse_devices(_get(url, "application/json", options), url)
    return Samples(fetch_seconds=time.monotonic() - started, devices=entries)


def poll_local(config: object) -> Samples:
    """Poll every enabled source once in this process: its exposition and devices document.

    The devices come from the verdict records of this poll, as a daemon's
    ``/v1/devices`` would give them.
    """
    import asyncio

    from exporter.commands.once import poll_all
    from exporter.config import Config
    from exporter.documents import devices_document
    from exporter.outputs.prometheus import Exposition
    from exporter.sources.registry import build_sources, catalog_for
    from exporter.store import Store

    assert isinstance(config, Config)
    started = time.monotonic()
    store = Store(catalog=catalog_for(config))
    sources = build_sources(config)
    asyncio.run(poll_all(sources, store))
    body, _ = Exposition(store, process_metrics=False).render(None, None)
    samples = parse(body.decode())
    samples.devices = devices_document(store, sources)["devices"]
    samples.fetch_seconds = time.monotonic() - started
    return samples
