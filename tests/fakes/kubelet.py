"""A fake kubelet pod-resources server (gRPC, v1 proto) on a unix socket.

It serves the real ``v1.PodResourcesLister/List`` method with the generated
messages, so the client under test speaks exactly what a kubelet speaks. A test
sets the pods it returns and can make it slow, fail with a gRPC status, or
return a reply of any size.
"""

from __future__ import annotations

import threading
import time
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any

import grpc

from exporter.third_party.pod_resources import pod_resources_pb2 as pb


@dataclass(frozen=True)
class FakeClaim:
    """A DRA ResourceClaim's devices as the kubelet reports them: (driver, pool, device)."""

    namespace: str
    name: str
    devices: list[tuple[str, str, str]]


@dataclass
class FakeContainer:
    name: str
    devices: dict[str, list[str]] = field(default_factory=dict)  # resource -> device ids
    claims: list[FakeClaim] = field(default_factory=list)


@dataclass
class FakePod:
    namespace: str
    name: str
    containers: list[FakeContainer]


class FakeKubelet:
    """``with FakeKubelet(path) as kubelet: kubelet.pods = [...]``."""

    def __init__(self, socket_path: str, max_send_bytes: int = 256 * 1024 * 1024) -> None:
        self.socket_path = socket_path
        self.pods: list[FakePod] = []
        self.delay = 0.0
        self.fail: grpc.StatusCode | None = None
        self.padding_pods = 0  # extra pods without devices, to make replies large
        # Fields a newer kubelet might send, unknown to the v1 proto this client knows:
        # appended to every ContainerResources (field number -> bytes value).
        self.unknown_fields: dict[int, bytes] = {}
        self.calls = 0
        self._lock = threading.Lock()
        self._server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=4),
            options=[("grpc.max_send_message_length", max_send_bytes)],
        )
        handler = grpc.method_handlers_generic_handler(
            "v1.PodResourcesLister",
            {
                "List": grpc.unary_unary_rpc_method_handler(
                    self._list,
                    request_deserializer=pb.ListPodResourcesRequest.FromString,
                    response_serializer=pb.ListPodResourcesResponse.SerializeToString,
                )
            },
        )
        self._server.add_generic_rpc_handlers((handler,))
        self._server.add_insecure_port(f"unix:{socket_path}")

    def reply(self) -> Any:
        out = pb.ListPodResourcesResponse()
        for pod in self.pods:
            msg = out.pod_resources.add(name=pod.name, namespace=pod.namespace)
            for container in pod.containers:
                c = msg.containers.add(name=container.name)
                for resource, ids in container.devices.items():
                    c.devices.add(resource_name=resource, device_ids=ids)
                for claim in container.claims:
                    dyn = c.dynamic_resources.add(
                        claim_name=claim.name, claim_namespace=claim.namespace
                    )
                    for driver, pool, device in claim.devices:
                        dyn.claim_resources.add(
                            driver_name=driver,
                            pool_name=pool,
                            device_name=device,
                            cdi_devices=[pb.CDIDevice(name=f"{driver}/gpu={device}")],
                        )
                if self.unknown_fields:
                    extra = b"".join(
                        _length_delimited(n, v) for n, v in self.unknown_fields.items()
                    )
                    c.MergeFromString(extra)
        for i in range(self.padding_pods):
            filler = out.pod_resources.add(name=f"filler-{i:08d}-" + "x" * 200, namespace="padding")
            filler.containers.add(name="main", cpu_ids=list(range(16)))
        return out

    def _list(self, request: Any, context: grpc.ServicerContext) -> Any:
        with self._lock:
            self.calls += 1
        if self.delay:
            time.sleep(self.delay)
        if self.fail is not None:
            context.abort(self.fail, "injected failure")
        return self.reply()

    def start(self) -> FakeKubelet:
        self._server.start()
        return self

    def stop(self) -> None:
        self._server.stop(grace=None).wait(5)

    def __enter__(self) -> FakeKubelet:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _length_delimited(number: int, value: bytes) -> bytes:
    """One protobuf field of wire type 2, as a newer kubelet's message would carry it."""
    return _varint(number << 3 | 2) + _varint(len(value)) + value
