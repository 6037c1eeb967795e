"""Device-ID matching: every way a device plugin may name a device."""

from __future__ import annotations

import pytest

from exporter.catalog.device import INFO_LABELS
from exporter.enrich.devices import DeviceIndex, DeviceRef, MigRef, normalise_pci
from exporter.model import Reading

GPU0 = DeviceRef("0", "GPU-aaaaaaaa-0000-0000-0000-000000000000", "nvidia", "00000000:17:00.0")
GPU1 = DeviceRef("1", "GPU-bbbbbbbb-0000-0000-0000-000000000000", "nvidia", "00000000:2A:00.0")


@pytest.fixture
def index():
    return DeviceIndex(
        [GPU0, GPU1],
        processes=[(GPU0.uuid, 10), (GPU0.uuid, 11), (GPU1.uuid.upper(), 12), ("GPU-unknown", 13)],
        migs=[
            MigRef("MIG-11111111-2222-3333-4444-555555555555", GPU1.uuid, "1", "0"),
            MigRef("MIG-22222222-2222-3333-4444-555555555555", GPU1.uuid, "2", "0"),
        ],
    )


@pytest.mark.parametrize(
    ("device_id", "expected"),
    [
        (GPU0.uuid, GPU0),
        (GPU0.uuid.upper(), GPU0),
        (GPU1.uuid + "::3", GPU1),  # time-slicing replica
        ("MIG-11111111-2222-3333-4444-555555555555", GPU1),
        ("0000:2a:00.0", GPU1),  # AMD device plugin style
        ("00000000:17:00.0", GPU0),
        ("17:00.0", GPU0),
        ("1", GPU1),
        ("1:0", GPU1),  # deviceIDStrategy=index with MIG
        ("nvidia0", GPU0),  # GKE device names
        ("nvidia0/vgpu3", GPU0),  # GKE time-sharing: a share of GPU 0
        ("nvidia1/gi1", GPU1),  # GKE MIG: the GPU instance 1 of GPU 1
        ("nvidia1/gi2/vgpu0", GPU1),  # GKE MIG with time-sharing
        ("nvidia7", None),
        ("nvidia7/vgpu0", None),
        ("nvidia0/vgpu", None),
        ("nvidia0/gi", None),
        ("nvidia0/vgpu1/gi1", None),
        ("GPU-ffffffff-0000-0000-0000-000000000000", None),
        ("0000:99:00.0", None),
        ("", None),
        ("garbage", None),
    ],
)
def test_resolve(index, device_id, expected):
    assert index.resolve(device_id) == expected


def test_processes_grouped_by_known_device(index):
    assert index.processes == {GPU0.uuid: [10, 11], GPU1.uuid: [12]}


def test_indices_are_not_trusted_when_two_vendors_collide():
    amd0 = DeviceRef("0", "amd-uuid-0", "amd", "0000:c1:00.0")
    both = DeviceIndex([GPU0, amd0])
    assert both.resolve("0") is None
    assert both.resolve("0000:c1:00.0") == amd0


def test_from_readings():
    info = dict.fromkeys(INFO_LABELS, "")
    info.update(vendor="nvidia", device="0", uuid=GPU0.uuid, pci_bus_id=GPU0.pci_bus_id)
    index = DeviceIndex.from_readings(
        [Reading("accel_device_info", tuple(info[k] for k in INFO_LABELS), 1.0)],
        [
            Reading("accel_process_memory_bytes", ("0", GPU0.uuid, "321"), 1.0),
            Reading("accel_process_memory_bytes", ("0", GPU0.uuid, "not-a-pid"), 1.0),
        ],
    )
    assert index.devices == [GPU0]
    assert index.processes == {GPU0.uuid: [321]}


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("00000000:17:00.0", "0000:17:00.0"),
        ("0000:AB:1f.7", "0000:ab:1f.7"),
        ("0001:17:00.0", "0001:17:00.0"),
        ("17:00.0", "0000:17:00.0"),
        ("17:00.8", None),
        ("GPU-x", None),
    ],
)
def test_normalise_pci(raw, expected):
    assert normalise_pci(raw) == expected


def test_mig_lookup(index):
    mig = MigRef("MIG-11111111-2222-3333-4444-555555555555", GPU1.uuid, "1", "0")
    assert index.migs("MIG-11111111-2222-3333-4444-555555555555::1") == (mig,)
    assert index.migs(GPU1.uuid) == ()
    # GKE names the GPU instance: nvidia<index>/gi<GPU instance>[/vgpu<n>].
    assert index.migs("nvidia1/gi1") == (mig,)
    assert index.migs("nvidia1/gi1/vgpu0") == (mig,)
    assert [m.gpu_instance for m in index.migs("nvidia1/gi2")] == ["2"]
    assert index.migs("nvidia1/gi5") == ()
    assert index.migs("nvidia0/gi1") == ()  # GPU 0 has no MIG devices
    assert index.migs("nvidia1") == index.migs("nvidia1/vgpu2") == ()


def test_migs_from_readings():
    info = dict.fromkeys(INFO_LABELS, "")
    info.update(vendor="nvidia", device="1", uuid=GPU1.uuid)
    index = DeviceIndex.from_readings(
        [Reading("accel_device_info", tuple(info[k] for k in INFO_LABELS), 1.0)],
        migs=[
            Reading("accel_mig_device_info", ("1", GPU1.uuid, "2", "0", "MIG-abc"), 1.0),
            Reading("accel_mig_device_info", ("1", GPU1.uuid, "3", "0", ""), 1.0),
            Reading("accel_mig_device_info", ("9", "GPU-unknown", "1", "0", "MIG-zzz"), 1.0),
        ],
    )
    assert index.resolve("MIG-abc").uuid == GPU1.uuid
    assert [m.gpu_instance for m in index.migs("MIG-abc")] == ["2"]
    assert index.resolve("MIG-zzz") is None
    # Without a MIG UUID, GKE's form still names it.
    assert [m.gpu_instance for m in index.migs("nvidia1/gi3")] == ["3"]
