"""The fake's C structs agree with pynvml's ctypes classes and with control.py's mirror.

A drift (a new pynvml moving a field, an edit to nvml_fake_state.h) fails here
instead of as garbage values somewhere else.
"""

from __future__ import annotations

import ctypes

import pynvml
import pytest

from tests.fakes.nvml import control

PYNVML_STRUCTS = {
    "nvmlPciInfo_t": pynvml.nvmlPciInfo_t,
    "nvmlUtilization_t": pynvml.c_nvmlUtilization_t,
    "nvmlMemory_t": pynvml.c_nvmlMemory_t,
    "nvmlMemory_v2_t": pynvml.c_nvmlMemory_v2_t,
    "nvmlTemperature_v1_t": pynvml.c_nvmlTemperature_v1_t,
    "nvmlProcessInfo_t": pynvml.c_nvmlProcessInfo_t,
    "nvmlProcessUtilizationSample_t": pynvml.c_nvmlProcessUtilizationSample_t,
    "nvmlFieldValue_t": pynvml.c_nvmlFieldValue_t,
    "nvmlEventData_t": pynvml.c_nvmlEventData_t,
    "nvmlGpmMetric_t": pynvml.c_nvmlGpmMetric_t,
    "nvmlGpmMetricsGet_t": pynvml.c_nvmlGpmMetricsGet_t,
    "nvmlGpmSupport_t": pynvml.c_nvmlGpmSupport_t,
    "nvmlGpuFabricInfo_v3_t": pynvml.c_nvmlGpuFabricInfo_v3_t,
    "nvmlMarginTemperature_v1_t": pynvml.c_nvmlMarginTemperature_v1_t,
    "nvmlEccSramErrorStatus_v1_t": pynvml.c_nvmlEccSramErrorStatus_v1_t,
    "nvmlPlatformInfo_v2_t": pynvml.c_nvmlPlatformInfo_v2_t,
}


@pytest.fixture(scope="module")
def layout(fake_nvml_lib):
    lib = ctypes.CDLL(str(fake_nvml_lib))
    lib.fake_nvml_layout.argtypes = [ctypes.c_char_p]
    lib.fake_nvml_layout.restype = ctypes.c_long
    return lambda name: lib.fake_nvml_layout(name.encode())


def check(layout, c_name: str, cls: type[ctypes.Structure]) -> None:
    assert layout(c_name) == ctypes.sizeof(cls), f"sizeof {c_name}"
    for field in cls._fields_:
        name = field[0]
        assert layout(f"{c_name}.{name}") == getattr(cls, name).offset, f"{c_name}.{name}"


@pytest.mark.parametrize("c_name", sorted(PYNVML_STRUCTS))
def test_nvml_structs_match_pynvml(layout, c_name):
    check(layout, c_name, PYNVML_STRUCTS[c_name])


@pytest.mark.parametrize("cls", list(control.C_NAMES), ids=lambda c: c.__name__)
def test_state_mirror_matches_the_header(layout, cls):
    check(layout, control.C_NAMES[cls], cls)


def test_unknown_names_are_refused(layout):
    assert layout("nvmlNoSuchThing_t") == -1


def test_backend_struct_decoders_match_pynvml():
    from exporter.backends import nvml_support as nv

    assert nv.FIELD_VALUE.size == ctypes.sizeof(pynvml.c_nvmlFieldValue_t)
    entries = (pynvml.c_nvmlFieldValue_t * 3)()
    for i, (kind, code, raw) in enumerate(
        [(3, 0, 2**64 - 2), (1, 15, 7), (0, 0, 4613937818241073152)]
    ):
        entries[i].fieldId, entries[i].scopeId = 140 + i, i
        entries[i].timestamp, entries[i].latencyUsec = -5, -6
        entries[i].valueType, entries[i].nvmlReturn = kind, code
        entries[i].value.ullVal = raw
    kinds, codes, raws = nv.field_columns(entries)
    assert (kinds.tolist(), codes.tolist(), raws) == (
        [3, 1, 0],
        [0, 15, 0],
        [2**64 - 2, 7, 4613937818241073152],
    )
    assert nv.union_value(0, raws[2]) == 3.0
    assert nv.UTILIZATION.size == ctypes.sizeof(pynvml.c_nvmlUtilization_t)
    assert nv.MEMORY_V1.size == ctypes.sizeof(pynvml.c_nvmlMemory_t)
    assert nv.MEMORY_V2.size == ctypes.sizeof(pynvml.c_nvmlMemory_v2_t)
