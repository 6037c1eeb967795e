"""The wire side of the OTLP output: the SDK's gRPC or HTTP exporter, and its diagnostics.

Every setting is passed explicitly (resolved by :mod:`exporter.config.otlp_env`),
so the SDK's own environment fallbacks never disagree with what /status shows.
The SDK reports why an export failed only through stdlib ``logging``, once per
attempt; :class:`SdkLogCapture` keeps those lines out of stderr (the output logs
failures itself, at a limited rate), forwards them to structlog at debug level,
and hands each message to the export thread that caused it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import requests
from opentelemetry.sdk.metrics.export import MetricExporter

from exporter import log
from exporter.config.otlp_env import OtlpSettings

SDK_LOGGER = "opentelemetry"


def _read(path: str) -> bytes | None:
    if not path:
        return None
    with open(path, "rb") as fh:
        return fh.read()


def build_exporter(settings: OtlpSettings) -> MetricExporter:
    """The SDK exporter for ``settings`` (OSError when a certificate file cannot be read)."""
    headers = dict(settings.headers)
    if settings.protocol == "grpc":
        import grpc
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import (
            OTLPMetricExporter as GrpcExporter,
        )

        credentials = None
        if settings.secure:
            credentials = grpc.ssl_channel_credentials(
                root_certificates=_read(settings.certificate_file),
                private_key=_read(settings.client_key_file),
                certificate_chain=_read(settings.client_certificate_file),
            )
        scheme = "https" if settings.secure else "http"
        return GrpcExporter(
            endpoint=f"{scheme}://{settings.endpoint}",
            insecure=not settings.secure,
            credentials=credentials,
            headers=headers,
            timeout=settings.timeout,
            compression=(
                grpc.Compression.Gzip
                if settings.compression == "gzip"
                else grpc.Compression.NoCompression
            ),
        )
    from opentelemetry.exporter.otlp.proto.http import Compression
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import (
        OTLPMetricExporter as HttpExporter,
    )

    return HttpExporter(
        endpoint=settings.endpoint,
        session=PinnedVerifySession() if settings.certificate_file else None,
        certificate_file=settings.certificate_file or None,
        client_key_file=settings.client_key_file or None,
        client_certificate_file=settings.client_certificate_file or None,
        headers=headers,
        timeout=settings.timeout,
        compression=Compression.Gzip
        if settings.compression == "gzip"
        else Compression.NoCompression,
    )


class PinnedVerifySession(requests.Session):
    """A requests session whose own CA file the environment cannot replace.

    requests lets ``REQUESTS_CA_BUNDLE`` / ``CURL_CA_BUNDLE`` override a session's
    ``verify`` (psf/requests#3829), and many container images set them: the
    configured ``certificate_file`` would then be silently ignored and a private
    collector CA rejected. Proxies and the rest of the environment still apply.
    """

    def merge_environment_settings(
        self, url: Any, proxies: Any, stream: Any, verify: Any, cert: Any
    ) -> Any:
        """The usual merge, except that the session's own ``verify`` stays."""
        merged = super().merge_environment_settings(url, proxies, stream, verify, cert)
        if verify is None:
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
