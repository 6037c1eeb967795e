"""Fabric trends (NIC port errors, AER) posted to the evidence board for the GPUs they reach."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace

from exporter.catalog.device import INFO_LABELS
from exporter.config.fabric import FabricSourceConfig
from exporter.evidence import EvidenceBoard
from exporter.health import HealthJudge
from exporter.model import Reading
from exporter.sources.fabric import FabricSource
from exporter.store import View
from exporter.trend import FABRIC_RULES, FabricTrends, fabric_trends
from tests.fakes.fabric_sysfs import FabricSysfs

GPU_A = ("0", "GPU-a", "0000:1b:00.0")
GPU_B = ("1", "GPU-b", "0000:3b:00.0")
NIC_BUS = "0000:1c:00.0"


def joins() -> list[Reading]:
    """mlx5_0 serves GPU a (same switch); mlx5_1 serves GPU b."""
    return [
        Reading("accel_nic_gpu_info", ("mlx5_0", *GPU_A, "pcie_switch"), 1.0),
        Reading("accel_nic_gpu_info", ("mlx5_1", *GPU_B, "pcie_switch"), 1.0),
        Reading("accel_pci_device_info", (NIC_BUS, "nic", "", "", "mlx5_0"), 1.0),
        Reading("accel_pci_device_info", (GPU_B[2], "accelerator", "1", "GPU-b", ""), 1.0),
    ]


def port_errors(nic: str, counter: str, count: float) -> Reading:
    return Reading("accel_nic_port_errors_total", (nic, "1", counter), count)


def aer(bus: str, severity: str, count: float) -> Reading:
    return Reading("accel_pci_aer_errors_total", (bus, severity), count)


def run(fabric: FabricTrends, growth: dict, minutes: int, t0: float = 0.0) -> float:
    """One fabric poll a minute for ``minutes`` windows; each key grows by its count."""
    t = t0
    for minute in range(minutes + 1):
        readings = joins()
        for (kind, who, what), grow in growth.items():
            count = float(minute * grow)
            if kind == "port":
                readings.append(port_errors(who, what, count))
            else:
                readings.append(aer(who, what, count))
        fabric.post(readings, t, 1_000_000.0 + t)
        t += 60.0
    return t


def test_symbol_errors_on_a_nic_port_predict_for_the_gpus_joined_to_it_only():
    board = EvidenceBoard()
    fabric = FabricTrends(board=board)
    # 120 symbol errors a minute (the rule: 60) on mlx5_0; mlx5_1 clean.
    t = run(
        fabric, {("port", "mlx5_0", "symbol_error"): 120, ("port", "mlx5_1", "symbol_error"): 0}, 4
    )
    assert board.sources() == []  # four windows: not yet (five raise it)
    t = run(fabric, {("port", "mlx5_0", "symbol_error"): 120}, 5, t0=t)
    wall = 1_000_000.0 + t
    (found,) = board.for_device("GPU-a", GPU_A[2], wall)
    assert (found.source, found.reason, found.state) == (
        "trend",
        "nic_port_error_rate",
        "predicted_failure",
    )
    assert found.detail.startswith("NIC mlx5_0 port 1: accel_nic_port_errors_total{")
    assert "counter=symbol_error" in found.detail
    assert board.for_device("GPU-b", GPU_B[2], wall) == []

    # Through the real judge: GPU a predicted, GPU b ok, nothing failed.
    judge = HealthJudge(evidence=board, wall=lambda: wall)
    info = []
    for dev, uuid, bus in (GPU_A, GPU_B):
        labels = ["nvidia", dev, uuid, "H100", bus] + [""] * 11
        info += [
            Reading("accel_device_up", (dev, uuid), 1.0),
            Reading("accel_device_info", tuple(labels), 1.0),
        ]
    records = {r.uuid: r for r in judge.judge(info)}
    assert records["GPU-a"].reason_states() == {"nic_port_error_rate": "predicted_failure"}
    assert records["GPU-b"].state == "ok"


def test_aer_on_a_gpu_reaches_that_gpu_and_on_a_nic_the_gpus_behind_it():
    board = EvidenceBoard()
    fabric = FabricTrends(board=board)
    growth = {("aer", GPU_B[2], "nonfatal"): 1, ("aer", NIC_BUS, "nonfatal"): 2}
    t = run(fabric, growth, 1)
    wall = 1_000_000.0 + t
    on_b = board.for_device("GPU-b", GPU_B[2], wall)
    on_a = board.for_device("GPU-a", GPU_A[2], wall)
    assert [(e.reason, e.state) for e in on_b] == [("pcie_aer_nonfatal_rate", "degraded")]
    assert on_b[0].detail.startswith(f"PCI {GPU_B[2]}: ")
    assert [(e.reason, e.state) for e in on_a] == [("pcie_aer_nonfatal_rate", "degraded")]
    assert on_a[0].detail.startswith(f"PCI {NIC_BUS} (NIC mlx5_0): ")
    # Quiet for five windows: cleared, and gone from the board.
    run(fabric, {("aer", GPU_B[2], "nonfatal"): 0, ("aer", NIC_BUS, "nonfatal"): 0}, 5, t0=t)
    assert board.sources() == []


def test_a_nic_counter_reset_is_a_new_baseline_never_a_negative_window():
    board = EvidenceBoard()
    fabric = FabricTrends(board=board)
    # link_error_recovery at 1 a minute (the rule: 1, three windows). A driver reload
    # takes the count from 2 back to 0: a new baseline, no window (a negative rate
    # would have been a window below, and broken the streak).
    counts = [0.0, 1.0, 2.0, 0.0, 1.0]
    for minute, count in enumerate(counts):
        reading = port_errors("mlx5_0", "link_error_recovery", count)
        fabric.post([*joins(), reading], minute * 60.0, minute * 60.0)
    (found,) = board.for_device("GPU-a", "", 4 * 60.0)
    assert (found.reason, found.state) == ("nic_link_recovery_rate", "degraded")


def test_the_fabric_source_posts_its_trend_hits_for_the_gpu_behind_the_nic(tmp_path):
    # The real fabric source on the fake sysfs (2 GPUs, 2 NICs, each pair behind its own
    # switch), with the shipped link-recovery rule shortened to windows of 0.2 s.
    shipped = next(r for r in FABRIC_RULES if r.reason == "nic_link_recovery_rate")
    rule = replace(shipped, length_s=0.2, threshold_per_s=1.0)
    tree = FabricSysfs(tmp_path / "sys")
    tree.node(2)
    board = EvidenceBoard()
    fabric_trends(board, rules=(rule,))
    config = FabricSourceConfig(sys_path=str(tree.root), interval=10.0)
    src = FabricSource("fabric", config, "", board=board)
    store = NamedGpus()
    src.attach(store)
    count = 0
    # Grown by 100 between polls at least 0.25 s apart: far above 1/s whatever a
    # loaded machine makes of the windows' length.
    for _ in range(5):
        tree.set_counter("mlx5_0", "link_error_recovery", count)
        asyncio.run(src.poll())
        count += 100
        time.sleep(0.25)
    now = time.time()
    (found,) = board.for_device("GPU-aaaa-0000", "0000:18:00.0", now)
    assert (found.source, found.reason, found.state) == (
        "trend",
        "nic_link_recovery_rate",
        "degraded",
    )
    assert found.detail.startswith("NIC mlx5_0 port 1: ")
    assert board.for_device("GPU-aaaa-0001", "0000:24:00.0", now) == []
    assert fabric_trends(board).tracker.rules == (rule,)  # one per board, kept


class NamedGpus:
    """What the device sources reported: the two GPUs' accel_device_info."""

    def view(self) -> View:
        rows = []
        for device, uuid, bus in (
            ("0", "GPU-aaaa-0000", "00000000:18:00.0"),
            ("1", "GPU-aaaa-0001", "00000000:24:00.0"),
        ):
            info = {"vendor": "nvidia", "device": device, "uuid": uuid, "pci_bus_id": bus}
            rows.append(
                Reading("accel_device_info", tuple(info.get(k, "") for k in INFO_LABELS), 1.0)
            )
        return View((), rows)


