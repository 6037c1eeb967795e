"""Read one AMD GPU through the amdsmi Python API and turn the answers into readings.

Runs inside the worker process. Every vendor call goes through
:meth:`DeviceReader.call`, the boundary where amdsmi exceptions are converted:
a status meaning "not offered here" omits the field silently, a status
meaning the GPU or its driver is gone raises
:class:`~exporter.backends.contract.DeviceGone`, anything else omits the field
and is remembered as a failure (the table: :data:`CODES`). Values the library marks
"N/A" (all-ones in the C struct) are omitted, never exported as numbers.
Units are converted exactly to the catalog's base units.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from exporter.backend_api.wire import Rows, new_rows
from exporter.backends.contract import MHZ, U16_MAX, U32_MAX, U64_MAX, Codes, Emitter, number
from exporter.family_names import (
    ACCEL_AMD_GTT_TOTAL_BYTES,
    ACCEL_AMD_GTT_USED_BYTES,
    ACCEL_AMD_JPEG_ACTIVITY_RATIO,
    ACCEL_AMD_MM_ACTIVITY_RATIO,
    ACCEL_AMD_PCIE_BANDWIDTH_BYTES_PER_SECOND,
    ACCEL_AMD_PCIE_NAK_RECEIVED_TOTAL,
    ACCEL_AMD_PCIE_NAK_SENT_TOTAL,
    ACCEL_AMD_PCIE_OTHER_END_RECOVERIES_TOTAL,
    ACCEL_AMD_PCIE_RECOVERIES_TOTAL,
    ACCEL_AMD_PCIE_REPLAY_ROLLOVERS_TOTAL,
    ACCEL_AMD_PROCESS_COMPUTE_UNITS,
    ACCEL_AMD_VCN_ACTIVITY_RATIO,
    ACCEL_AMD_VIOLATION_RESIDENCY_TOTAL,
    ACCEL_AMD_VIOLATION_SAMPLES_TOTAL,
    ACCEL_AMD_VISIBLE_VRAM_TOTAL_BYTES,
    ACCEL_AMD_VISIBLE_VRAM_USED_BYTES,
    ACCEL_AMD_XCP_UTILIZATION_RATIO,
    ACCEL_AMD_XGMI_LINK_UP,
    ACCEL_AMD_XGMI_READ_BYTES_TOTAL,
    ACCEL_AMD_XGMI_WRITE_BYTES_TOTAL,
    ACCEL_CLOCK_HERTZ,
    ACCEL_CLOCK_MAX_HERTZ,
    ACCEL_CLOCK_THROTTLE_ACTIVE,
    ACCEL_ENERGY_JOULES_TOTAL,
    ACCEL_FAN_SPEED_RATIO,
    ACCEL_MEMORY_BANDWIDTH_UTILIZATION_RATIO,
    ACCEL_MEMORY_FREE_BYTES,
    ACCEL_MEMORY_TOTAL_BYTES,
    ACCEL_MEMORY_USED_BYTES,
    ACCEL_PCIE_LINK_GENERATION,
    ACCEL_PCIE_LINK_MAX_GENERATION,
    ACCEL_PCIE_LINK_MAX_WIDTH,
    ACCEL_PCIE_LINK_WIDTH,
    ACCEL_PCIE_REPLAYS_TOTAL,
    ACCEL_POWER_LIMIT_WATTS,
    ACCEL_POWER_WATTS,
    ACCEL_PROCESS_MEMORY_BYTES,
    ACCEL_PROCESSES,
    ACCEL_TEMPERATURE_CELSIUS,
    ACCEL_UTILIZATION_RATIO,
)

# Statuses meaning "this device does not offer this field": omitted silently.
UNSUPPORTED = frozenset({"not_supported", "not_yet_implemented", "no_data", "setting_unavailable"})
# Statuses meaning the GPU or its driver went away (off the bus, reset failed, unbound).
LOST = frozenset(
    {
        "io",
        "file_error",
        "not_found",
        "file_not_found",
        "directory_not_found",
        "driver_not_loaded",
        "no_drv",
        "amdgpu_restart_err",
    }
)
# The backend contract's table (exporter.backends.contract), keyed by status name: a
# failed field's reason is the status name, a gone GPU is down as gpu_lost.
CODES: Codes[str] = Codes(names={}, absent=UNSUPPORTED, gone=dict.fromkeys(LOST, "gpu_lost"))

# "N/A" of a fan speed or its maximum, as a signed 64-bit -1 or all ones at the
# widths the library and the SMU use.
FAN_NOT_AVAILABLE = (-1, U16_MAX, U32_MAX, U64_MAX)
# Exact scales are ints, so integral values stay ints (cheaper for JSON both ways).
KIB = 1024
MICRO_PER_UNIT = 1_000_000

# amdsmi temperature type name -> sensor label.
TEMPERATURES = (
    ("EDGE", "edge"),
    ("HOTSPOT", "hotspot"),
    ("VRAM", "memory"),
    ("HBM_0", "hbm_0"),
    ("HBM_1", "hbm_1"),
    ("HBM_2", "hbm_2"),
    ("HBM_3", "hbm_3"),
)
# amdsmi ECC count key -> accel_ecc_errors_total type: the words every vendor uses
# (catalog/vocabulary.py), not amdsmi's "correctable" / "uncorrectable".
ECC_TOTALS = (
    ("correctable_count", "corrected"),
    ("uncorrectable_count", "uncorrected"),
    ("deferred_count", "deferred"),
)
# amdsmi clock type name -> clock label (GFX is "graphics", as for NVIDIA).
CLOCKS = (
    ("GFX", "graphics"),
    ("MEM", "memory"),
    ("SOC", "soc"),
    ("DF", "data_fabric"),
    ("VCLK0", "video"),
    ("DCLK0", "decode"),
)
# gpu_metrics residency accumulator -> reason label.
RESIDENCIES = (
    ("prochot_residency_acc", "prochot"),
    ("ppt_residency_acc", "ppt"),
    ("socket_thm_residency_acc", "socket_thermal"),
    ("vr_thm_residency_acc", "vr_thermal"),
    ("hbm_thm_residency_acc", "hbm_thermal"),
)
# gpu_metrics xcp_stats accumulator (per XCC) -> reason label, per XCP.
XCP_RESIDENCIES = (
    ("xcp_stats.gfx_below_host_limit_ppt_acc", "gfx_below_host_limit_ppt"),
    ("xcp_stats.gfx_below_host_limit_thm_acc", "gfx_below_host_limit_thermal"),
    ("xcp_stats.gfx_below_host_limit_total_acc", "gfx_below_host_limit_total"),
    ("xcp_stats.gfx_low_utilization_acc", "gfx_low_utilization"),
)
# amdsmi temperature metric name -> limit label.
TEMPERATURE_LIMITS = (("MAX", "max"), ("CRITICAL", "critical"), ("EMERGENCY", "emergency"))
# violation status flag -> throttle reason label (same vocabulary as the residencies).
THROTTLES = (
    ("active_prochot_thrm", "prochot"),
    ("active_ppt_pwr", "ppt"),
    ("active_socket_thrm", "socket_thermal"),
    ("active_vr_thrm", "vr_thermal"),
    ("active_hbm_thrm", "hbm_thermal"),
    ("active_gfx_clk_below_host_limit", "gfx_clock_below_host_limit"),
)
# amdsmi memory type name -> (total family, used family): VRAM shares NVIDIA's names.
MEMORY_POOLS = (
    ("VRAM", ACCEL_MEMORY_TOTAL_BYTES, ACCEL_MEMORY_USED_BYTES),
    ("VIS_VRAM", ACCEL_AMD_VISIBLE_VRAM_TOTAL_BYTES, ACCEL_AMD_VISIBLE_VRAM_USED_BYTES),
    ("GTT", ACCEL_AMD_GTT_TOTAL_BYTES, ACCEL_AMD_GTT_USED_BYTES),
)
# PCIe transfer rate -> link generation. amdsmi reports MT/s; some builds (the
# SR-IOV host library) report GT/s, whose integers do not collide with MT/s ones
# (2.5 GT/s cannot be told from 2 or 3, so generation 1 is MT/s only).
PCIE_GENERATIONS = {
    **{2500: 1, 5000: 2, 8000: 3, 16000: 4, 32000: 5, 64000: 6, 128000: 7},
    **{5: 2, 8: 3, 16: 4, 32: 5, 64: 6, 128: 7},
}


@dataclass(frozen=True)
class Failure:
    """One field that could not be read: an amdsmi status name, or bad_value with detail."""

    field: str
    reason: str
    detail: str = ""


def status_name(names: Mapping[int, str], code: int) -> str:
    """``AMDSMI_STATUS_NO_PERM`` -> ``no_perm``; unknown codes -> ``status_<n>``."""
    name = names.get(code)
    if not name:
        return f"status_{code}"
    return name.removeprefix("AMDSMI_STATUS_").lower()


def pcie_generation(rate: float | None) -> float | None:
    """The PCIe generation of a transfer rate (MT/s or GT/s), None when not a standard rate."""
    if rate is None:
        return None
    gen = PCIE_GENERATIONS.get(int(rate))
    return float(gen) if gen is not None else None


def pcie_max_generation(static: Mapping[str, Any]) -> float | None:
    """The PCIe generation a link supports.

    The interface version amdsmi states when it gives one (it does not depend on
    the unit of the rates, which differs between builds), else that of the
    maximum rate.
    """
    for key in ("max_pcie_interface_version", "pcie_interface_version"):
        gen = number(static.get(key), U32_MAX)
        if gen is not None and 1 <= gen <= max(PCIE_GENERATIONS.values()):
            return gen
    return pcie_generation(number(static.get("max_pcie_speed"), U32_MAX))


def first(*values: float | None) -> float | None:
    """The first value that is not None."""
    return next((v for v in values if v is not None), None)


@dataclass
class DeviceReader:
    """Reads one device for one poll, collecting readings and failures."""

    api: Any  # an AmdBinding: functions, status names, enum tables
    handle: Any
    position: int  # of the device in the inventory: its rows' first item
    readings: Rows = field(default_factory=new_rows)  # the reply's, shared by its devices
    failures: list[Failure] = field(default_factory=list)
    successes: int = 0
    # On a partitioned GPU: True, and the XCP this device is (None when unknown).
    partitioned: bool = False
    xcp: int | None = None
    # Items of an answer skipped as malformed this poll, by reason.
    errors: Counter[str] = field(default_factory=Counter)
    # The device's row prefixes, kept by the caller across polls (None: this poll's own).
    prefixes: dict[tuple[str, ...], tuple[Any, ...]] | None = None
    # add(metric, value, *labels): the contract's Emitter.add, bound once (a wrapper
    # method would cost a call per reading). None and non-finite values are dropped
    # there; amdsmi declares no sentinel set because its "N/A" is all ones at each
    # field's own width (16, 32 or 64 bits), which number() drops before any scaling.
    add: Callable[..., None] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.add = Emitter(self.position, self.readings, cache=self.prefixes).add

    def failure(self, name: str, status: str) -> None:
        """Remember a field that failed outside :meth:`call`."""
        self.failures.append(Failure(name, status))

    def call(self, name: str, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(handle, *args)``; None when the field is unsupported or failed."""
        api = self.api
        try:
            result = fn(self.handle, *args)
        except api.AmdSmiLibraryException as exc:
            status = status_name(api.status_names, int(exc.get_error_code()))
            reason = CODES.failed(status, name)  # DeviceGone when the GPU is
            if reason:
                self.failures.append(Failure(name, reason))
            return None
        except Exception as exc:
            # The wrapper parses strings and structs (int(serial, 16), enum
            # lookups, ctypes conversions): whatever it raises on a malformed
            # answer or a version mismatch loses that field only.
            self.failures.append(Failure(name, "bad_value", f"{type(exc).__name__}: {exc}"))
            return None
        self.successes += 1
        return result

    def down_reason(self) -> str:
        """Why the device counts as down, or "" when it answered something."""
        if self.successes or not self.failures:
            return ""
        return self.failures[0].reason


