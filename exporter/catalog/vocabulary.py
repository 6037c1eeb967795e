"""The allowed values of every label whose values are an enumeration.

One vocabulary across vendors: where two vendors report the same quantity, the
label value is the same word (``type="uncorrected"`` on every vendor's ECC
counter, the OpenTelemetry ``error.type`` words), so one query or alert covers
them all. A value only one vendor has is listed with the vendor in the comment.
The catalog rows name these tuples in their ``values``; the store refuses any
other value (see :func:`exporter.store.validate`), and docs/metrics.md lists
them.
"""

from __future__ import annotations

from typing import Literal, get_args

from exporter.vendors import VENDORS

# The exporter's health verdict: the OpenTelemetry hw.state values.
HEALTH_STATES = ("ok", "degraded", "failed", "predicted_failure")
# What to do about a device (exporter/actions.py), least to most disruptive. ``service``:
# a person must look and no table says at what (an unknown code); the three after it say
# what the person does (reseat, cooling or the PCIe path; the vendor; a new part).
RECOMMENDED_ACTIONS = (
    "none",
    "restart_app",
    "drain_p2p",
    "reset_device",
    "reboot_node",
    "service",
    "inspect_hardware",
    "contact_vendor",
    "replace_device",
)
# How far an action reaches, from the narrowest (exporter/scope.py): the device itself;
# every partition of its physical device; its peer domain (NVLink clique, XGMI hive);
# every device on its baseboard; every device of the node.
ACTION_SCOPES = ("device", "partition", "peer_domain", "baseboard", "node")
# The scopes whose members a backend names (accel_device_domain_info); device and node
# need no name.
DOMAIN_SCOPES = ("partition", "peer_domain", "baseboard")
# Where an action comes from: the vendor's own table (NVIDIA's Xid catalog, NVML's
# recovery action, a vendor spec), inferred from a vendor's guide (AMD's SAG conditions by
# name), the exporter's own rule, the operator's config, the site's mapping file, or no
# table at all (an unknown code: service).
ACTION_PROVENANCES = (
    "vendor_catalog",
    "vendor_inferred",
    "exporter_rule",
    "config",
    "site_table",
    "unknown_code",
)
# Why a device's calls were isolated into a probe.
ISOLATION_REASONS = ("hung", "crashed")
# The device backends that count failed fields (accel_field_errors_total's source).
DEVICE_BACKENDS = tuple(vendor.name for vendor in VENDORS if vendor.field_errors)

# Whether an error was corrected, on every vendor (nvml, amdsmi, Level Zero, HLML, Neuron).
ECC_CORRECTION = ("corrected", "uncorrected")
# ... and AMD's deferred errors (detected, not corrected, poisoned for the consumer).
ECC_TYPES = (*ECC_CORRECTION, "deferred")
# NVIDIA and Gaudi count since the driver loaded (volatile) and over the lifetime
# (aggregate); the others have one count, with the label empty.
ECC_COUNTERS = ("volatile", "aggregate", "")
# Why rows were remapped or pages retired (NVIDIA, Gaudi); AMD names no cause ("").
ROW_CAUSES = ("multiple_single_bit_ecc", "double_bit_ecc")
RETIREMENT_CAUSES = (*ROW_CAUSES, "")

# Temperature sensors. Shared: gpu (the die), memory, voltage_regulator, board (Intel, Gaudi).
SENSORS = (
    "gpu",
    "memory",
    "voltage_regulator",
    "board",
    # AMD
    "edge",
    "hotspot",
    "hbm_0",
    "hbm_1",
    "hbm_2",
    "hbm_3",
    # Intel (Level Zero; the *_min sensors are minima)
    "global",
    "global_min",
    "gpu_min",
    "memory_min",
    "board_min",
    # Gaudi
    "other",
    "hbm",
    "ctemp",
)
# AMD sensors that also have limits.
AMD_SENSORS = ("edge", "hotspot", "memory", "hbm_0", "hbm_1", "hbm_2", "hbm_3")
TEMPERATURE_LIMITS = ("max", "critical", "emergency")

# Clock domains. Shared: graphics (the GPU core clock: NVIDIA graphics, AMD GFX, Intel's
# GPU domain), memory, video (NVIDIA video, AMD VCLK, Intel's media domain).
CLOCKS = (
    "graphics",
    "memory",
    "video",
    # NVIDIA
    "sm",
    # AMD (soc also Gaudi's one clock)
    "soc",
    "data_fabric",
    "decode",
)

