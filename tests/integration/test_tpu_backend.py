"""The tpu backend in this process: the real gRPC client against the fake metric service."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from exporter.backends.tpu import TpuBackend
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
