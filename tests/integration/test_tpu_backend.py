"""The tpu backend in this process: the real gRPC client against the fake metric service."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from exporter.backends.tpu import GAUGES, TpuBackend
from tests.fakes.tpu import control


def test_a_chip_gone_from_the_host_is_down_without_readings(tmp_path: Path) -> None:
    host = control.make_host(tmp_path / "host", 2)
    service = control.FakeService(tmp_path / "svc", {"devices": control.devices(2)}).start()
    try:
        backend = TpuBackend(
            {"addresses": [service.address], "host_root": str(host), "call_timeout": 5.0}
        )
        backend.bootstrap()
        first = backend.handle("poll", {})
        assert [d["up"] for d in first["devices"]] == [True, True]
        used = first["readings"]["accel_memory_used_bytes"]
        assert used == [0, float(1 << 30), 1, float(2 << 30)]
        shutil.rmtree(host / "sys" / "bus" / "pci" / "devices" / backend.chips[1].chip.pci_bus_id)
        second: dict[str, Any] = backend.handle("poll", {})
        assert second["devices"][1] == {
            "uuid": backend.chips[1].uuid,
            "up": False,
            "reason": "device_missing",
        }
        assert second["devices"][0]["up"] is True
        # The runtime still serves the chip's devices: the gone chip shows none of them.
        assert all(rows[0::2] == [0] for rows in second["readings"].values())
        backend.close()
    finally:
        service.stop()


def test_a_metric_a_runtime_fails_to_give_is_counted_on_its_chips_and_the_rest_served(
    tmp_path: Path,
) -> None:
    host = control.make_host(tmp_path / "host", 3)
    every = control.devices(3)
    # Two workloads: one on chips 0 and 1, one on chip 2.
    first = control.FakeService(
        tmp_path / "a", {"devices": {d: every[d] for d in ("0", "1")}}
    ).start()
    second = control.FakeService(tmp_path / "b", {"devices": {"2": every["2"]}}).start()
    try:
        backend = TpuBackend(
            {
                "addresses": [first.address, second.address],
                "host_root": str(host),
                "call_timeout": 5.0,
            }
        )
        backend.bootstrap()
        assert "accel_field_errors_total" not in backend.handle("poll", {})["readings"]
        first.set(failing={"tpu.runtime.tensorcore.dutycycle.percent": "INTERNAL"})
        for polls in (1, 2):
            reply = backend.handle("poll", {})
            readings = reply["readings"]
            assert [d["up"] for d in reply["devices"]] == [True, True, True]
            assert readings["accel_field_errors_total"] == [
                *(0, "tpu", "internal", polls),
                *(1, "tpu", "internal", polls),
            ]
            # The failing metric is missing on the first runtime's chips only; the
            # others are served everywhere.
            assert readings["accel_utilization_ratio"][0::2] == [2]
            assert readings["accel_memory_used_bytes"][0::2] == [0, 1, 2]
            assert readings["accel_memory_total_bytes"][0::2] == [0, 1, 2]
        assert reply["runtimes"][0]["reason"] == "internal"
        assert reply["runtimes"][1]["reason"] == ""
        # Every gauge failing: the chips it served before are the ones counted.
        first.set(failing={name: "UNKNOWN" for name in GAUGES})
        readings = backend.handle("poll", {})["readings"]
        assert readings["accel_field_errors_total"] == [
            *(0, "tpu", "internal", 2, 0, "tpu", "unknown", 4),
            *(1, "tpu", "internal", 2, 1, "tpu", "unknown", 4),
        ]
        assert readings["accel_memory_used_bytes"][0::2] == [2]
        # A runtime with no workload is idle, not failing: nothing more is counted.
        first.set(failing={}, mode="unavailable")
        readings = backend.handle("poll", {})["readings"]
        assert readings["accel_field_errors_total"][3::4] == [2, 4, 2, 4]
        backend.close()
    finally:
        first.stop()
        second.stop()