def read_activity(r: DeviceReader) -> None:
    """GFX, memory controller and multimedia busy shares."""
    act = r.call("activity", r.api.amdsmi_get_gpu_activity)
    if act is None:
        return
    for key, metric in (
        ("gfx_activity", ACCEL_UTILIZATION_RATIO),
        ("umc_activity", ACCEL_MEMORY_BANDWIDTH_UTILIZATION_RATIO),
        ("mm_activity", ACCEL_AMD_MM_ACTIVITY_RATIO),
    ):
        if key == "gfx_activity" and r.partitioned:
            # AMD: GFX activity is valid only on an unpartitioned GPU; a
            # partition's comes from its XCP (read_gpu_metrics).
            continue
        pct = number(act.get(key), U16_MAX, U32_MAX)
        r.add(metric, None if pct is None or pct > 100 else pct / 100.0)


def read_memory(r: DeviceReader) -> None:
    """VRAM (shared names), visible VRAM and GTT (AMD-only), in bytes."""
    for kind, total_metric, used_metric in r.api.memory_pools:
        total = number(r.call("memory_total", r.api.amdsmi_get_gpu_memory_total, kind), U64_MAX)
        used = number(r.call("memory_usage", r.api.amdsmi_get_gpu_memory_usage, kind), U64_MAX)
        r.add(total_metric, total)
        r.add(used_metric, used)
        if kind == r.api.vram and total is not None and used is not None:
            r.add(ACCEL_MEMORY_FREE_BYTES, max(total - used, 0.0))


