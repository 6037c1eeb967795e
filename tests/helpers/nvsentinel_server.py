"""A stand-in for NVSentinel's platform connector: a real gRPC server on a unix socket.

Built from the generated code of NVSentinel's own ``health_event.proto``
(exporter/third_party/nvsentinel_health_event): the service and method names come from
its descriptor, the request is decoded with its ``HealthEvents``. It records every request, and can
answer normally, refuse (an error status) or hang (never reply until released).
"""

from __future__ import annotations

import threading
import time
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import empty_pb2

from exporter.third_party.nvsentinel_health_event import health_event_pb2 as pb

OK, REFUSE, HANG = "ok", "refuse", "hang"


class FakePlatformConnector:
    """``PlatformConnector.HealthEventOccurredV1`` on ``path``; use as a context manager."""

    def __init__(self, path: Path, mode: str = OK) -> None:
        self.path = path
        self.mode = mode
        self.requests: list[Any] = []  # HealthEvents, in arrival order (answered or not)
        self.calls = 0
        self.hanging = 0
        self._release = threading.Event()
        self._lock = threading.Lock()
        self._server: Any = None

    # -- the service ----------------------------------------------------------------

    def _handle(self, request: Any, context: Any) -> Any:
        with self._lock:
            self.calls += 1
            mode = self.mode
        if mode == HANG:
            with self._lock:
                self.hanging += 1
            # Never answers on its own: the client's deadline ends the call.
            self._release.wait(60.0)
            return empty_pb2.Empty()
        if mode == REFUSE:
            context.abort(grpc.StatusCode.INTERNAL, "store unavailable")
        with self._lock:
            self.requests.append(request)
        return empty_pb2.Empty()

    def start(self) -> FakePlatformConnector:
        """Listen on the socket (the file appears) and serve."""
        service = pb.DESCRIPTOR.services_by_name["PlatformConnector"]
        method = service.methods_by_name["HealthEventOccurredV1"]
        handler = grpc.method_handlers_generic_handler(
            service.full_name,
            {
                method.name: grpc.unary_unary_rpc_method_handler(
                    self._handle,
                    request_deserializer=pb.HealthEvents.FromString,
                    response_serializer=empty_pb2.Empty.SerializeToString,
                )
            },
        )
        self._release.clear()
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        self._server.add_generic_rpc_handlers((handler,))
        self._server.add_insecure_port(f"unix://{self.path}")
        self._server.start()
        return self

    def stop(self) -> None:
        """Release hung calls, stop serving, remove the socket file."""
        self._release.set()
        if self._server is not None:
            self._server.stop(0).wait(5.0)
            self._server = None
        self.path.unlink(missing_ok=True)

    def __enter__(self) -> FakePlatformConnector:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- what arrived ---------------------------------------------------------------

    def events(self) -> list[Any]:
        """Every HealthEvent of every answered request, in order."""
        with self._lock:
            return [event for request in self.requests for event in request.events]

    def set_mode(self, mode: str) -> None:
        """Answer from now on as ``mode``; leaving HANG releases the hung calls."""
        with self._lock:
            self.mode = mode
        if mode != HANG:
            self._release.set()
        else:
            self._release.clear()

    def wait_events(self, count: int, timeout: float = 30.0) -> list[Any]:
        """At least ``count`` events, or AssertionError with what came."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            got = self.events()
            if len(got) >= count:
                return got
            time.sleep(0.05)
        raise AssertionError(f"{len(self.events())} events, wanted {count}: {self.events()}")


def entities(event: Any) -> dict[str, list[str]]:
    """An event's entities: type -> values."""
    out: dict[str, list[str]] = {}
    for entity in event.entitiesImpacted:
        out.setdefault(entity.entityType, []).append(entity.entityValue)
    return out


def action(event: Any) -> str:
    """The RecommendedAction's name."""
    return str(pb.RecommendedAction.Name(event.recommendedAction))


def strategy(event: Any) -> str:
    """The ProcessingStrategy's name."""
    return str(pb.ProcessingStrategy.Name(event.processingStrategy))
