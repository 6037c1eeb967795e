#!/usr/bin/env python3
"""A fake ``nvidia-smi`` that reads the fake NVML's scenario (``FAKE_NVML_STATE``).

It answers the two read-only forms gpu-validate uses, formatted as the real tool
prints them: ``--help-query-gpu`` (the fields it offers, one quoted name per
entry) and ``--query-gpu=a,b --format=csv,noheader,nounits`` (one row per GPU;
``[N/A]`` where the fake NVML would answer NOT_SUPPORTED or "not available").
Units are nvidia-smi's: MiB (floored), W with two decimals, MHz, percent, °C.

It reads the state file directly (``tests/fakes/nvml/control.py``'s mirror of the
struct), not through NVML, so it is a witness independent of pynvml and of the
exporter. ``FAKE_NVIDIA_SMI_OVERRIDE`` (JSON ``{"field": "text"}``) replaces the
text printed for a field on every GPU: a test's way to make it disagree.
"""

from __future__ import annotations

import ctypes
import json
import mmap
import os
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.fakes.nvml.control import State

NA = "[N/A]"
MIB = 1 << 20
U32_NA = 0xFFFFFFFF
# nvmlClocksEventReason* bits (nvml.h)
REASON_BITS = {
    "gpu_idle": 0x1,
    "applications_clocks_setting": 0x2,
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sync_boost": 0x10,
    "sw_thermal_slowdown": 0x20,
    "hw_thermal_slowdown": 0x40,
    "hw_power_brake_slowdown": 0x80,
}
CLOCKS = {"graphics": 0, "sm": 1, "memory": 2, "video": 3}


def _text(raw: bytes) -> str:
    return raw.split(b"\0", 1)[0].decode()


def _u32(value: int, fmt: Callable[[int], str] = str) -> str:
    return NA if value == U32_NA else fmt(value)


def _yes(value: int) -> str:
    return "Yes" if value else "No"


def fields(state: State) -> dict[str, Callable[[int, object], str]]:
    """nvidia-smi field name -> how to print it for GPU ``i`` (device struct ``d``)."""
    out: dict[str, Callable[[int, object], str]] = {
        "index": lambda i, d: str(i),
        "count": lambda i, d: str(state.device_count),
        "uuid": lambda i, d: _text(d.uuid),
        "name": lambda i, d: _text(d.name),
        "serial": lambda i, d: _text(d.serial) or NA,
        "vbios_version": lambda i, d: _text(d.vbios),
        "driver_version": lambda i, d: _text(state.driver_version),
        "pci.bus_id": lambda i, d: (
            f"{d.pci_domain:08X}:{d.pci_bus & 0xFF:02X}:{d.pci_device & 0x1F:02X}.0"
        ),
        "mig.mode.current": lambda i, d: "Enabled" if d.mig_mode else "Disabled",
        "memory.total": lambda i, d: str(d.memory_total // MIB),
        "memory.reserved": lambda i, d: str(d.memory_reserved // MIB),
        "memory.used": lambda i, d: str(d.memory_used // MIB),
        "memory.free": lambda i, d: str(
            (d.memory_total - d.memory_used - d.memory_reserved) // MIB
        ),
        "temperature.gpu": lambda i, d: str(d.temperature_gpu),
        "temperature.memory": lambda i, d: (
            str(d.temperature_memory) if d.temperature_memory else NA
        ),
        "power.draw": lambda i, d: _u32(d.power_mw, lambda v: f"{v / 1000:.2f}"),
        "enforced.power.limit": lambda i, d: _u32(d.power_limit_mw, lambda v: f"{v / 1000:.2f}"),
        "power.limit": lambda i, d: _u32(d.power_limit_mw, lambda v: f"{v / 1000:.2f}"),
        "utilization.gpu": lambda i, d: _u32(d.util_gpu),
        "utilization.memory": lambda i, d: _u32(d.util_memory),
        "utilization.encoder": lambda i, d: _u32(d.util_encoder),
        "utilization.decoder": lambda i, d: _u32(d.util_decoder),
        "fan.speed": lambda i, d: str(d.fan_percent[0]) if d.fan_count else NA,
        "pstate": lambda i, d: f"P{d.pstate}",
        "pcie.link.gen.current": lambda i, d: _u32(d.pcie_gen),
        "pcie.link.gen.max": lambda i, d: _u32(d.pcie_max_gen),
        "pcie.link.width.current": lambda i, d: _u32(d.pcie_width),
        "pcie.link.width.max": lambda i, d: _u32(d.pcie_max_width),
        "ecc.mode.current": lambda i, d: "Enabled" if d.ecc_enabled else "Disabled",
        "retired_pages.single_bit_ecc.count": lambda i, d: str(d.retired_pages[0]),
        "retired_pages.double_bit.count": lambda i, d: str(d.retired_pages[1]),
        "retired_pages.pending": lambda i, d: _yes(d.retired_pending),
        "remapped_rows.correctable": lambda i, d: str(d.remapped_corrected),
        "remapped_rows.uncorrectable": lambda i, d: str(d.remapped_uncorrected),
        "remapped_rows.pending": lambda i, d: _yes(d.remapped_pending),
        "remapped_rows.failure": lambda i, d: _yes(d.remapped_failure),
    }
    for kind, t in (("corrected", 0), ("uncorrected", 1)):
        for counter, c in (("volatile", 0), ("aggregate", 1)):
            out[f"ecc.errors.{kind}.{counter}.total"] = lambda i, d, t=t, c=c: (
                str(d.ecc[t][c]) if d.ecc_enabled else NA
            )
    for clock, k in CLOCKS.items():
        out[f"clocks.current.{clock}"] = lambda i, d, k=k: _u32(d.clock_mhz[k])
        if clock != "video":
            out[f"clocks.max.{clock}"] = lambda i, d, k=k: _u32(d.max_clock_mhz[k])
    for reason, bit in REASON_BITS.items():
        out[f"clocks_event_reasons.{reason}"] = lambda i, d, bit=bit: (
            "Active" if d.clocks_event_reasons & bit else "Not Active"
        )
    return out


def main(argv: list[str]) -> int:
    path = os.environ.get("FAKE_NVML_STATE")
    if not path:
        print("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.")
        return 9
    with open(path, "rb") as f:
        mapped = mmap.mmap(f.fileno(), ctypes.sizeof(State), access=mmap.ACCESS_READ)
    state = State.from_buffer_copy(mapped)
    table = fields(state)
    if argv == ["--help-query-gpu"]:
        print('List of valid properties to query for the switch "--query-gpu=":\n')
        for name in table:
            print(f'"{name}"\nThe {name} of the GPU.\n')
        return 0
    query = [a.split("=", 1)[1] for a in argv if a.startswith("--query-gpu=")]
    if len(query) != 1 or "--format=csv,noheader,nounits" not in argv or len(argv) != 2:
        print(f"fake nvidia-smi: unsupported arguments {argv}", file=sys.stderr)
        return 2
    names = query[0].split(",")
    for name in names:
        if name not in table:
            print(f'Field "{name}" is not a valid field to query.\n')
            return 2
    override = json.loads(os.environ.get("FAKE_NVIDIA_SMI_OVERRIDE", "{}"))
    for i in range(state.device_count):
        d = state.devices[i]
        print(", ".join(override.get(n, table[n](i, d)) for n in names))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