def read_temperatures(r: DeviceReader) -> None:
    """Current temperature of every sensor the device has, in celsius."""
    current = r.api.temperature_current
    if current is None:
        return
    for kind, sensor in r.api.temperatures:
        value = r.call("temperature", r.api.amdsmi_get_temp_metric, kind, current)
        r.add(ACCEL_TEMPERATURE_CELSIUS, number(value, U16_MAX, U32_MAX), sensor)


def read_power(r: DeviceReader) -> None:
    """Socket power and the enforced limit (W), energy (accumulator x resolution, uJ -> J)."""
    info = r.call("power", r.api.amdsmi_get_power_info)
    if info is not None:
        sentinels = (U16_MAX, U32_MAX, U64_MAX)
        r.add(
            ACCEL_POWER_WATTS,
            first(
                number(info.get("socket_power"), *sentinels),
                number(info.get("current_socket_power"), *sentinels),
                number(info.get("average_socket_power"), *sentinels),
            ),
        )
        limit = number(info.get("power_limit"), *sentinels)
        if limit is None:
            cap = r.call("power_cap", r.api.amdsmi_get_power_cap_info)
            if cap is not None:
                uw = number(cap.get("power_cap"), U64_MAX)
                limit = None if uw is None else uw / MICRO_PER_UNIT
        r.add(ACCEL_POWER_LIMIT_WATTS, limit)
    energy = r.call("energy", r.api.amdsmi_get_energy_count)
    if energy is not None:
        acc = number(energy.get("energy_accumulator"), U64_MAX)
        resolution = number(energy.get("counter_resolution"))
        if acc is not None and resolution is not None:
            r.add(ACCEL_ENERGY_JOULES_TOTAL, acc * resolution / MICRO_PER_UNIT)