def flaps(nic: str, count: float) -> Reading:
    return Reading("accel_nic_port_flaps_total", (nic, "1"), float(count))


def judged(board: EvidenceBoard, wall: float) -> dict[str, dict[str, str]]:
    """The real judge's reasons for GPUs a and b, with the board's evidence."""
    judge = HealthJudge(evidence=board, wall=lambda: wall)
    info = []
    for dev, uuid, bus in (GPU_A, GPU_B):
        labels = ["nvidia", dev, uuid, "H100", bus] + [""] * 11
        info += [
            Reading("accel_device_up", (dev, uuid), 1.0),
            Reading("accel_device_info", tuple(labels), 1.0),
        ]
    return {r.uuid: r.reason_states() for r in judge.judge(info)}


def test_a_port_that_keeps_flapping_degrades_its_gpus_and_a_one_off_flap_does_not():
    board = EvidenceBoard()
    fabric = FabricTrends(board=board)
    (rule,) = [r for r in FABRIC_RULES if r.reason == "nic_port_flap_rate"]
    assert (rule.length_s, rule.raise_windows, rule.clear_windows) == (300, 2, 6)
    t = 0.0

    def poll(a: float, b: float) -> float:
        nonlocal t
        fabric.post([*joins(), flaps("mlx5_0", a), flaps("mlx5_1", b)], t, 1_000_000.0 + t)
        t += 300.0
        return 1_000_000.0 + t - 300.0

    # mlx5_1 flaps once and never again (a one-off); mlx5_0 flaps in each window.
    poll(0, 0)
    wall = poll(1, 1)
    assert board.sources() == []  # one window above: not yet
    wall = poll(2, 1)
    (found,) = board.for_device("GPU-a", GPU_A[2], wall)
    assert (found.source, found.reason, found.state) == ("trend", "nic_port_flap_rate", "degraded")
    assert found.detail.startswith("NIC mlx5_0 port 1: accel_nic_port_flaps_total{")
    assert board.for_device("GPU-b", GPU_B[2], wall) == []
    assert judged(board, wall) == {"GPU-a": {"nic_port_flap_rate": "degraded"}, "GPU-b": {}}
    # Six quiet windows (half an hour) clear it; five do not.
    for _ in range(5):
        wall = poll(2, 1)
    assert [e.reason for e in board.for_device("GPU-a", GPU_A[2], wall)] == ["nic_port_flap_rate"]
    wall = poll(2, 1)
    assert board.sources() == []


