"""Device families shared by every vendor backend (NVIDIA and AMD use the same names).

Every device series carries exactly the identity labels ``device`` (index as a
string) and ``uuid``, plus at most one dimension label (sensor, clock, ...).
Everything else about a device lives in ``accel_device_info``.
Vendor-only quantities live in ``nvidia.py`` and ``amd.py``.
"""

from __future__ import annotations

from exporter.catalog import budget
from exporter.catalog.spec import Instrument, Kind, MetricSpec
from exporter.catalog.vocabulary import (
    ACTION_PROVENANCES,
    ACTION_SCOPES,
    CLOCKS,
    DEVICE_BACKENDS,
    DEVICE_EVENTS,
    DOMAIN_SCOPES,
    ECC_COUNTERS,
    ECC_TYPES,
    HEALTH_STATES,
    ISOLATION_REASONS,
    RECOMMENDED_ACTIONS,
    RETIREMENT_CAUSES,
    SENSORS,
    THROTTLE_REASONS,
    VIOLATION_REASONS,
)

ID = ("device", "uuid")

# The OpenTelemetry hardware conventions (semantic-conventions docs/hardware/gpu.md and
# common.md) name the families marked semconv below. hw.status carries the health verdict
# (one series per hw.state, as the convention wants); accel_device_up is one 0/1 series, not
# a status. hw.errors is not used for ECC: our counter label (volatile/aggregate) would double
# count. hw.gpu.io counts bytes; our PCIe figures are rates, so they stay accel.*.
GPU_TASK = "Fraction of time the GPU spent in a task (hw.gpu.task), 0..1."
PCIE_THROUGHPUT = "PCIe throughput by direction over the driver's last sample window."
HW_STATUS = "Operational status: 1 for the state that holds (hw.state), 0 for the others."
HW_GPU = (("hw.type", "gpu"),)


def _gpu_task(name: str, help: str, task: str) -> MetricSpec:
    """A busy share of one engine: OTel's hw.gpu.utilization, told apart by ``hw.gpu.task``."""
    return MetricSpec(
        name,
        Kind.GAUGE,
        help,
        ID,
        unit="ratio",
        otel_name="hw.gpu.utilization",
        otel_constants=(("hw.gpu.task", task),),
        semconv=True,
        otel_description=GPU_TASK,
        max_series=budget.DEVICES,
    )


def _pcie_throughput(short: str, direction: str) -> MetricSpec:
    """One direction of PCIe throughput: OTel's accel.pcie.throughput, by its direction."""
    return MetricSpec(
        f"accel_pcie_{short}_bytes_per_second",
        Kind.GAUGE,
        f"PCIe {direction} throughput over the driver's last sample window.",
        ID,
        unit="bytes_per_second",
        otel_name="accel.pcie.throughput",
        otel_constants=(("network.io.direction", direction),),
        otel_description=PCIE_THROUGHPUT,
        max_series=budget.DEVICES,
    )


# accel_device_info's identity labels under the hardware conventions' attribute names.
HW_IDENTITY = (
    ("vendor", "hw.vendor"),
    ("model", "hw.model"),
    ("serial", "hw.serial_number"),
    ("driver_version", "hw.driver_version"),
    ("vbios", "hw.firmware_version"),
)

INFO_LABELS = (
    "vendor",
    "device",
    "uuid",
    "model",
    "pci_bus_id",
    "serial",
    "vbios",
    "driver_version",
    "cuda_driver_version",
    "mig_mode",
    "compute_partition",
    "memory_partition",
    # A partition (AMD CPX, DPX, ...): its index within its GPU and the GPU's PCI address.
    "partition",
    "physical_gpu",
)

# Rows a device worker may send (exporter.backend_api.wire): this module is a backend's.
FROM_WORKERS = True