def read_clocks(r: DeviceReader) -> None:
    """Current and maximum frequency of each clock domain, MHz -> Hz."""
    for kind, clock in r.api.clocks:
        info = r.call("clock", r.api.amdsmi_get_clock_info, kind)
        if info is None:
            continue
        # Some builds fill these from gpu_metrics' 16-bit fields, whose "N/A" is 0xFFFF:
        # no clock domain runs at 65.535 GHz.
        cur = number(info.get("clk"), U16_MAX, U32_MAX)
        top = number(info.get("max_clk"), U16_MAX, U32_MAX)
        r.add(ACCEL_CLOCK_HERTZ, None if cur is None else cur * MHZ, clock)
        r.add(ACCEL_CLOCK_MAX_HERTZ, None if top is None else top * MHZ, clock)


def read_fan(r: DeviceReader) -> None:
    """Fan 0 speed as a share of its maximum (Instinct boards have none: omitted)."""
    speed = number(r.call("fan_speed", r.api.amdsmi_get_gpu_fan_speed, 0), *FAN_NOT_AVAILABLE)
    if speed is None:
        return
    top = number(r.call("fan_speed_max", r.api.amdsmi_get_gpu_fan_speed_max, 0), *FAN_NOT_AVAILABLE)
    # A speed outside 0..max is not a reading: dropped, not clamped into a plausible one.
    if top is not None and top > 0 and 0 <= speed <= top:
        r.add(ACCEL_FAN_SPEED_RATIO, speed / top, "0")


