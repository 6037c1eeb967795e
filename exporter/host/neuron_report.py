"""One neuron-monitor report (one JSON document, one line), parsed and checked. Pure.

The schema is the one neuron-monitor's user guide documents: runtime groups
under ``neuron_runtime_data[].report`` (``neuroncore_counters``,
``memory_used``, ``neuron_runtime_vcpu_usage``, ``execution_stats``) and system
groups under ``system_data`` (``neuron_hw_counters``), plus
``neuron_hardware_info``. Every group carries an ``error`` string; a group
with one is skipped and named in :attr:`Report.problems`.

Nothing in a line is trusted: a field of the wrong type, a count that is not a
non-negative whole number, a percentage outside 0..100, a non-finite number
or an index out of range makes its group (not the whole report) skipped with
the reason, never a wrong number. Execution counts and ECC events are the
counts of the report's period (deltas), which the caller accumulates.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from typing import Any

from exporter.catalog.vocabulary import NEURON_EXECUTION_ERRORS, NEURON_EXECUTION_STATUSES

# neuron-monitor's execution outcomes and error kinds, as the catalog lists them.
EXEC_STATUS = NEURON_EXECUTION_STATUSES
EXEC_ERRORS = NEURON_EXECUTION_ERRORS
LATENCIES = ("total_latency", "device_latency")
PERCENTILES = ("p0", "p1", "p25", "p50", "p75", "p99", "p100")
MEMORY_CATEGORIES = (
    "constants",
    "model_code",
    "model_shared_scratchpad",
    "runtime_memory",
    "tensors",
)
ECC_FIELDS = {
    "mem_ecc_corrected": "corrected",
    "mem_ecc_uncorrected": "uncorrected",
    "sram_ecc_corrected": "corrected",
    "sram_ecc_uncorrected": "uncorrected",
}
# The uncorrectable fields by memory (accel_neuron_ecc_uncorrected_errors_total{memory}).
UNCORRECTED_FIELDS = {"mem_ecc_uncorrected": "hbm", "sram_ecc_uncorrected": "sram"}
# Bounds on what one report may describe (a trn2.48xlarge has 16 devices, 128 cores).
MAX_RUNTIMES = 256
MAX_CORES = 4096
MAX_DEVICES = 1024
MAX_TAG = 255
# A per-period count past this is not a count (one period is seconds long).
MAX_COUNT = 2**53


class BadReport(ValueError):
    """A line that is not a neuron-monitor report at all."""


class _Bad(ValueError):
    """One group does not have the documented shape (the report goes on without it)."""


@dataclass(frozen=True)
class Runtime:
    """One runtime's groups, checked; empty when a group was absent or skipped."""

    tag: str
    core_utilization: dict[int, float] = field(default_factory=dict)  # nc -> percent
    core_memory: dict[int, dict[str, float]] = field(default_factory=dict)  # nc -> category -> B
    memory: dict[str, float] = field(default_factory=dict)  # host / neuron_device -> bytes
    vcpu: dict[str, float] = field(default_factory=dict)  # user / system -> percent
    status: dict[str, int] = field(default_factory=dict)  # deltas
    errors: dict[str, int] = field(default_factory=dict)  # deltas
    latency: dict[tuple[str, str], float] = field(default_factory=dict)  # (kind, p) -> seconds


@dataclass(frozen=True)
class Hardware:
    """``neuron_hardware_info``: what the driver says about the devices."""

    device_count: int
    cores_per_device: int
    memory_per_device: float
    device_type: str


@dataclass(frozen=True)
class Report:
    """The checked content of one line."""

    runtimes: tuple[Runtime, ...]
    # (device index, corrected|uncorrected) -> events this period (mem + sram).
    ecc: dict[tuple[int, str], int]
    hardware: Hardware | None
    problems: tuple[str, ...]
    # (device index, hbm|sram) -> uncorrectable errors this period, by memory.
    uncorrected: dict[tuple[int, str], int] = field(default_factory=dict)


