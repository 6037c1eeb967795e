"""One call to NVSentinel's platform connector: ``HealthEventOccurredV1`` on its unix socket.

The message is built from the generated code of NVSentinel's own proto
(exporter/third_party/nvsentinel_health_event); the method's path is the one its
descriptor names. Every call has one deadline; a failed call closes the channel, so the
next one connects anew (the caller waits its backoff first). Failures become
:class:`SendError` with a reason of :data:`FAILURES`; nothing else escapes.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Sequence
from typing import Any

from exporter.catalog.vocabulary import NVSENTINEL_FAILURES
from exporter.outputs.nvsentinel_events import Event

FAILURES = NVSENTINEL_FAILURES
# HealthEvents.version and HealthEvent.version, as NVSentinel's own monitors send them.
VERSION = 1
# gRPC status -> failure reason: the connector not there or not answering, the
# deadline, or an answer that refused the events.
_CODES = {"UNAVAILABLE": "unavailable", "DEADLINE_EXCEEDED": "timeout"}


class SendError(Exception):
    """A call that did not deliver: ``reason`` one of :data:`FAILURES`, ``detail`` in words."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


def _proto() -> Any:
    """The generated module; SendError ``grpc_missing`` without grpc or a new enough protobuf."""
    try:
        import grpc  # noqa: F401 (the caller's next import; checked here once)

        from exporter.third_party.nvsentinel_health_event import health_event_pb2 as pb
    except Exception as exc:
        # ImportError without grpcio; protobuf's VersionError (an Exception) when the
        # installed runtime is older than the gencode.
        raise SendError(
            "grpc_missing",
            f"install accel-exporter[nvsentinel] ({type(exc).__name__}: {exc})",
        ) from None
    return pb


def method_path(pb: Any) -> str:
    """``/datamodels.PlatformConnector/HealthEventOccurredV1``, from the descriptor."""
    service = pb.DESCRIPTOR.services_by_name["PlatformConnector"]
    return f"/{service.full_name}/{service.methods_by_name['HealthEventOccurredV1'].name}"


def message(events: Sequence[Event], agent: str, node: str, now: float) -> Any:
    """The ``HealthEvents`` request carrying ``events``, stamped ``now`` (Unix seconds)."""
    pb = _proto()
    out = pb.HealthEvents(version=VERSION)
    for event in events:
        item = out.events.add(
            version=VERSION,
            agent=agent,
            componentClass=event.component_class,
            checkName=event.check_name,
            isFatal=event.fatal,
            isHealthy=event.healthy,
            message=event.message,
            recommendedAction=pb.RecommendedAction.Value(event.action),
            errorCode=list(event.error_codes),
            entitiesImpacted=[
                pb.Entity(entityType=e.type, entityValue=e.value) for e in event.entities
            ],
            metadata=dict(event.metadata),
            nodeName=node,
            processingStrategy=pb.ProcessingStrategy.Value(event.strategy),
        )
        item.generatedTimestamp.FromNanoseconds(int(now * 1e9))
    return out


class Connection:
    """A channel to the platform connector's socket, made on first use and after a failure."""

    def __init__(self, path: str, timeout: float) -> None:
        self.path = path
        self.timeout = timeout
        self._channel: Any = None
        self._call: Any = None

    def send(self, events: Sequence[Event], agent: str, node: str, now: float) -> None:
        """Deliver ``events`` in one call within the deadline; SendError when not."""
        try:
            mode = os.stat(self.path).st_mode
        except OSError as exc:
            self.close()
            raise SendError("socket_missing", f"{self.path}: {exc.strerror}") from None
        if not stat.S_ISSOCK(mode):
            self.close()
            raise SendError("socket_missing", f"{self.path} is not a socket")
        try:
            request = message(events, agent, node, now)
        except SendError:
            raise
        except Exception as exc:  # an event the proto cannot carry: a bug, counted
            raise SendError("internal", repr(exc)[:300]) from None
        import grpc

        if self._call is None:
            options = [("grpc.enable_retries", 0), ("grpc.max_send_message_length", 4 << 20)]
            self._channel = grpc.insecure_channel(f"unix://{self.path}", options=options)
            self._call = self._channel.unary_unary(
                method_path(_proto()),
                request_serializer=type(request).SerializeToString,
                response_deserializer=lambda raw: raw,  # google.protobuf.Empty: no content
            )
        try:
            self._call(request, timeout=self.timeout)
        except grpc.RpcError as exc:
            self.close()
            code = getattr(exc.code(), "name", "UNKNOWN") if hasattr(exc, "code") else "UNKNOWN"
            details = exc.details() if hasattr(exc, "details") else str(exc)
            raise SendError(_CODES.get(code, "rejected"), f"{code}: {details}"[:300]) from None
        except Exception as exc:  # a serializer or channel fault: not the daemon's problem
            self.close()
            raise SendError("internal", repr(exc)[:300]) from None

    def close(self) -> None:
        """Drop the channel (the next send connects again)."""
        channel, self._channel, self._call = self._channel, None, None
        if channel is not None:
            # Closing a broken channel may fail: nothing is left to do then.
            with contextlib.suppress(Exception):
                channel.close()
