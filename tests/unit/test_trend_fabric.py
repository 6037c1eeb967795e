"""Fabric trends (NIC port errors, AER) posted to the evidence board for the GPUs they reach."""

from __future__ import annotations

from exporter.evidence import EvidenceBoard
from exporter.health import HealthJudge
from exporter.model import Reading
from exporter.trend import FabricTrends

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
