"""The wire side of the OTLP output: the SDK's gRPC or HTTP exporter, and its diagnostics.

What ``outputs.otlp`` sets is passed to the exporter explicitly; what it leaves
unset is passed as None, so the SDK reads its own ``OTEL_EXPORTER_OTLP_*``
variables (see :mod:`exporter.config.otlp` for the few it does not read).
The SDK reports why an export failed only through stdlib ``logging``, once per
attempt; :class:`SdkLogCapture` keeps those lines out of stderr (the output logs
failures itself, at a limited rate), forwards them to structlog at debug level,
and hands each message to the export thread that caused it.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Mapping
from typing import Any

import requests
from opentelemetry.sdk.metrics.export import AggregationTemporality, MetricExporter

from exporter import log
from exporter.config.otlp import OtlpSettings, environment_ca

SDK_LOGGER = "opentelemetry"


def _read(path: str | None) -> bytes | None:
    if not path:
        return None
    with open(path, "rb") as fh:
        return fh.read()


def preferred_temporality(temporality: str | None) -> dict[type, AggregationTemporality] | None:
    """The spec's preset for a configured temporality; None lets the SDK read its variable.

    Complete, so that no instrument class falls back to the environment's preset.
    """
    if temporality is None:
        return None
    from opentelemetry.sdk.metrics import (
        Counter,
        Histogram,
        ObservableCounter,
        ObservableGauge,
        ObservableUpDownCounter,
        UpDownCounter,
    )

    delta = AggregationTemporality.DELTA
    cumulative = AggregationTemporality.CUMULATIVE
    sums = delta if temporality == "delta" else cumulative
    return {
        Counter: sums,
        ObservableCounter: sums,
        Histogram: sums,
        UpDownCounter: cumulative,
        ObservableUpDownCounter: cumulative,
        ObservableGauge: cumulative,
    }


def temporality_of(exporter: MetricExporter) -> str:
    """What ``exporter`` asks for, as the spec's preset name (cumulative, delta, lowmemory).

    The SDK's own periodic reader reads the same attribute: it is where the
    exporter keeps the configured or ``..._TEMPORALITY_PREFERENCE`` choice.
    """
    from opentelemetry.sdk.metrics import Histogram, ObservableCounter

    prefs: Mapping[type, AggregationTemporality] = (
        getattr(exporter, "_preferred_temporality", None) or {}
    )
    delta = AggregationTemporality.DELTA
    if prefs.get(ObservableCounter) is delta:
        return "delta"
    if prefs.get(Histogram) is delta:
        return "lowmemory"
    return "cumulative"


def build_exporter(settings: OtlpSettings, env: Mapping[str, str] = os.environ) -> MetricExporter:
    """The SDK exporter for ``settings`` (OSError when a certificate file cannot be read)."""
    headers = dict(settings.headers) or None
    temporality = preferred_temporality(settings.temporality)
    if settings.protocol == "grpc":
        import grpc
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import (
            OTLPMetricExporter as GrpcExporter,
        )

        credentials = None
        if settings.client_certificate_file or settings.certificate_file:
            # Given no credentials, the SDK builds them from the environment only, so a
            # configured client certificate would lose a CA set there, and vice versa.
            credentials = grpc.ssl_channel_credentials(
                root_certificates=_read(settings.certificate_file or environment_ca(env)),
                private_key=_read(settings.client_key_file),
                certificate_chain=_read(settings.client_certificate_file),
            )
        compression = None
        if settings.compression is not None:
            compression = (
                grpc.Compression.Gzip
                if settings.compression == "gzip"
                else grpc.Compression.NoCompression
            )
        return GrpcExporter(
            endpoint=settings.endpoint,
            insecure=settings.insecure,
            credentials=credentials,
            headers=headers,
            timeout=settings.timeout,
            compression=compression,
            preferred_temporality=temporality,
        )
    from opentelemetry.exporter.otlp.proto.http import Compression
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import (
        OTLPMetricExporter as HttpExporter,
    )

    return HttpExporter(
        endpoint=settings.endpoint,
        session=PinnedVerifySession(),
        certificate_file=settings.certificate_file,
        client_key_file=settings.client_key_file,
        client_certificate_file=settings.client_certificate_file,
        headers=headers,
        timeout=settings.timeout,
        compression=None
        if settings.compression is None
        else Compression.Gzip
        if settings.compression == "gzip"
        else Compression.NoCompression,
        preferred_temporality=temporality,
    )


class PinnedVerifySession(requests.Session):
    """A requests session whose own CA file the environment cannot replace.

    requests lets ``REQUESTS_CA_BUNDLE`` / ``CURL_CA_BUNDLE`` override a session's
    ``verify`` (psf/requests#3829), and many container images set them: the
    collector CA (configured, or the SDK's ``OTEL_EXPORTER_OTLP_*CERTIFICATE``,
    which the SDK puts in ``verify``) would then be silently ignored and a
    private collector CA rejected. Without a CA file, proxies, those variables
    and the system trust store apply as usual.
    """

    def merge_environment_settings(
        self, url: Any, proxies: Any, stream: Any, verify: Any, cert: Any
    ) -> Any:
        """The usual merge, except that a CA file set on the session stays."""
        merged = super().merge_environment_settings(url, proxies, stream, verify, cert)
        if verify is None and isinstance(self.verify, str):
            merged["verify"] = self.verify
        return merged


class SdkLogCapture(logging.Handler):
    """Routes the SDK's stdlib log records: debug lines in our log, messages to listeners."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self._listeners: dict[int, Callable[[str], None]] = {}
        self._log = log.get(output="otlp")

    def listen(self, thread: int, listener: Callable[[str], None]) -> None:
        """Give records emitted on ``thread`` to ``listener``."""
        self._listeners[thread] = listener

    def forget(self, thread: int) -> None:
        """Stop routing records of ``thread``."""
        self._listeners.pop(thread, None)

    def emit(self, record: logging.LogRecord) -> None:
        """Forward one record; never raises."""
        try:
            message = record.getMessage()
            self._log.debug(
                "otel sdk", sdk_logger=record.name, sdk_level=record.levelname, message=message
            )
            listener = self._listeners.get(record.thread or 0)
            if listener is not None:
                listener(message)
        except Exception:  # a log handler must not break the export it reports on
            self.handleError(record)


_capture: SdkLogCapture | None = None
_capture_lock = threading.Lock()


def sdk_log_capture() -> SdkLogCapture:
    """The process-wide capture, installed on the ``opentelemetry`` logger once."""
    global _capture
    with _capture_lock:
        if _capture is None:
            _capture = SdkLogCapture()
            logger = logging.getLogger(SDK_LOGGER)
            logger.addHandler(_capture)
            logger.setLevel(logging.WARNING)
            # Without this the records also reach Python's last-resort stderr handler.
            logger.propagate = False
        return _capture
