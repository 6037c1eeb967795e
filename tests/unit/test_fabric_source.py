"""The fabric source on a fake sysfs: exact readings, joins, flaps, a NIC gone, evidence, restarts."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from exporter import state_file
from exporter.catalog import CATALOG
from exporter.catalog.device import INFO_LABELS
from exporter.config.fabric import FabricSourceConfig
from exporter.evidence import EvidenceBoard
from exporter.fabric.ledger import FILE_NAME
from exporter.model import Reading
from exporter.sources.fabric import FabricSource
from exporter.store import View, validate
from exporter.verdict import DEGRADED
from tests.fakes.fabric_sysfs import AMD, CLASS_3D, GEN4, GEN5, MELLANOX, NVIDIA, FabricSysfs

UUIDS = ("GPU-aaaaaaaa-0000", "GPU-aaaaaaaa-0001")


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


class FakeStore:
    """What the device sources reported: accel_device_info of the GPUs named so far."""

    def __init__(self) -> None:
        self.readings: list[Reading] = []

    def name(self, device: str, uuid: str, bus: str) -> None:
        info = {"vendor": "nvidia", "device": device, "uuid": uuid, "pci_bus_id": bus}
        self.readings.append(
            Reading("accel_device_info", tuple(info.get(k, "") for k in INFO_LABELS), 1.0)
        )

    def view(self) -> View:
        return View((), self.readings)


@pytest.fixture
def writes() -> Iterator[None]:
    was = state_file.WRITES["enabled"]
    state_file.enable_writes()
    yield
    state_file.WRITES["enabled"] = was


@pytest.fixture
def tree(tmp_path: Path) -> FabricSysfs:
    fake = FabricSysfs(tmp_path / "sys")
    fake.node(2)
    return fake


def source(
    tree: FabricSysfs, state: Path | None = None, **kw: Any
) -> tuple[FabricSource, FakeStore, EvidenceBoard, Clock]:
    store, board, clock = FakeStore(), EvidenceBoard(), Clock()
    config = FabricSourceConfig(sys_path=str(tree.root), interval=10.0)
    src = FabricSource("fabric", config, str(state or ""), board=board, wall=clock, **kw)
    src.attach(store)
    return src, store, board, clock


def poll(src: FabricSource) -> dict[tuple[str, tuple[str, ...]], float]:
    readings = asyncio.run(src.poll())
    ok, problems = validate(readings, CATALOG)
    assert problems == [] and len(ok) == len(readings)
    out = {(r.metric, r.labels): r.value for r in readings}
    assert len(out) == len(readings), "a series written twice"
    return out


def family(
    got: dict[tuple[str, tuple[str, ...]], float], name: str
) -> dict[tuple[str, ...], float]:
    return {labels: v for (metric, labels), v in got.items() if metric == name}


def name_gpus(store: FakeStore) -> None:
    # As NVML names them: an 8-digit domain, upper case.
    store.name("0", UUIDS[0], "00000000:18:00.0")
    store.name("1", UUIDS[1], "00000000:24:00.0")


def test_exact_readings_of_two_gpus_and_two_nics(tree: FabricSysfs) -> None:
    tree.set_counter("mlx5_0", "symbol_error", 12)
    tree.set_counter("mlx5_0", "port_xmit_data", 1000)
    tree.set_counter("mlx5_0", "out_of_buffer", 3, hw=True)
    tree.set_aer("0000:18:00.0", correctable=5, nonfatal=1)
    src, store, _, _ = source(tree)
    name_gpus(store)
    got = poll(src)
    assert family(got, "accel_nic_info") == {
        ("mlx5_0", "0000:19:00.0", "InfiniBand", "0c42:a103:0000:d1a2", "28.39.1002", "0",
         "0000:16:00.0"): 1.0,
        ("mlx5_1", "0000:25:00.0", "InfiniBand", "0c42:a103:0001:d1a2", "28.39.1002", "1",
         "0000:22:00.0"): 1.0,
    }  # fmt: skip
    assert family(got, "accel_nic_gpu_info") == {
        ("mlx5_0", "0", UUIDS[0], "0000:18:00.0", "pcie_switch"): 1.0,
        ("mlx5_1", "1", UUIDS[1], "0000:24:00.0", "pcie_switch"): 1.0,
    }
    assert family(got, "accel_nic_port_up") == {("mlx5_0", "1"): 1.0, ("mlx5_1", "1"): 1.0}
    assert family(got, "accel_nic_port_state_info") == {
        ("mlx5_0", "1", "active", "link_up"): 1.0,
        ("mlx5_1", "1", "active", "link_up"): 1.0,
    }
    assert got[("accel_nic_port_rate_bytes_per_second", ("mlx5_0", "1"))] == 25e9
    errors = family(got, "accel_nic_port_errors_total")
    assert len(errors) == 2 * 12
    assert errors[("mlx5_0", "1", "symbol_error")] == 12
    assert got[("accel_nic_port_data_bytes_total", ("mlx5_0", "1", "transmit"))] == 4000
    assert got[("accel_nic_port_hw_events_total", ("mlx5_0", "1", "out_of_buffer"))] == 3
    assert family(got, "accel_nic_port_flaps_total") == {("mlx5_0", "1"): 0, ("mlx5_1", "1"): 0}
    assert family(got, "accel_nic_missing") == {("mlx5_0",): 0, ("mlx5_1",): 0}
    assert family(got, "accel_pci_device_info") == {
        ("0000:18:00.0", "accelerator", "0", UUIDS[0], ""): 1.0,
        ("0000:24:00.0", "accelerator", "1", UUIDS[1], ""): 1.0,
        ("0000:19:00.0", "nic", "", "", "mlx5_0"): 1.0,
        ("0000:25:00.0", "nic", "", "", "mlx5_1"): 1.0,
        ("0000:16:00.0", "pcie_switch", "", "", ""): 1.0,
        ("0000:22:00.0", "pcie_switch", "", "", ""): 1.0,
    }
    # Six links (2 GPUs, 2 NICs, 2 switch uplinks), none downtrained; the GPUs' audio
    # functions are not watched.
    watched = ("0000:18:00.0", "0000:24:00.0", "0000:19:00.0", "0000:25:00.0")
    assert family(got, "accel_pci_link_width") == {
        (a,): 16.0 for a in (*watched, "0000:16:00.0", "0000:22:00.0")
    }
    assert set(family(got, "accel_pci_link_downtrained").values()) == {0.0}
    assert got[("accel_pci_link_speed_transfers_per_second", ("0000:18:00.0",))] == 32e9
    assert family(got, "accel_pci_aer_errors_total")[("0000:18:00.0", "correctable")] == 5
    assert family(got, "accel_pci_aer_errors_total")[("0000:18:00.0", "nonfatal")] == 1
    assert family(got, "accel_fabric_read_errors_total") == {
        ("vanished",): 0,
        ("unreadable",): 0,
        ("malformed",): 0,
    }


def test_the_join_waits_for_the_gpus_identity(tree: FabricSysfs) -> None:
    src, store, _, _ = source(tree)
    got = poll(src)
    assert family(got, "accel_nic_gpu_info") == {}
    assert ("accel_pci_device_info", ("0000:18:00.0", "accelerator", "", "", "")) in got
    name_gpus(store)
    got = poll(src)
    assert len(family(got, "accel_nic_gpu_info")) == 2
    # A GPU split into partitions: every partition is joined (jobs run on each).
    store.name("1:0", "MIG-bbbb", "00000000:24:00.0")
    got = poll(src)
    assert (
        "accel_nic_gpu_info",
        ("mlx5_1", "1:0", "MIG-bbbb", "0000:24:00.0", "pcie_switch"),
    ) in got


def test_a_nic_under_its_own_root_port_serves_the_gpus_of_its_numa_node(tmp_path: Path) -> None:
    fake = FabricSysfs(tmp_path / "sys")
    fake.node(2)
    # Node 0 has GPU 0; the NIC sits right under a root port on node 0: no switch.
    fake.nic("mlx5_9", ("pci0000:80", "0000:80:01.0", "0000:81:00.0"), numa=0)
    src, store, _, _ = source(fake)
    name_gpus(store)
    got = poll(src)
    assert ("accel_nic_gpu_info", ("mlx5_9", "0", UUIDS[0], "0000:18:00.0", "numa_node")) in got
    assert [k for k in family(got, "accel_nic_gpu_info") if k[0] == "mlx5_9"] == [
        ("mlx5_9", "0", UUIDS[0], "0000:18:00.0", "numa_node")
    ]
    info = [k for k in family(got, "accel_nic_info") if k[0] == "mlx5_9"]
    assert info == [("mlx5_9", "0000:81:00.0", "InfiniBand", "0c42:a103:0065:d1a2",
                     "28.39.1002", "0", "")]  # fmt: skip


def test_three_flaps_exact_outages_and_the_gpu_evidence(tree: FabricSysfs) -> None:
    src, store, board, clock = source(tree)
    name_gpus(store)
    poll(src)
    for hold in (3.0, 5.0, 7.0):
        clock.now += 10
        tree.port_down("mlx5_0")
        got = poll(src)
        assert got[("accel_nic_port_up", ("mlx5_0", "1"))] == 0
        assert ("accel_nic_port_state_info", ("mlx5_0", "1", "down", "polling")) in got
        # The GPU behind the NIC's switch is degraded while the port is down.
        (ev,) = board.for_device(UUIDS[0], "0000:18:00.0", clock.now)
        assert (ev.reason, ev.state, ev.observed_at) == ("nic_port_down", DEGRADED, clock.now)
        assert board.for_device(UUIDS[1], "0000:24:00.0", clock.now) == []
        clock.now += hold
        tree.port_up("mlx5_0")
        got = poll(src)
        assert board.for_device(UUIDS[0], "0000:18:00.0", clock.now) == []
    key = ("mlx5_0", "1")
    assert got[("accel_nic_port_flaps_total", key)] == 3  # state and link_downed: once each
    assert got[("accel_nic_port_outage_seconds_total", key)] == 15.0
    assert got[("accel_nic_port_last_outage_seconds", key)] == 7.0
    assert got[("accel_nic_port_errors_total", (*key, "link_downed"))] == 3
    assert got[("accel_nic_port_flaps_total", ("mlx5_1", "1"))] == 0
    # A down under way counts in the outage total at once.
    tree.port_down("mlx5_0")
    clock.now += 10
    poll(src)
    clock.now += 4
    got = poll(src)
    assert got[("accel_nic_port_outage_seconds_total", key)] == 19.0


def test_a_fast_flap_between_polls_is_counted_from_link_downed(tree: FabricSysfs) -> None:
    src, _, _, clock = source(tree)
    poll(src)
    tree.set_counter("mlx5_1", "link_downed", 2)  # down and up twice, unseen by any poll
    clock.now += 10
    got = poll(src)
    assert got[("accel_nic_port_flaps_total", ("mlx5_1", "1"))] == 2
    assert got[("accel_nic_port_outage_seconds_total", ("mlx5_1", "1"))] == 0


def test_a_counter_that_goes_backwards_is_a_new_baseline(tree: FabricSysfs) -> None:
    tree.set_counter("mlx5_0", "link_downed", 9)
    src, _, _, clock = source(tree)
    poll(src)
    tree.set_counter("mlx5_0", "link_downed", 0)  # a driver reload
    clock.now += 10
    got = poll(src)
    assert got[("accel_nic_port_flaps_total", ("mlx5_0", "1"))] == 0
    assert got[("accel_nic_port_errors_total", ("mlx5_0", "1", "link_downed"))] == 0
    tree.set_counter("mlx5_0", "link_downed", 1)
    clock.now += 10
    got = poll(src)
    assert got[("accel_nic_port_flaps_total", ("mlx5_0", "1"))] == 1


def test_a_nic_that_disappears_is_missing_and_its_gpus_degraded(tree: FabricSysfs) -> None:
    src, store, board, clock = source(tree)
    name_gpus(store)
    poll(src)
    tree.remove_nic("mlx5_1")
    clock.now += 10
    got = poll(src)
    assert family(got, "accel_nic_missing") == {("mlx5_0",): 0, ("mlx5_1",): 1}
    assert family(got, "accel_nic_disappearances_total") == {("mlx5_0",): 0, ("mlx5_1",): 1}
    # Still described and joined from memory: the query from the NIC to its GPUs works.
    assert ("accel_nic_gpu_info", ("mlx5_1", "1", UUIDS[1], "0000:24:00.0", "pcie_switch")) in got
    assert ("accel_nic_port_up", ("mlx5_1", "1")) not in got
    assert ("accel_pci_device_info", ("0000:25:00.0", "nic", "", "", "mlx5_1")) not in got
    (ev,) = board.for_device(UUIDS[1], "0000:24:00.0", clock.now)
    assert (ev.reason, ev.state, ev.detail) == (
        "nic_missing",
        DEGRADED,
        "NIC mlx5_1 (0000:25:00.0) missing since 1970-01-12T13:46:50Z",
    )
    clock.now += 10
    got = poll(src)
    assert family(got, "accel_nic_disappearances_total")[("mlx5_1",)] == 1  # counted once


def test_a_nic_renamed_is_the_same_nic_with_its_counts(tree: FabricSysfs) -> None:
    src, _, _, clock = source(tree)
    poll(src)
    tree.port_down("mlx5_1")
    clock.now += 10
    poll(src)
    # After a driver reload the NIC comes back as mlx5_7: same GUID, same PCI address.
    dev = (tree.ib / "mlx5_1").resolve()
    (tree.ib / "mlx5_1").unlink()
    dev.rename(dev.with_name("mlx5_7"))
    (tree.ib / "mlx5_7").symlink_to(os.path.relpath(dev.with_name("mlx5_7"), tree.ib))
    clock.now += 10
    got = poll(src)
    assert family(got, "accel_nic_missing") == {("mlx5_0",): 0, ("mlx5_7",): 0}
    assert family(got, "accel_nic_disappearances_total") == {("mlx5_0",): 0, ("mlx5_7",): 0}
    assert got[("accel_nic_port_flaps_total", ("mlx5_7", "1"))] == 1
    assert ("accel_nic_port_flaps_total", ("mlx5_1", "1")) not in got


def test_a_gpu_trained_at_x8_is_downtrained_and_degraded_from_the_second_poll(
    tree: FabricSysfs,
) -> None:
    tree.set_link("0000:24:00.0", width=8)
    src, store, board, clock = source(tree)
    name_gpus(store)
    got = poll(src)
    assert got[("accel_pci_link_downtrained", ("0000:24:00.0",))] == 1
    assert got[("accel_pci_link_width", ("0000:24:00.0",))] == 8
    assert got[("accel_pci_link_max_width", ("0000:24:00.0",))] == 16
    assert got[("accel_pci_link_downtrained", ("0000:18:00.0",))] == 0
    assert board.for_device(UUIDS[1], "0000:24:00.0", clock.now) == []  # read mid-retrain?
    first = clock.now
    clock.now += 10
    poll(src)
    (ev,) = board.for_device(UUIDS[1], "0000:24:00.0", clock.now)
    assert (ev.reason, ev.state, ev.observed_at) == ("pcie_link_downtrained", DEGRADED, first)
    assert (
        ev.detail
        == "PCIe link at x8 of x16 lanes, 32.0 GT/s of 32.0 GT/s (width below the maximum)"
    )
    assert (ev.advice.action, ev.advice.provenance) == ("inspect_hardware", "exporter_rule")
    # Trained back: the evidence is withdrawn at the next poll.
    tree.set_link("0000:24:00.0", width=16)
    clock.now += 10
    got = poll(src)
    assert got[("accel_pci_link_downtrained", ("0000:24:00.0",))] == 0
    assert board.for_device(UUIDS[1], "0000:24:00.0", clock.now) == []


def test_an_idle_gen1_link_is_not_downtrained_but_gen4_is(tree: FabricSysfs) -> None:
    tree.set_link("0000:18:00.0", speed="2.5 GT/s PCIe")
    tree.set_link("0000:24:00.0", speed=GEN4)
    src, _, _, _ = source(tree)
    got = poll(src)
    assert got[("accel_pci_link_downtrained", ("0000:18:00.0",))] == 0
    assert got[("accel_pci_link_downtrained", ("0000:24:00.0",))] == 1
    assert got[("accel_pci_link_speed_transfers_per_second", ("0000:24:00.0",))] == 16e9


def test_an_amd_gpu_below_its_maximum_gets_amds_pcie_procedure(tmp_path: Path) -> None:
    fake = FabricSysfs(tmp_path / "sys")
    fake.node(1, vendor=AMD)
    fake.set_link("0000:18:00.0", width=8, speed=GEN4, max_speed=GEN5)
    src, _, board, clock = source(fake)
    poll(src)
    clock.now += 10
    poll(src)
    (ev,) = board.for_device("", "0000:18:00.0", clock.now)
    assert ev.advice.provenance == "vendor_catalog"
    assert ev.advice.reference.endswith(
        "AMDGPUPcieLinkWidthNotCorrect + AMDGPUPcieLinkSpeedNotCorrect"
    )
    assert (ev.advice.action, ev.advice.scope, ev.advice.escalation) == (
        "inspect_hardware",
        "baseboard",
        "replace_device",
    )


def test_a_downtrained_nic_degrades_the_gpus_it_serves(tree: FabricSysfs) -> None:
    tree.set_link("0000:19:00.0", width=8)
    src, _, board, clock = source(tree)
    poll(src)
    clock.now += 10
    poll(src)
    (ev,) = board.for_device("", "0000:18:00.0", clock.now)
    assert ev.reason == "nic_pcie_link_downtrained"
    assert ev.detail.startswith("NIC mlx5_0 (0000:19:00.0) PCIe link at x8 of x16")


def test_a_downtrained_switch_uplink_degrades_every_gpu_behind_it(tree: FabricSysfs) -> None:
    tree.set_link("0000:22:00.0", width=8, speed=GEN4)
    src, _, board, clock = source(tree)
    got = poll(src)
    assert got[("accel_pci_link_downtrained", ("0000:22:00.0",))] == 1
    clock.now += 10
    poll(src)
    (ev,) = board.for_device("", "0000:24:00.0", clock.now)
    assert (ev.reason, ev.detail) == (
        "pcie_switch_link_downtrained",
        "PCIe switch 0000:22:00.0 uplink at x8 of x16 lanes, 16.0 GT/s of 32.0 GT/s"
        " (width+speed below the maximum)",
    )
    assert board.for_device("", "0000:18:00.0", clock.now) == []


def test_counts_survive_a_restart_mid_outage(
    tree: FabricSysfs, tmp_path: Path, writes: None
) -> None:
    state = tmp_path / "state"
    src, _, _, clock = source(tree, state)
    poll(src)
    for _ in range(2):
        tree.port_down("mlx5_0")
        clock.now += 10
        poll(src)
        tree.port_up("mlx5_0")
        clock.now += 5
        poll(src)
    tree.port_down("mlx5_0")
    clock.now += 10
    poll(src)
    down_at = clock.now
    asyncio.run(src.close())
    assert (state / FILE_NAME).exists()
    # The daemon is away; the port comes back; another flap the counter alone saw.
    tree.port_up("mlx5_0")
    tree.set_counter("mlx5_1", "link_downed", 1)
    again, _, _, clock2 = source(tree, state)
    clock2.now = down_at + 30
    got = poll(again)
    key = ("mlx5_0", "1")
    assert got[("accel_nic_port_flaps_total", key)] == 3
    assert got[("accel_nic_port_outage_seconds_total", key)] == 5 + 5 + 30
    assert got[("accel_nic_port_last_outage_seconds", key)] == 30
    assert got[("accel_nic_port_flaps_total", ("mlx5_1", "1"))] == 1
    asyncio.run(again.close())


def test_a_missing_nic_stays_missing_across_a_restart(
    tree: FabricSysfs, tmp_path: Path, writes: None
) -> None:
    state = tmp_path / "state"
    src, _, _, _ = source(tree, state)
    poll(src)
    tree.remove_nic("mlx5_0")
    poll(src)
    asyncio.run(src.close())
    again, _, board, clock = source(tree, state)
    got = poll(again)
    assert got[("accel_nic_missing", ("mlx5_0",))] == 1
    assert got[("accel_nic_disappearances_total", ("mlx5_0",))] == 1
    assert [e.reason for e in board.for_device("", "0000:18:00.0", clock.now)] == ["nic_missing"]
    asyncio.run(again.close())


def test_a_file_that_vanishes_between_list_and_read_costs_only_itself(tree: FabricSysfs) -> None:
    counters = tree.port_dir("mlx5_0") / "counters"
    os.unlink(counters / "symbol_error")
    # Listed, gone when opened: as a counter is when its device is unbound mid-read.
    (counters / "symbol_error").symlink_to(counters / "gone")
    src, _, _, _ = source(tree)
    got = poll(src)
    assert got[("accel_fabric_read_errors_total", ("vanished",))] == 1
    errors = family(got, "accel_nic_port_errors_total")
    assert ("mlx5_0", "1", "symbol_error") not in errors
    assert len(errors) == 2 * 12 - 1
    assert got[("accel_nic_port_up", ("mlx5_0", "1"))] == 1
    got = poll(src)
    assert got[("accel_fabric_read_errors_total", ("vanished",))] == 2  # counted per poll


def test_unreadable_and_malformed_files_are_counted_by_reason(tree: FabricSysfs) -> None:
    port = tree.port_dir("mlx5_1")
    os.unlink(port / "rate")
    (port / "rate").mkdir()  # a read fails (EISDIR), as a driver's EIO would
    tree.set_counter("mlx5_1", "port_rcv_errors", "garbage")
    tree.set_link("0000:24:00.0", width="x16")
    src, _, _, _ = source(tree)
    got = poll(src)
    assert got[("accel_fabric_read_errors_total", ("unreadable",))] == 1
    assert got[("accel_fabric_read_errors_total", ("malformed",))] == 2
    assert ("accel_nic_port_rate_bytes_per_second", ("mlx5_1", "1")) not in got
    assert ("accel_nic_port_errors_total", ("mlx5_1", "1", "port_rcv_errors")) not in got
    assert ("accel_pci_link_width", ("0000:24:00.0",)) not in got
    # Everything else is there: the other port's rate, the GPU's speed, its max width.
    assert got[("accel_nic_port_rate_bytes_per_second", ("mlx5_0", "1"))] == 25e9
    assert got[("accel_pci_link_max_width", ("0000:24:00.0",))] == 16
    assert got[("accel_pci_link_speed_transfers_per_second", ("0000:24:00.0",))] == 32e9


def test_a_host_without_infiniband_or_pci_has_nothing_and_no_error(tmp_path: Path) -> None:
    src, _, board, _ = source(FabricSysfs(tmp_path / "sys"))
    got = poll(src)
    assert {m for m, _ in got} == {"accel_fabric_read_errors_total"}
    empty = FabricSysfs(tmp_path / "empty")
    empty.bus.rmdir()
    src, _, _, _ = source(empty)
    got = poll(src)
    assert {m for m, _ in got} == {"accel_fabric_read_errors_total"}
    assert "pci_problem" in src.status()
    assert board.sources() == []


def test_only_known_accelerators_are_watched(tmp_path: Path) -> None:
    fake = FabricSysfs(tmp_path / "sys")
    fake.function(("pci0000:00", "0000:00:03.0"), MELLANOX, CLASS_3D)  # not a GPU vendor
    fake.function(("pci0000:00", "0000:00:04.0"), NVIDIA, CLASS_3D)
    src, _, _, _ = source(fake)
    got = poll(src)
    assert set(family(got, "accel_pci_device_info")) == {
        ("0000:00:04.0", "accelerator", "", "", "")
    }