def read_pcie(r: DeviceReader) -> None:
    """PCIe link state, bandwidth (Mb/s -> bytes/s) and error counters."""
    info = r.call("pcie", r.api.amdsmi_get_pcie_info)
    if info is None:
        return
    static, metric = info.get("pcie_static", {}), info.get("pcie_metric", {})
    # A width of 0 lanes means the driver reported none.
    r.add(ACCEL_PCIE_LINK_WIDTH, number(metric.get("pcie_width"), U16_MAX) or None)
    r.add(ACCEL_PCIE_LINK_GENERATION, pcie_generation(number(metric.get("pcie_speed"), U32_MAX)))
    r.add(ACCEL_PCIE_LINK_MAX_WIDTH, number(static.get("max_pcie_width"), U16_MAX) or None)
    r.add(ACCEL_PCIE_LINK_MAX_GENERATION, pcie_max_generation(static))
    mbps = number(metric.get("pcie_bandwidth"), U32_MAX)
    r.add(ACCEL_AMD_PCIE_BANDWIDTH_BYTES_PER_SECOND, None if mbps is None else mbps * 1e6 / 8)
    for key, name in (
        ("pcie_replay_count", ACCEL_PCIE_REPLAYS_TOTAL),
        ("pcie_replay_roll_over_count", ACCEL_AMD_PCIE_REPLAY_ROLLOVERS_TOTAL),
        ("pcie_lc_perf_other_end_recovery_count", ACCEL_AMD_PCIE_OTHER_END_RECOVERIES_TOTAL),
        ("pcie_l0_to_recovery_count", ACCEL_AMD_PCIE_RECOVERIES_TOTAL),
        ("pcie_nak_sent_count", ACCEL_AMD_PCIE_NAK_SENT_TOTAL),
        ("pcie_nak_received_count", ACCEL_AMD_PCIE_NAK_RECEIVED_TOTAL),
    ):
        r.add(name, number(metric.get(key), U32_MAX, U64_MAX))


def _indexed(r: DeviceReader, metric: str, values: Any, scale: float, *sentinels: int) -> None:
    if not isinstance(values, list):
        return
    for i, raw in enumerate(values):
        v = number(raw, *sentinels)
        r.add(metric, None if v is None else v * scale, str(i))


def read_gpu_metrics(r: DeviceReader) -> None:
    """Per-engine multimedia activity, XGMI links and throttle residency from gpu_metrics."""
    m = r.call("gpu_metrics", r.api.amdsmi_get_gpu_metrics_info)
    if m is None:
        return
    _indexed(r, ACCEL_AMD_VCN_ACTIVITY_RATIO, m.get("vcn_activity"), 0.01, U16_MAX)
    _indexed(r, ACCEL_AMD_JPEG_ACTIVITY_RATIO, m.get("jpeg_activity"), 0.01, U16_MAX)
    _indexed(r, ACCEL_AMD_XGMI_READ_BYTES_TOTAL, m.get("xgmi_read_data_acc"), KIB, U64_MAX)
    _indexed(r, ACCEL_AMD_XGMI_WRITE_BYTES_TOTAL, m.get("xgmi_write_data_acc"), KIB, U64_MAX)
    status = m.get("xgmi_link_status")
    if isinstance(status, list):
        for i, raw in enumerate(status):
            v = number(raw, U16_MAX)
            # 0 down, 1 up; anything else (e.g. 2, disabled) is not a link state.
            r.add(ACCEL_AMD_XGMI_LINK_UP, v if v in (0, 1) else None, str(i))
    samples = number(m.get("accumulation_counter"), U64_MAX)
    if samples is not None:
        r.add(ACCEL_AMD_VIOLATION_SAMPLES_TOTAL, samples)
        for key, reason in RESIDENCIES:
            r.add(ACCEL_AMD_VIOLATION_RESIDENCY_TOTAL, number(m.get(key), U64_MAX), reason, "")
    read_xcps(r, m, samples is not None)