ROWS = (
    MetricSpec(
        "accel_device_info",
        Kind.INFO,
        "Identity of an accelerator; always 1. Join on uuid. Labels a vendor lacks are empty;"
        " a partition says which of its GPU (partition) and which GPU (physical_gpu, its"
        " PCI address).",
        INFO_LABELS,
        otel_attributes=HW_IDENTITY,
        max_series=budget.DEVICES,
    ),
    MetricSpec(
        "accel_device_up",
        Kind.GAUGE,
        "1 when the device answered its last poll, 0 when lost, hung or erroring.",
        ID,
        max_series=budget.DEVICES,
    ),
    MetricSpec(
        "accel_device_down_reason_info",
        Kind.INFO,
        "Why a device is down (gpu_lost, timeout, ...); present only while accel_device_up is 0.",
        (*ID, "reason"),
        max_series=budget.DEVICE_PARTS,
    ),
    MetricSpec(
        "accel_device_health",
        Kind.GAUGE,
        "The exporter's verdict on a device, one-hot over ok, degraded, failed and"
        " predicted_failure (OpenTelemetry hw.status states); all four 0 while the exporter"
        " cannot vouch for it (its worker down or restarting, a reload); the rules are in"
        " docs/health.md.",
        (*ID, "state"),
        otel_name="hw.status",
        otel_instrument=Instrument.UPDOWNCOUNTER,
        otel_constants=HW_GPU,
        otel_attributes=(("state", "hw.state"),),
        semconv=True,
        otel_description=HW_STATUS,
        values={"state": HEALTH_STATES},
        max_series=budget.DEVICES * len(HEALTH_STATES),
    ),
    MetricSpec(
        "accel_device_health_reason_info",
        Kind.INFO,
        "Why a device is not ok (device_down, recovery_action, ecc_uncorrected_growth, ...);"
        " one series per reason, present only while it holds.",
        (*ID, "reason"),
        max_series=budget.DEVICE_PARTS,
    ),
    MetricSpec(
        "accel_health_signal_downgraded_total",
        Kind.COUNTER,
        "Trend rules raised on the device that the known-noisy-signal registry lowered or"
        " took away, by the rule's signal and the registry entry (reason; docs/health.md,"
        " Trends): the rate is still a trend, the verdict no longer rests on it.",
        (*ID, "signal", "reason"),
        otel_unit="{downgrade}",
        max_series=budget.DEVICE_PARTS,
    ),
    MetricSpec(
        "accel_device_recommended_action",
        Kind.GAUGE,
        "What to do about a device, one-hot over none, restart_app, drain_p2p, reset_device,"
        " reboot_node, service, inspect_hardware, contact_vendor and replace_device (the"
        " most disruptive action any current finding asks for; XIDs, AFIDs and the other"
        " vendors' codes by their catalogs, see docs/health.md).",
        (*ID, "action"),
        values={"action": RECOMMENDED_ACTIONS},
        max_series=budget.DEVICES * len(RECOMMENDED_ACTIONS),
    ),
    MetricSpec(
        "accel_device_action_reason_info",
        Kind.INFO,
        "What asks for an action on a device: the source code (xid_79, afid_30,"
        " recovery_action_gpu_reset, or a health reason), the action it calls for, how far"
        " the action reaches (scope), the next action if it does not help (escalation, empty"
        " when none is named), how far that reaches (escalation_scope, empty: as far as"
        " scope) and where the mapping comes from (provenance).",
        (*ID, "reason", "action", "scope", "escalation", "escalation_scope", "provenance"),
        values={
            "action": RECOMMENDED_ACTIONS,
            "scope": ACTION_SCOPES,
            "escalation": ("", *RECOMMENDED_ACTIONS),
            "escalation_scope": ("", *ACTION_SCOPES),
            "provenance": ACTION_PROVENANCES,
        },
        max_series=budget.DEVICE_PARTS,
    ),
    MetricSpec(
        "accel_device_action_scope_info",
        Kind.INFO,
        "Every device the recommended action of a device reaches (affected_uuid; the device"
        " itself included), present while the action is not none: a baseboard replacement"
        " names the board's GPUs, an XGMI-hive reset the hive's.",
        (*ID, "scope", "affected_uuid"),
        values={"scope": ACTION_SCOPES},
        max_series=budget.DEVICE_PARTS,
    ),
    MetricSpec(
        "accel_device_domain_info",
        Kind.INFO,
        "The domain a device belongs to, per scope: its physical device (partition), its"
        " peer domain (NVLink clique, XGMI hive) and its baseboard; devices with one domain"
        " value share what an action of that scope does.",
        (*ID, "scope", "domain"),
        values={"scope": DOMAIN_SCOPES},
        max_series=budget.DEVICE_PARTS,
    ),
    MetricSpec(
        "accel_devices",
        Kind.GAUGE,
        "Number of accelerators the vendor library enumerated.",
        ("vendor",),
        otel_unit="{device}",
        otel_attributes=(("vendor", "hw.vendor"),),
        max_series=budget.SMALL,
    ),
    MetricSpec(
        "accel_pci_devices",
        Kind.GAUGE,
        "Number of the vendor's accelerators on the PCI bus (sysfs: display and processing"
        " accelerator classes, NVSwitches and audio functions left out), whether or not"
        " the library sees them.",
        ("vendor",),
        max_series=budget.SMALL,
    ),
    MetricSpec(
        "accel_device_isolated_info",
        Kind.INFO,
        "A device isolated because a call on it hung or crashed the worker (reason hung or"
        " crashed), with the call (empty when unknown); the other devices are served meanwhile"
        " and this one is probed apart until it answers.",
        (*ID, "reason", "call"),
        values={"reason": ISOLATION_REASONS},
        max_series=budget.DEVICE_PARTS,
    ),
    MetricSpec(
        "accel_field_errors_total",
        Kind.COUNTER,
        "Fields of a device that could not be read, by backend (source) and reason, since the"
        " worker started; the field is omitted. nvml, levelzero, hlml: calls that failed with"
        " an error other than not-supported (NVML's invalid_value: a GPM figure out of range);"
        " amdsmi: items of an answer skipped as malformed (xcp_value_not_available,"
        " xcp_not_available, xcp_out_of_range) and CPER rings found restarted"
        " (cper_ring_restarted); tpu: runtime metrics the libtpu service serving the chip"
        " failed to give (its gRPC status, or malformed_reply).",
        (*ID, "source", "reason"),
        otel_unit="{error}",
        values={"source": DEVICE_BACKENDS},
        max_series=budget.DEVICE_PARTS,
    ),
    MetricSpec(
        "accel_device_isolated_since_timestamp_seconds",
        Kind.GAUGE,
        "Unix time the device was isolated.",
        ID,
        unit="seconds",
        max_series=budget.DEVICES,
    ),
    MetricSpec(
        "accel_devices_expected",
        Kind.GAUGE,
        "Number of accelerators this node should have (expected_devices); only when configured.",
        ("vendor",),
        otel_unit="{device}",
        otel_attributes=(("vendor", "hw.vendor"),),
        max_series=budget.SMALL,
    ),
    _gpu_task(
        "accel_utilization_ratio",
        "Share of the last sample period the device was busy running kernels, 0..1.",
        "general",
    ),
    MetricSpec(
        "accel_memory_bandwidth_utilization_ratio",
        Kind.GAUGE,
        "Share of the last sample period the memory controller was busy, 0..1.",
        ID,
        unit="ratio",
        max_series=budget.DEVICES,
    ),
    _gpu_task(
        "accel_encoder_utilization_ratio",
        "Video encoder busy share, 0..1.",
        "encoder",
    ),
    _gpu_task(
        "accel_decoder_utilization_ratio",
        "Video decoder busy share, 0..1.",
        "decoder",
    ),
    MetricSpec(
        "accel_memory_total_bytes",
        Kind.GAUGE,
        "Device memory (VRAM / framebuffer) installed.",
        ID,
        unit="bytes",
        otel_name="hw.gpu.memory.limit",
        otel_instrument=Instrument.UPDOWNCOUNTER,
        semconv=True,
        max_series=budget.DEVICES,
    ),
    MetricSpec(
        "accel_memory_used_bytes",
        Kind.GAUGE,
        "Device memory in use.",
        ID,
        unit="bytes",
        otel_name="hw.gpu.memory.usage",
        otel_instrument=Instrument.UPDOWNCOUNTER,
        semconv=True,
        max_series=budget.DEVICES,
    ),
    MetricSpec(
        "accel_memory_free_bytes",
        Kind.GAUGE,
        "Device memory free.",
        ID,
        unit="bytes",
        max_series=budget.DEVICES,
    ),
    MetricSpec(
        "accel_memory_reserved_bytes",
        Kind.GAUGE,
        "Device memory reserved by the driver and firmware.",
        ID,
        unit="bytes",
        max_series=budget.DEVICES,
    ),
    MetricSpec(
        "accel_temperature_celsius",
        Kind.GAUGE,
        "Temperature of a device sensor.",
        (*ID, "sensor"),
        unit="celsius",
        values={"sensor": SENSORS},
        max_series=budget.DEVICES * len(SENSORS),
    ),
    MetricSpec(
        "accel_power_watts",
        Kind.GAUGE,
        "Power draw of the device.",
        ID,
        unit="watts",
        otel_name="hw.power",
        otel_constants=HW_GPU,
        semconv=True,
        max_series=budget.DEVICES,
    ),
    MetricSpec(
        "accel_power_limit_watts",
        Kind.GAUGE,
        "Power limit currently enforced on the device.",
        ID,
        unit="watts",
        max_series=budget.DEVICES,
    ),
    MetricSpec(
        "accel_energy_joules_total",
        Kind.COUNTER,
        "Energy consumed by the device since the driver was loaded.",
        ID,
        unit="joules",
        otel_name="hw.energy",
        otel_constants=HW_GPU,
        semconv=True,
        max_series=budget.DEVICES,
    ),
    MetricSpec(
        "accel_clock_hertz",
        Kind.GAUGE,
        "Current clock frequency of a clock domain.",
        (*ID, "clock"),
        unit="hertz",
        otel_name="accel.clock.speed",
        values={"clock": CLOCKS},
        max_series=budget.DEVICES * len(CLOCKS),
    ),
    MetricSpec(
        "accel_clock_max_hertz",
        Kind.GAUGE,
        "Maximum clock frequency of a clock domain.",
        (*ID, "clock"),
        unit="hertz",
        otel_name="accel.clock.speed.limit",
        values={"clock": CLOCKS},
        max_series=budget.DEVICES * len(CLOCKS),
    ),
    MetricSpec(
        "accel_fan_speed_ratio",
        Kind.GAUGE,
        "Fan speed as a share of its maximum, 0..1.",
        (*ID, "fan"),
        unit="ratio",
        otel_name="accel.fan.speed_ratio",
        max_series=budget.DEVICE_PARTS,
    ),
    MetricSpec(
        "accel_performance_state",
        Kind.GAUGE,
        "Performance state (P-state: 0 is maximum performance, 15 minimum).",
        ID,
        max_series=budget.DEVICES,
    ),
    _pcie_throughput("tx", "transmit"),
    _pcie_throughput("rx", "receive"),
    MetricSpec(
        "accel_pcie_replays_total",
        Kind.COUNTER,
        "PCIe link replay events.",
        ID,
        otel_unit="{replay}",
        max_series=budget.DEVICES,
    ),
    MetricSpec(
        "accel_pcie_link_generation",
        Kind.GAUGE,
        "Current PCIe link generation.",
        ID,
        max_series=budget.DEVICES,
    ),
    MetricSpec(
        "accel_pcie_link_width",
        Kind.GAUGE,
        "Current PCIe link width (lanes).",
        ID,
        otel_unit="{lane}",
        max_series=budget.DEVICES,
    ),
    MetricSpec(
        "accel_pcie_link_max_generation",
        Kind.GAUGE,
        "Maximum PCIe link generation.",
        ID,
        otel_name="accel.pcie.link.generation.limit",
        max_series=budget.DEVICES,
    ),
    MetricSpec(
        "accel_pcie_link_max_width",
        Kind.GAUGE,
        "Maximum PCIe link width (lanes).",
        ID,
        otel_name="accel.pcie.link.width.limit",
        otel_unit="{lane}",
        max_series=budget.DEVICES,
    ),
    MetricSpec(
        "accel_clock_throttle_active",
        Kind.GAUGE,
        "1 while the named clock throttle (clock event) reason is active, else 0.",
        (*ID, "reason"),
        values={"reason": THROTTLE_REASONS},
        max_series=budget.DEVICES * len(THROTTLE_REASONS),
    ),
    MetricSpec(
        "accel_clock_violation_seconds_total",
        Kind.COUNTER,
        "Time the device spent throttled for the named reason.",
        (*ID, "reason"),
        unit="seconds",
        otel_name="accel.clock.violation.time",
        values={"reason": VIOLATION_REASONS},
        max_series=budget.DEVICES * len(VIOLATION_REASONS),
    ),
    MetricSpec(
        "accel_ecc_errors_total",
        Kind.COUNTER,
        "ECC memory errors by type; counter is volatile (since driver load) or aggregate (lifetime)"
        " on NVIDIA, empty on AMD.",
        (*ID, "type", "counter"),
        otel_unit="{error}",
        values={"type": ECC_TYPES, "counter": ECC_COUNTERS},
        max_series=budget.DEVICES * len(ECC_TYPES) * len(ECC_COUNTERS),
    ),
    MetricSpec(
        "accel_retired_pages",
        Kind.GAUGE,
        "Device memory pages retired by the driver, by cause (NVIDIA before Ampere, whose newer"
        " GPUs remap rows; AMD's reserved bad pages, cause empty: amdsmi gives none).",
        (*ID, "cause"),
        otel_unit="{page}",
        values={"cause": RETIREMENT_CAUSES},
        max_series=budget.DEVICES * len(RETIREMENT_CAUSES),
    ),
    MetricSpec(
        "accel_retired_pages_pending",
        Kind.GAUGE,
        "1 when retired pages wait for a reboot or GPU reset to take effect.",
        ID,
        otel_unit="{page}",
        max_series=budget.DEVICES,
    ),
    MetricSpec(
        "accel_processes",
        Kind.GAUGE,
        "Processes running on the device.",
        ID,
        otel_unit="{process}",
        max_series=budget.DEVICES,
    ),
    MetricSpec(
        "accel_process_memory_bytes",
        Kind.GAUGE,
        "Device memory used by one process (only with processes: true).",
        (*ID, "pid"),
        unit="bytes",
        otel_name="accel.process.memory.usage",
        max_series=budget.PROCESSES,
    ),
    MetricSpec(
        "accel_device_events_total",
        Kind.COUNTER,
        "Device event notifications received by the worker, by event type.",
        (*ID, "event"),
        otel_unit="{event}",
        values={"event": DEVICE_EVENTS},
        max_series=budget.DEVICES * len(DEVICE_EVENTS),
    ),
    MetricSpec(
        "accel_device_event_last_timestamp_seconds",
        Kind.GAUGE,
        "Unix time the worker last received an event of this type.",
        (*ID, "event"),
        unit="seconds",
        values={"event": DEVICE_EVENTS},
        max_series=budget.DEVICES * len(DEVICE_EVENTS),
    ),
)

# Families the daemon derives for each device itself (the device source from the reply's
# device list, the health judge from its verdicts), never taken from a worker: one that
# sent them could overrule the daemon's verdict on a device.
DAEMON_OWNED = frozenset(
    {
        "accel_device_up",
        "accel_device_down_reason_info",
        "accel_device_health",
        "accel_device_health_reason_info",
        "accel_device_recommended_action",
        "accel_device_action_reason_info",
        "accel_device_action_scope_info",
        "accel_health_signal_downgraded_total",
    }
)