# Why clocks are held down now; each vendor names its own mechanisms.
THROTTLE_REASONS = (
    # NVIDIA (nvmlClocksEventReason*)
    "gpu_idle",
    "applications_clocks_setting",
    "sw_power_cap",
    "hw_slowdown",
    "sync_boost",
    "sw_thermal_slowdown",
    "hw_thermal_slowdown",
    "hw_power_brake_slowdown",
    "display_clock_setting",
    # AMD (violation status)
    "prochot",
    "ppt",
    "socket_thermal",
    "vr_thermal",
    "hbm_thermal",
    "gfx_clock_below_host_limit",
    # Intel (zes_freq_throttle_reason_flags_t); power and thermal also Gaudi's
    "ave_pwr_cap",
    "burst_pwr_cap",
    "current_limit",
    "thermal_limit",
    "psu_alert",
    "sw_range",
    "hw_range",
    "voltage",
    "thermal",
    "power",
)
# Time spent throttled, by reason: NVIDIA's violation counters and Gaudi's (power, thermal).
VIOLATION_REASONS = (
    "sw_power_cap",
    "thermal",
    "sync_boost",
    "board_limit",
    "low_utilization",
    "reliability",
    "sw_thermal_slowdown",
    "hw_thermal_slowdown",
    "hw_power_brake_slowdown",
    "power",
)
# AMD throttle residency accumulators (whole device, then per XCP).
RESIDENCIES = (
    "prochot",
    "ppt",
    "socket_thermal",
    "vr_thermal",
    "hbm_thermal",
    "gfx_below_host_limit_ppt",
    "gfx_below_host_limit_thermal",
    "gfx_below_host_limit_total",
    "gfx_low_utilization",
)

# Device event notifications: NVIDIA's, then amdsmi's.
NVIDIA_EVENTS = ("single_bit_ecc", "double_bit_ecc", "gpu_unavailable", "recovery_action")
# amdsmi's are also the words of sources.amdsmi.event_types, which the config loader
# checks against this Literal: one list for the key and the label.
AmdEvent = Literal[
    "vmfault",
    "thermal_throttle",
    "gpu_pre_reset",
    "gpu_post_reset",
    "migrate_start",
    "migrate_end",
    "page_fault_end",
    "queue_eviction",
    "queue_restore",
    "unmap_from_gpu",
    "process_start",
    "process_end",
]
AMD_EVENTS: tuple[AmdEvent, ...] = get_args(AmdEvent)
# The amdsmi notifications counted unless configured: those that say something about
# health; the others can fire very often.
AMD_HEALTH_EVENTS: tuple[AmdEvent, ...] = (
    "vmfault",
    "thermal_throttle",
    "gpu_pre_reset",
    "gpu_post_reset",
)
DEVICE_EVENTS = (*NVIDIA_EVENTS, *AMD_EVENTS)

