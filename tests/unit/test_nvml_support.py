"""Pure helpers of the NVML backend: value decoding, reasons (emission: test_backend_contract)."""

from __future__ import annotations

import struct

import pytest

from exporter.backends import nvml_support as nv


def raw(fmt: str, value) -> int:
    data = struct.pack(fmt, value).ljust(8, b"\0")
    return struct.unpack("=Q", data)[0]


@pytest.mark.parametrize(
    ("kind", "fmt", "value", "expected"),
    [
        (0, "=d", 2.5, 2.5),
        (1, "=I", 4000000000, 4000000000.0),
        (3, "=Q", 2**40 + 3, float(2**40 + 3)),
        (4, "=q", -7, -7.0),
        (5, "=i", -3, -3.0),
        (6, "=H", 1234, 1234.0),
        (6, "=H", 0xFFFF, float(nv.U32_MAX)),  # all-ones ushort becomes the u32 sentinel
    ],
)
def test_union_values_by_type(kind, fmt, value, expected):
    assert nv.union_value(kind, raw(fmt, value)) == expected


def test_uint_ignores_upper_bytes_of_the_union():
    assert nv.union_value(1, (0xDEAD << 32) | 17) == 17.0


def test_reasons_and_cuda_version():
    assert nv.reason_of(15) == "gpu_lost"
    assert nv.reason_of(12345) == "nvml_error_12345"
    assert nv.cuda_version(12080) == "12.8"
    assert nv.cuda_version(13000) == "13.0"
    assert nv.text(b"GPU-1\x00 ") == "GPU-1"


def test_every_pynvml_function_the_backend_calls_is_resolved_at_bootstrap():
    # A pynvml function called by name without being in FUNCTIONS would escape the
    # binding's stand-ins: on a release that lacks it, a whole poll would fail.
    import re
    from pathlib import Path

    called: set[str] = set()
    for module in (
        "nvml.py",
        "nvml_device.py",
        "nvml_events.py",
        "nvml_gpu.py",
        "nvml_gpm.py",
        "nvml_reliability.py",
    ):
        text = (Path(nv.__file__).parent / module).read_text()
        called |= set(re.findall(r"\.(nvml[A-Z]\w+)", text))  # n.nvmlX(...), gpu.call(n.nvmlX)
        called |= set(re.findall(r'"(nvmlDevice\w+|nvmlGpm\w+)"', text))  # table rows
    # Not functions: a struct version constant (checked with has()), a log name
    # (the call is GetMemoryInfo(version=...)).
    called -= {"nvmlMemory_v2", "nvmlDeviceGetMemoryInfo_v2", "nvmlReturn"}  # nvmlReturn: a field
    assert called - set(nv.FUNCTIONS) == set()
    assert len(called) > 40


def test_drop_removes_the_rows_of_one_device_only():
    from exporter.backend_api.wire import drop

    rows = {
        "accel_power_watts": [0, 1.0, 1, 2.0, 2, 3.0],
        "accel_clock_hertz": [1, "sm", 5.0, 0, "sm", 6.0, 1, "graphics", 7.0],
    }
    drop(rows, 1)
    assert rows == {"accel_power_watts": [0, 1.0, 2, 3.0], "accel_clock_hertz": [0, "sm", 6.0]}
