"""The DRA index: (driver, pool, device) -> hardware identity, from ResourceSlices."""

from __future__ import annotations

import kubernetes_validate
import pytest

from exporter.enrich.dra import DraDevice, DraIndex
from tests.fakes.resource_slices import (
    amd_gpu,
    attr,
    intel_gpu,
    nvidia_gpu,
    nvidia_mig,
    resource_slice,
)

NODE = "gpu-node-1"
GPU0, GPU1 = "GPU-7f1c2a9e-0000-4000-8000-000000000000", "GPU-7f1c2a9e-1111-4000-8000-000000000000"
MIG = "MIG-0a1b2c3d-0000-4000-8000-000000000000"


def slices():
    return [
        resource_slice(
            NODE,
            "gpu.nvidia.com",
            [
                nvidia_gpu(0, GPU0, "0000:17:00.0"),
                nvidia_gpu(1, GPU1, "0000:2a:00.0"),
                nvidia_mig(1, MIG, GPU1, "0000:2a:00.0"),
            ],
        ),
        resource_slice(NODE, "gpu.amd.com", [amd_gpu(0, "0000:c1:00.0")]),
        resource_slice(NODE, "gpu.intel.com", [intel_gpu("0000:03:00.0")]),
    ]


@pytest.mark.parametrize("version", ["1.34", "1.35"])
def test_the_fixtures_are_valid_resource_slices(version):
    for doc in slices():
        kubernetes_validate.validate(doc, version, strict=True)


def test_each_vendor_s_identity_attribute_is_read():
    index, errors = DraIndex.from_slices(slices())
    assert not errors
    nv = index.get(DraDevice("gpu.nvidia.com", NODE, "gpu-0"))
    assert nv is not None and (nv.uuid, nv.pci_bus_id) == (GPU0, "0000:17:00.0")
    mig = index.get(DraDevice("gpu.nvidia.com", NODE, "gpu-1-mig-19-0-1"))
    assert mig is not None and (mig.uuid, mig.parent_uuid) == (MIG, GPU1)
    amd = index.get(DraDevice("gpu.amd.com", NODE, "gpu-0-128"))
    assert amd is not None and (amd.uuid, amd.pci_bus_id) == ("", "0000:c1:00.0")
    intel = index.get(DraDevice("gpu.intel.com", NODE, "0000-03-00-0-0x56c0"))
    assert intel is not None and intel.pci_bus_id == "0000:03:00.0"
    assert index.drivers == {"gpu.nvidia.com", "gpu.amd.com", "gpu.intel.com"}


def test_lookup_by_uuid_and_by_pci():
    index, _ = DraIndex.from_slices(slices())
    assert index.by_uuid(GPU0.lower()) == DraDevice("gpu.nvidia.com", NODE, "gpu-0")
    assert index.by_uuid(MIG) == DraDevice("gpu.nvidia.com", NODE, "gpu-1-mig-19-0-1")
    assert index.by_uuid("GPU-unknown") is None
    # A GPU and its MIG device share the PCI function.
    assert index.by_pci("00000000:2A:00.0") == (
        DraDevice("gpu.nvidia.com", NODE, "gpu-1"),
        DraDevice("gpu.nvidia.com", NODE, "gpu-1-mig-19-0-1"),
    )
    assert index.by_pci("not-a-bus-id") == ()


def test_resolve_prefers_the_uuid_and_takes_a_pci_address_only_when_it_is_one_device():
    index, _ = DraIndex.from_slices(slices())
    # NVIDIA: the uuid attribute, whatever PCI address the device source reported.
    assert index.resolve(GPU0, "0000:c1:00.0") == DraDevice("gpu.nvidia.com", NODE, "gpu-0")
    # AMD: no uuid attribute; the one DRA device on that PCI function.
    amd = DraDevice("gpu.amd.com", NODE, "gpu-0-128")
    assert index.resolve("0c1d2e3f-amd-uuid", "00000000:C1:00.0") == amd
    # A GPU and its MIG device on one function: never a guess.
    assert index.resolve("GPU-not-published", "0000:2a:00.0") is None
    assert index.resolve("GPU-not-published") is None
    assert index.resolve("GPU-not-published", "not-a-bus-id") is None


def test_qualified_attribute_names_are_the_driver_s_own():
    device = {"name": "gpu-0", "attributes": {"gpu.nvidia.com/uuid": attr(GPU0)}}
    index, _ = DraIndex.from_slices([resource_slice(NODE, "gpu.nvidia.com", [device])])
    assert index.by_uuid(GPU0) == DraDevice("gpu.nvidia.com", NODE, "gpu-0")
    # Another domain's "uuid" is not this driver's.
    other = {"name": "gpu-0", "attributes": {"example.com/uuid": attr(GPU0)}}
    index, _ = DraIndex.from_slices([resource_slice(NODE, "gpu.nvidia.com", [other])])
    found = index.get(DraDevice("gpu.nvidia.com", NODE, "gpu-0"))
    assert found is not None and not found.identified


def test_only_the_newest_generation_of_a_pool_counts():
    old = resource_slice(NODE, "gpu.nvidia.com", [nvidia_gpu(0, GPU0, "0000:17:00.0")])
    new = resource_slice(
        NODE, "gpu.nvidia.com", [nvidia_gpu(0, GPU1, "0000:2a:00.0")], generation=2
    )
    index, _ = DraIndex.from_slices([new, old])
    assert index.by_uuid(GPU1) is not None
    assert index.by_uuid(GPU0) is None


def test_bad_slices_are_counted_and_the_rest_kept():
    good = resource_slice(NODE, "gpu.nvidia.com", [nvidia_gpu(0, GPU0, "0000:17:00.0")])
    no_attribute = {"name": "gpu-9", "attributes": {"type": attr("gpu")}}
    odd = resource_slice(NODE, "gpu.nvidia.com", [no_attribute, {"attributes": {}}], pool="p2")
    index, errors = DraIndex.from_slices([good, odd, "garbage", {"spec": {"driver": "x"}}])
    assert errors == {"dra_bad_slice": 3}
    assert index.by_uuid(GPU0) is not None
    kept = index.get(DraDevice("gpu.nvidia.com", "p2", "gpu-9"))
    assert kept is not None and not kept.identified