def _obj(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _Bad(f"{where} is not an object")
    return value


def _group(container: dict[str, Any], name: str) -> dict[str, Any] | None:
    """The group ``name``, None when absent; _Bad when it says it failed."""
    raw = container.get(name)
    if raw is None:
        return None
    group = _obj(raw, name)
    error = group.get("error", "")
    if not isinstance(error, str):
        raise _Bad(f"{name}.error is not a string")
    if error:
        raise _Bad(f"{name} failed: {error[:200]}")
    return group


def _number(value: Any, where: str, upper: float = math.inf) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _Bad(f"{where} is not a number")
    number = float(value)
    if not math.isfinite(number) or number < 0 or number > upper:
        raise _Bad(f"{where} = {value!r} is outside 0..{upper:g}")
    return number


def _count(value: Any, where: str) -> int:
    number = _number(value, where, MAX_COUNT)
    if number != int(number):
        raise _Bad(f"{where} = {value!r} is not a whole count")
    return int(number)


def _index(key: Any, where: str, limit: int) -> int:
    if isinstance(key, bool):
        raise _Bad(f"{where} index {key!r} is not an index")
    if isinstance(key, str) and key.isdigit() and len(key) < 8:
        key = int(key)
    if not isinstance(key, int) or not 0 <= key < limit:
        raise _Bad(f"{where} index {key!r} is not an index below {limit}")
    return key


def _cores(group: dict[str, Any]) -> dict[int, float]:
    cores = _obj(group.get("neuroncores_in_use", {}), "neuroncores_in_use")
    if len(cores) > MAX_CORES:
        raise _Bad(f"{len(cores)} cores, more than {MAX_CORES}")
    out = {}
    for key, item in cores.items():
        nc = _index(key, "neuroncores_in_use", MAX_CORES)
        value = _obj(item, f"neuroncores_in_use.{key}").get("neuroncore_utilization")
        if value is not None:
            out[nc] = _number(value, f"neuroncore {nc} utilization", 100.0)
    return out


def _memory(group: dict[str, Any]) -> tuple[dict[str, float], dict[int, dict[str, float]]]:
    used = _obj(group.get("neuron_runtime_used_bytes", {}), "neuron_runtime_used_bytes")
    totals: dict[str, float] = {
        location: _number(used[location], f"neuron_runtime_used_bytes.{location}")
        for location in ("host", "neuron_device")
        if location in used
    }
    breakdown = _obj(used.get("usage_breakdown", {}), "usage_breakdown")
    per_core = _obj(breakdown.get("neuroncore_memory_usage", {}), "neuroncore_memory_usage")
    if len(per_core) > MAX_CORES:
        raise _Bad(f"{len(per_core)} cores, more than {MAX_CORES}")
    cores: dict[int, dict[str, float]] = {}
    for key, item in per_core.items():
        nc = _index(key, "neuroncore_memory_usage", MAX_CORES)
        item = _obj(item, f"neuroncore_memory_usage.{key}")
        cores[nc] = {c: _number(item[c], f"core {nc} {c}") for c in MEMORY_CATEGORIES if c in item}
    return totals, cores


def _counts(group: dict[str, Any], name: str, keys: tuple[str, ...]) -> dict[str, int]:
    raw = _obj(group.get(name, {}), name)
    return {k: _count(raw[k], f"{name}.{k}") for k in keys if k in raw}


def _latency(group: dict[str, Any]) -> dict[tuple[str, str], float]:
    raw = group.get("latency_stats")
    if raw is None:
        return {}
    out = {}
    for kind, percentiles in _obj(raw, "latency_stats").items():
        if kind not in LATENCIES or percentiles is None:  # null: nothing ran this period
            continue
        percentiles = _obj(percentiles, f"latency_stats.{kind}")
        for p in PERCENTILES:
            if percentiles.get(p) is not None:
                out[(kind, p)] = _number(percentiles[p], f"{kind}.{p}")
    return out


def _runtime(raw: Any, problems: list[str]) -> Runtime | None:
    if not isinstance(raw, dict):
        problems.append("a runtime entry is not an object")
        return None
    tag = raw.get("neuron_runtime_tag")
    if not isinstance(tag, str) or not tag:
        pid = raw.get("pid")
        tag = str(pid) if isinstance(pid, int) and not isinstance(pid, bool) else ""
    tag = tag[:MAX_TAG]
    if not tag:
        problems.append("a runtime has neither a tag nor a pid")
        return None
    error = raw.get("error", "")
    if error:
        problems.append(f"runtime {tag}: {str(error)[:200]}")
        return None
    report = raw.get("report")
    if not isinstance(report, dict):
        problems.append(f"runtime {tag}: report is not an object")
        return None
    out = Runtime(tag)

    def read(name: str, fill: Any) -> None:
        try:
            group = _group(report, name)
            if group is not None:
                fill(group)
        except _Bad as exc:
            problems.append(f"runtime {tag}: {exc}")

    read("neuroncore_counters", lambda g: out.core_utilization.update(_cores(g)))

    def memory(group: dict[str, Any]) -> None:
        totals, cores = _memory(group)
        out.memory.update(totals)
        out.core_memory.update(cores)

    read("memory_used", memory)

    def vcpu(group: dict[str, Any]) -> None:
        usage = _obj(group.get("vcpu_usage", {}), "vcpu_usage")
        checked: dict[str, float] = {
            m: _number(usage[m], f"vcpu_usage.{m}") for m in ("user", "system") if m in usage
        }
        out.vcpu.update(checked)

    read("neuron_runtime_vcpu_usage", vcpu)

    def stats(group: dict[str, Any]) -> None:
        status = _counts(group, "execution_summary", EXEC_STATUS)
        errors = _counts(group, "error_summary", EXEC_ERRORS)
        latency = _latency(group)
        out.status.update(status)
        out.errors.update(errors)
        out.latency.update(latency)

    read("execution_stats", stats)
    return out


def _ecc(
    system: dict[str, Any],
) -> tuple[dict[tuple[int, str], int], dict[tuple[int, str], int]]:
    """(device, corrected|uncorrected) -> count, and (device, hbm|sram) -> uncorrectable."""
    group = _group(system, "neuron_hw_counters")
    if group is None:
        return {}, {}
    devices = group.get("neuron_devices", [])
    if not isinstance(devices, list) or len(devices) > MAX_DEVICES:
        raise _Bad("neuron_hw_counters.neuron_devices is not a list of devices")
    out: dict[tuple[int, str], int] = {}
    by_memory: dict[tuple[int, str], int] = {}
    for item in devices:
        item = _obj(item, "neuron_hw_counters device")
        device = _index(item.get("neuron_device_index"), "neuron_device_index", MAX_DEVICES)
        for name, kind in ECC_FIELDS.items():
            if name in item:
                key = (device, kind)
                count = _count(item[name], f"device {device} {name}")
                out[key] = out.get(key, 0) + count
                memory = UNCORRECTED_FIELDS.get(name)
                if memory is not None:
                    by_memory[(device, memory)] = by_memory.get((device, memory), 0) + count
        for memory in UNCORRECTED_FIELDS.values():  # the device is counted: 0 when unnamed
            by_memory.setdefault((device, memory), 0)
    return out, by_memory


def _hardware(raw: Any) -> Hardware | None:
    if raw is None:
        return None
    info = _obj(raw, "neuron_hardware_info")
    error = info.get("error", "")
    if error:
        raise _Bad(f"neuron_hardware_info: {str(error)[:200]}")
    count = _count(info.get("neuron_device_count"), "neuron_device_count")
    cores = _count(info.get("neuroncore_per_device_count"), "neuroncore_per_device_count")
    memory = _number(info.get("neuron_device_memory_size", 0), "neuron_device_memory_size")
    kind = info.get("neuron_device_type", "")
    if count > MAX_DEVICES or cores > MAX_CORES:
        raise _Bad("neuron_hardware_info counts are out of range")
    return Hardware(count, cores, memory, kind[:64] if isinstance(kind, str) else "")


def parse(line: bytes | str) -> Report:
    """Parse one line; BadReport when it is not a JSON object (garbage, truncated)."""
    try:
        doc = json.loads(line)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise BadReport(f"not JSON: {str(exc)[:200]}") from None
    if not isinstance(doc, dict):
        raise BadReport("not a JSON object")
    problems: list[str] = []
    runtimes_raw = doc.get("neuron_runtime_data", [])
    if not isinstance(runtimes_raw, list):
        problems.append("neuron_runtime_data is not a list")
        runtimes_raw = []
    if len(runtimes_raw) > MAX_RUNTIMES:
        problems.append(f"{len(runtimes_raw)} runtimes; the first {MAX_RUNTIMES} are read")
        runtimes_raw = runtimes_raw[:MAX_RUNTIMES]
    runtimes: dict[str, Runtime] = {}
    for raw in runtimes_raw:
        runtime = _runtime(raw, problems)
        if runtime is None:
            continue
        if runtime.tag in runtimes:  # two processes share a NEURON_PROCESS_TAG
            pid = raw.get("pid")
            runtime = replace(runtime, tag=f"{runtime.tag}/{pid}"[:MAX_TAG])
            if runtime.tag in runtimes:
                problems.append(f"runtime {runtime.tag} appears twice")
                continue
        runtimes[runtime.tag] = runtime
    ecc: dict[tuple[int, str], int] = {}
    uncorrected: dict[tuple[int, str], int] = {}
    try:
        ecc, uncorrected = _ecc(_obj(doc.get("system_data", {}), "system_data"))
    except _Bad as exc:
        problems.append(str(exc))
    hardware = None
    try:
        hardware = _hardware(doc.get("neuron_hardware_info"))
    except _Bad as exc:
        problems.append(str(exc))
    return Report(tuple(runtimes.values()), ecc, hardware, tuple(problems), uncorrected)
