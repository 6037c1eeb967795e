"""ResourceSlices (``resource.k8s.io/v1``) as the vendors' DRA drivers publish them.

Attribute names and value forms follow each driver's source: NVIDIA's
k8s-dra-driver-gpu (``uuid``, ``parentUUID``, ``pcieBusID``; devices ``gpu-<minor>``
and ``gpu-<minor>-mig-<profile>-<start>-<size>``), AMD's k8s-gpu-dra-driver
(``resource.kubernetes.io/pciBusID``, devices ``gpu-<card>-<render>``) and Intel's
(``pciAddress`` and the standard attribute, devices named by their UID). Every
slice built here validates against the official Kubernetes OpenAPI schema.
"""

from __future__ import annotations

from typing import Any


def attr(value: str) -> dict[str, str]:
    return {"string": value}


def nvidia_gpu(minor: int, uuid: str, bus_id: str) -> dict[str, Any]:
    return {
        "name": f"gpu-{minor}",
        "attributes": {
            "type": attr("gpu"),
            "uuid": attr(uuid),
            "productName": attr("NVIDIA H100 80GB HBM3"),
            "pcieBusID": attr(bus_id),
            "driverVersion": {"version": "570.133.20"},
        },
        "capacity": {"memory": {"value": "80Gi"}},
    }


def nvidia_mig(minor: int, uuid: str, parent_uuid: str, bus_id: str) -> dict[str, Any]:
    return {
        "name": f"gpu-{minor}-mig-19-0-1",
        "attributes": {
            "type": attr("mig"),
            "uuid": attr(uuid),
            "parentUUID": attr(parent_uuid),
            "profile": attr("1g.10gb"),
            "pcieBusID": attr(bus_id),
        },
        "capacity": {"memory": {"value": "10Gi"}},
    }


def amd_gpu(card: int, bus_id: str, partition: bool = False) -> dict[str, Any]:
    return {
        "name": f"gpu-{card}-{128 + card}",
        "attributes": {
            "type": attr("amdgpu-partition" if partition else "amdgpu"),
            "productName": attr("AMD Instinct MI300X"),
            "resource.kubernetes.io/pciBusID": attr(bus_id),
            "resource.kubernetes.io/pcieRoot": attr("pci0000:00"),
        },
    }


def intel_gpu(bus_id: str, model: str = "0x56c0") -> dict[str, Any]:
    uid = bus_id.replace(":", "-").replace(".", "-") + f"-{model}"
    return {
        "name": uid,
        "attributes": {
            "model": attr("Flex 170"),
            "pciId": attr(model),
            "pciAddress": attr(bus_id),
            "resource.kubernetes.io/pciBusID": attr(bus_id),
        },
    }


def resource_slice(
    node: str,
    driver: str,
    devices: list[dict[str, Any]],
    pool: str | None = None,
    generation: int = 1,
    name: str | None = None,
) -> dict[str, Any]:
    pool_name = pool or node
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name or f"{node}-{driver}-{generation}"},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": pool_name, "generation": generation, "resourceSliceCount": 1},
            "devices": devices,
        },
    }