NVLINK_ERRORS = ("replay", "recovery", "crc_flit", "crc_data")
POWER_BOUNDS = ("min", "max", "default")
BAD_PAGE_STATUSES = ("reserved", "pending", "unreservable")
AFID_SEVERITIES = ("non_fatal_uncorrected", "fatal", "non_fatal_corrected")
# The severity an AFID's table names (exporter/afids.py): the CPER words where they match,
# the decoder's Fail-to-init and ALL ("any"), and unknown (no table names the AFID).
AFID_TABLE_SEVERITIES = (
    "non_fatal_uncorrected",
    "fatal",
    "non_fatal_corrected",
    "fail_to_init",
    "any",
    "unknown",
)
# Whether AMD's decoder classified an AFID's event: true, false (31-34, 16999: it could
# not), unknown (no table here names the AFID).
AFID_CLASSIFIED = ("true", "false", "unknown")
# /proc/stat's CPU modes, as node_exporter names them.
CPU_MODES = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
# NVIDIA fabric (NVSwitch) registration state.
FABRIC_STATES = ("not_started", "in_progress", "completed")
# The NCCL/RCCL job verdict, one-hot (docs/ccl.md).
CCL_JOB_STATES = ("no_job", "unreachable", "error", "healthy", "degraded", "stalled")
# neuron-monitor's execution outcomes and error kinds.
NEURON_EXECUTION_STATUSES = (
    "completed",
    "completed_with_err",
    "completed_with_num_err",
    "timed_out",
    "incorrect_input",
    "failed_to_queue",
)
NEURON_EXECUTION_ERRORS = ("generic", "numerical", "transient", "model", "runtime", "hardware")
# The memories of a Neuron device whose uncorrectable ECC errors neuron-monitor counts
# (neuron_hw_counters: mem_ecc_uncorrected is the HBM, sram_ecc_uncorrected the on-chip SRAM).
NEURON_ECC_MEMORIES = ("hbm", "sram")
# The OTLP output's export attempts.
EXPORT_RESULTS = ("success", "failure")
# The NVSentinel output (exporter/outputs/nvsentinel.py): the HealthEvents it delivered,
# by kind, and why a call did not deliver (the socket is not there, the connector does
# not answer, the deadline passed, the connector answered an error status, grpc or
# protobuf is not installed, an internal fault).
NVSENTINEL_EVENT_KINDS = ("fatal", "non_fatal", "healthy")
NVSENTINEL_FAILURES = (
    "socket_missing",
    "unavailable",
    "timeout",
    "rejected",
    "grpc_missing",
    "internal",
)

# The fabric (exporter.host.infiniband, exporter.host.pcie, catalog/fabric.py).
# InfiniBand port states as words, indexed by the number sysfs writes first ("4: ACTIVE";
# IBA PortInfo PortState and PortPhysicalState); a number past the end is "unknown".
NIC_PORT_STATES = ("nop", "down", "init", "armed", "active", "active_defer")
# A port state number IBA does not name (or an unread physical state).
NIC_UNKNOWN_STATE = "unknown"
NIC_PHYS_STATES = (
    "no_state_change",
    "sleep",
    "polling",
    "disabled",
    "port_configuration_training",
    "link_up",
    "link_error_recovery",
    "phy_test",
)
# The standard port counters exported, by their sysfs names (ports/N/counters): IBA
# PortCounters, every one an error or a link event.
NIC_ERROR_COUNTERS = (
    "link_downed",
    "link_error_recovery",
    "symbol_error",
    "port_rcv_errors",
    "port_rcv_remote_physical_errors",
    "port_rcv_switch_relay_errors",
    "port_xmit_discards",
    "port_xmit_constraint_errors",
    "port_rcv_constraint_errors",
    "local_link_integrity_errors",
    "excessive_buffer_overrun_errors",
    "VL15_dropped",
)
# Driver counters worth a series (mlx5's ports/N/hw_counters; other drivers name a
# subset): transport retries and drops the fabric causes, RoCE congestion notifications.
NIC_HW_COUNTERS = (
    "out_of_buffer",
    "out_of_sequence",
    "packet_seq_err",
    "local_ack_timeout_err",
    "rnr_nak_retry_err",
    "implied_nak_seq_err",
    "duplicate_request",
    "req_cqe_error",
    "resp_cqe_error",
    "req_remote_access_errors",
    "roce_adp_retrans",
    "roce_slow_restart",
    "np_cnp_sent",
    "rp_cnp_handled",
    "np_ecn_marked_roce_packets",
)
NIC_DATA_DIRECTIONS = ("transmit", "receive")
# PCIe AER by severity (aer_dev_correctable, aer_dev_nonfatal, aer_dev_fatal).
AER_SEVERITIES = ("correctable", "nonfatal", "fatal")
# Why a fabric sysfs file was not used: listed and gone when read, the read failed, or
# its text is not the kernel's format.
FABRIC_READ_REASONS = ("vanished", "unreadable", "malformed")
# Diagnostic results read from files (exporter/diag): a test's result on a device, what
# became of a file of a known suite, and why a file was refused (exporter.diag.model).
DIAG_RESULTS = ("pass", "warn", "fail", "skip")
DIAG_FILE_RESULTS = ("accepted", "schema_drift", "runtime_error")
DIAG_FILE_REJECTIONS = (
    "too_large",
    "truncated",
    "unparseable",
    "symlink",
    "not_regular_file",
    "unreadable",
    "unknown_format",
    "too_many_files",
    "expired",
    "future_mtime",
)
