"""Client of the kubelet pod-resources API v1 (``List`` over a unix socket).

A container's devices come two ways: a device plugin's ``devices`` (resource name and
device IDs) and, with Dynamic Resource Allocation, ``dynamic_resources``: per claim
(name and namespace) the devices allocated to it as (driver, pool, device), which
only the driver's ResourceSlices map to hardware (:mod:`exporter.enrich.dra`). Both
become :class:`Assignment` rows. Fields this client does not know are skipped by
protobuf; the known ones are still read.

Blocking: the workload source runs it on its own thread under a deadline. Every
failure becomes an :class:`AttributionError` whose reason says what to fix
(``socket_missing``: mount the hostPath; ``permission_denied``: run as root or
adjust the socket's mode; ``message_too_large``: raise ``max_message_bytes``).
"""

from __future__ import annotations

import errno
import os
import re
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from exporter.enrich.dra import DraDevice
from exporter.enrich.errors import AttributionError

LIST_METHOD = "/v1.PodResourcesLister/List"


@dataclass(frozen=True)
class Assignment:
    """One device the kubelet assigned to one container.

    A device plugin's: ``resource`` and ``device_id`` name it. A DRA claim's: ``dra``
    names it (``resource`` is the driver, ``device_id`` the device name), and
    ``claim_namespace``/``claim`` the ResourceClaim it was allocated to.
    """

    namespace: str
    pod: str
    container: str
    resource: str
    device_id: str
    claim_namespace: str = ""
    claim: str = ""
    dra: DraDevice | None = None


def resource_filter(names: Sequence[str], patterns: Sequence[str]) -> Callable[[str], bool]:
    """A predicate for the resource names attribution cares about."""
    exact = frozenset(names)
    compiled = [re.compile(p) for p in patterns]
    return lambda name: name in exact or any(p.search(name) for p in compiled)


def _preflight(path: str, timeout: float) -> None:
    """Connect once without gRPC, which reports every failure as 'unavailable'."""
    if not os.path.exists(path):
        raise AttributionError(
            "socket_missing", f"{path} does not exist (is the hostPath mounted?)"
        )
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(path)
    except PermissionError:
        raise AttributionError("permission_denied", f"cannot connect to {path}") from None
    except TimeoutError:
        raise AttributionError("timeout", f"connecting to {path} timed out") from None
    except OSError as exc:
        if exc.errno == errno.ECONNREFUSED:
            raise AttributionError("connect_failed", f"nothing listens on {path}") from None
        raise AttributionError("connect_failed", f"{path}: {exc.strerror or exc}") from None
    finally:
        sock.close()


_CODES = {
    "DEADLINE_EXCEEDED": "timeout",
    "RESOURCE_EXHAUSTED": "message_too_large",
    "UNAVAILABLE": "connect_failed",
    "PERMISSION_DENIED": "permission_denied",
    "UNIMPLEMENTED": "unsupported_api",
}


def list_assignments(
    path: str,
    timeout: float,
    max_message_bytes: int,
    wanted: Callable[[str], bool],
) -> list[Assignment]:
    """Ask the kubelet which devices of the wanted resources each container holds."""
    if not os.path.exists(path):
        # Before the imports: a node without a kubelet never loads grpc and protobuf.
        raise AttributionError(
            "socket_missing", f"{path} does not exist (is the hostPath mounted?)"
        )
    try:
        import grpc

        from exporter.third_party.pod_resources import pod_resources_pb2 as pb
    except Exception as exc:
        # ImportError without the k8s extra; protobuf's VersionError (an Exception, not
        # an ImportError) when the installed runtime is older than the gencode.
        raise AttributionError(
            "grpc_missing",
            f"install accel-exporter[k8s] for pod attribution ({type(exc).__name__}: {exc})",
        ) from None
    _preflight(path, timeout)
    options = [
        ("grpc.max_receive_message_length", max_message_bytes),
        ("grpc.max_send_message_length", 4 * 1024 * 1024),
        ("grpc.enable_retries", 0),
    ]
    channel = grpc.insecure_channel(f"unix://{path}", options=options)
    try:
        method = channel.unary_unary(
            LIST_METHOD,
            request_serializer=pb.ListPodResourcesRequest.SerializeToString,
            response_deserializer=pb.ListPodResourcesResponse.FromString,
        )
        reply = method(pb.ListPodResourcesRequest(), timeout=timeout)
    except grpc.RpcError as exc:
        code = getattr(exc.code(), "name", "UNKNOWN") if hasattr(exc, "code") else "UNKNOWN"
        details = exc.details() if hasattr(exc, "details") else str(exc)
        raise AttributionError(_CODES.get(code, "grpc_error"), f"{code}: {details}") from None
    finally:
        channel.close()
    return assignments_from(reply, wanted)


def assignments_from(reply: Any, wanted: Callable[[str], bool]) -> list[Assignment]:
    """Flatten a ListPodResourcesResponse into one row per (container, device).

    Device plugins' devices of the ``wanted`` resources, and every DRA claim's devices
    (which drivers are accelerators is known only once the ResourceSlices are read).
    """
    out: list[Assignment] = []
    for pod in reply.pod_resources:
        for container in pod.containers:
            for claim in container.dynamic_resources:
                for res in claim.claim_resources:
                    if not res.device_name:
                        continue  # a DRA resource that is not a device
                    out.append(
                        Assignment(
                            pod.namespace,
                            pod.name,
                            container.name,
                            res.driver_name,
                            res.device_name,
                            claim.claim_namespace,
                            claim.claim_name,
                            DraDevice(res.driver_name, res.pool_name, res.device_name),
                        )
                    )
            for devices in container.devices:
                if not wanted(devices.resource_name):
                    continue
                for device_id in devices.device_ids:
                    out.append(
                        Assignment(
                            pod.namespace,
                            pod.name,
                            container.name,
                            devices.resource_name,
                            device_id,
                        )
                    )
    return out