def test_a_fatal_aer_error_degrades_the_device_for_an_hour_and_never_fails_it():
    board = EvidenceBoard()
    fabric = FabricTrends(board=board)
    # GPU b's link saw one fatal error in a minute; then none, for an hour.
    t = run(fabric, {("aer", GPU_B[2], "fatal"): 1}, 1)
    wall = 1_000_000.0 + t - 60.0
    (found,) = board.for_device("GPU-b", GPU_B[2], wall)
    assert (found.reason, found.state) == ("pcie_aer_fatal_rate", "degraded")
    assert judged(board, wall) == {"GPU-a": {}, "GPU-b": {"pcie_aer_fatal_rate": "degraded"}}
    readings = [*joins(), aer(GPU_B[2], "fatal", 1.0)]
    for minute in range(60):
        fabric.post(readings, t, 1_000_000.0 + t)
        wall = 1_000_000.0 + t
        t += 60.0
        if minute == 58:  # 59 quiet windows: still degraded
            assert [e.reason for e in board.for_device("GPU-b", GPU_B[2], wall)] == [
                "pcie_aer_fatal_rate"
            ]
    assert board.sources() == []


def test_the_fabric_source_posts_a_flapping_port_for_the_gpu_behind_the_nic(tmp_path):
    # The real source on the fake sysfs: link_downed grows between polls (flaps too fast
    # for a poll to see the state), counted as flaps, judged by the shipped flap rule
    # shortened to windows of 0.2 s.
    shipped = next(r for r in FABRIC_RULES if r.reason == "nic_port_flap_rate")
    rule = replace(shipped, length_s=0.2, threshold_per_s=1.0)
    tree = FabricSysfs(tmp_path / "sys")
    tree.node(2)
    board = EvidenceBoard()
    fabric_trends(board, rules=(rule,))
    src = FabricSource("fabric", FabricSourceConfig(sys_path=str(tree.root), interval=10.0), "",
                       board=board)  # fmt: skip
    src.attach(NamedGpus())
    downs = 0
    for _ in range(4):
        tree.set_counter("mlx5_1", "link_downed", downs)
        readings = asyncio.run(src.poll())
        downs += 10  # ten flaps between polls >= 0.25 s apart: above 1/s however loaded
        time.sleep(0.25)
    got = {(r.metric, r.labels): r.value for r in readings}
    assert got[("accel_nic_port_flaps_total", ("mlx5_1", "1"))] == 30
    now = time.time()
    (found,) = board.for_device("GPU-aaaa-0001", "0000:24:00.0", now)
    assert (found.source, found.reason, found.state) == ("trend", "nic_port_flap_rate", "degraded")
    assert board.for_device("GPU-aaaa-0000", "0000:18:00.0", now) == []