def _xcp_rows(m: Mapping[str, Any], key: str) -> list[Any]:
    rows = m.get(key)
    return rows if isinstance(rows, list) else []


def read_xcps(r: DeviceReader, m: Mapping[str, Any], residency: bool) -> None:
    """Per-XCP busy share and throttle accumulators from gpu_metrics ``xcp_stats``.

    An XCP is present when one of its XCCs has a busy value. On an
    unpartitioned GPU every present XCP is exported (there is one). On a
    partitioned GPU every partition reads the whole GPU's table, so a device
    exports only its own XCP, and its ``accel_utilization_ratio`` is that XCP's
    busy share (none when it is unknown: never the whole GPU's figure). Values
    of an XCP are means over its XCCs, so a residency's rate divided by the
    samples' rate stays a share.
    """
    busy_rows = _xcp_rows(m, "xcp_stats.gfx_busy_inst")
    if r.partitioned and r.xcp is None:
        return
    wanted = [r.xcp] if r.partitioned else range(len(busy_rows))
    for x in wanted:
        row = busy_rows[x] if x is not None and 0 <= x < len(busy_rows) else None
        present = [c for c, v in enumerate(row or []) if number(v, U32_MAX) is not None]
        if not present:
            if r.partitioned:
                r.errors["xcp_not_available"] += 1
            continue
        busy = [number(row[c], U32_MAX) for c in present]  # type: ignore[index]
        valid = [float(v) for v in busy if v is not None and 0 <= v <= 100]
        r.errors["xcp_out_of_range"] += len(busy) - len(valid)
        label = str(x)
        if valid:
            share = sum(valid) / len(valid) / 100.0
            r.add(ACCEL_AMD_XCP_UTILIZATION_RATIO, share, label)
            if r.partitioned:
                r.add(ACCEL_UTILIZATION_RATIO, share)
        if not residency:
            continue
        for key, reason in XCP_RESIDENCIES:
            rows = _xcp_rows(m, key)
            values = rows[x] if x is not None and x < len(rows) else []
            values = values if isinstance(values, list) else []
            got = [number(values[c], U64_MAX) if c < len(values) else None for c in present]
            ok = [v for v in got if v is not None]
            r.errors["xcp_value_not_available"] += len(got) - len(ok)
            if ok:
                r.add(ACCEL_AMD_VIOLATION_RESIDENCY_TOTAL, sum(ok) / len(ok), reason, label)


def read_throttle(r: DeviceReader) -> None:
    """Which throttle reasons are active now (amdsmi violation status)."""
    v = r.call("violation_status", r.api.amdsmi_get_violation_status)
    if v is None:
        return
    for key, reason in THROTTLES:
        flag = v.get(key)
        if isinstance(flag, bool):
            r.add(ACCEL_CLOCK_THROTTLE_ACTIVE, 1 if flag else 0, reason)


def read_processes(r: DeviceReader) -> None:
    """Processes on the device: count, VRAM and compute units per pid."""
    procs = r.call("processes", r.api.amdsmi_get_gpu_process_list)
    if procs is None:
        return
    r.add(ACCEL_PROCESSES, len(procs))
    for p in procs:
        pid = str(p.get("pid"))
        usage = p.get("memory_usage") or {}
        r.add(ACCEL_PROCESS_MEMORY_BYTES, number(usage.get("vram_mem"), U64_MAX), pid)
        r.add(ACCEL_AMD_PROCESS_COMPUTE_UNITS, number(p.get("cu_occupancy"), U32_MAX), pid)


FAST: tuple[Callable[[DeviceReader], None], ...] = (
    read_activity,
    read_memory,
    read_temperatures,
    read_power,
    read_clocks,
    read_fan,
    read_pcie,
    read_gpu_metrics,
    read_throttle,
)
