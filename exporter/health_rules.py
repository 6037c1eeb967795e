"""What each health reason asks for, for every vendor: one table, no branch per vendor.

:mod:`exporter.health` finds the reasons (a reading against a rule); this module says
what each reason asks for, as an :class:`~exporter.actions.Advice` with its source.
The vendor rules here read the families the backends fill (Intel Level Zero Sysman,
Gaudi HLML, AWS Neuron's neuron-monitor); the shared ones (a device down, ECC, row
remapping) any backend that fills the shared families gets. Pure tables and lookups;
docs/health.md lists them, a table per vendor, each row with its source.
"""

from __future__ import annotations

from collections.abc import Callable

from exporter.actions import (
    CONTACT_VENDOR,
    DRAIN_P2P,
    NONE,
    REBOOT_NODE,
    REPLACE_DEVICE,
    RESET_DEVICE,
    RESTART_APP,
    SERVICE,
    Advice,
)
from exporter.family_names import (
    ACCEL_GAUDI_ROW_REPLACEMENT_PENDING,
    ACCEL_INTEL_MEMORY_HEALTH,
    ACCEL_INTEL_RAS_UNCORRECTABLE_ERRORS_TOTAL,
    ACCEL_INTEL_RESET_REASON_INFO,
    ACCEL_INTEL_RESET_REQUIRED,
    ACCEL_NEURON_ECC_UNCORRECTED_ERRORS_TOTAL,
)
from exporter.verdict import DEGRADED, FAILED

# The documents the rows cite (docs/health.md names them with their addresses).
NVIDIA_MEMORY = (
    "NVIDIA GPU Memory Error Management (docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt)"
)
NVIDIA_RMA = f"{NVIDIA_MEMORY}, RMA Policy"
LEVEL_ZERO = "Level Zero Sysman spec (oneapi-src.github.io/level-zero-spec)"
XE_WEDGING = "Linux xe driver, Xe Device Wedging (kernel.org/doc/html/latest/gpu/xe/xe_device.html)"
HLML = "Habana HLML API reference (docs.habana.ai, hlml_device_get_replaced_rows_pending_status)"
NEURON_HW_ERRORS = (
    "AWS Neuron Runtime Troubleshooting, Hardware Errors"
    " (awsdocs-neuron.readthedocs-hosted.com/en/latest/neuron-runtime/nrt-troubleshoot.html)"
)


def _vendor(action: str, reference: str, detail: str = "", escalation: str = "") -> Advice:
    return Advice(action, "device", escalation, detail, "vendor_catalog", reference)


def _rule(action: str, detail: str = "", escalation: str = "", scope: str = "device") -> Advice:
    return Advice(action, scope, escalation, detail, "exporter_rule", "exporter docs/health.md")


# Health reasons that are no event code -> what they ask for. Reasons not here (thermal
# margin, ECC growth, the AFID reasons, whose AFIDs carry their own) ask none.
REASON_ADVICE: dict[str, Advice] = {
    # Down: a reset first (a driver that lost the device gets it back by a reset or a
    # reload); DOWN_ADVICE refines it by the down reason.
    "device_down": _rule(RESET_DEVICE, escalation=REBOOT_NODE),
    # A call on it hung or crashed the worker (the exporter isolated it): a reset first.
    "isolated": _rule(RESET_DEVICE, escalation=REBOOT_NODE),
    # NVIDIA's RMA policy: the row-remapping failure flag meets the RMA criteria (validated
    # by the field diagnostic); the SRAM threshold flag likewise.
    "row_remap_failure": _vendor(
        REPLACE_DEVICE, NVIDIA_RMA, "RMA criteria met: validate with NVIDIA's field diagnostic"
    ),
    "sram_ecc_threshold": _vendor(
        REPLACE_DEVICE, NVIDIA_RMA, "RMA criteria met: validate with NVIDIA's field diagnostic"
    ),
    # Pending remaps and retirements take effect at the next GPU reset.
    "retired_pages_pending": _vendor(RESET_DEVICE, NVIDIA_MEMORY),
    "row_remap_pending": _vendor(RESET_DEVICE, NVIDIA_MEMORY),
    # "A threshold of page retirements ... usually resulted in investigation of whether
    # the GPU was worthy of an RMA" (64 at most).
    "retired_pages_near_limit": _vendor(
        CONTACT_VENDOR,
        NVIDIA_MEMORY,
        "near the 64-page retirement limit: RMA evaluation",
        REPLACE_DEVICE,
    ),
    "link_down": _rule(DRAIN_P2P, scope="peer_domain"),
    "fabric_degraded": _rule(DRAIN_P2P, scope="peer_domain"),
    # AMD's bad pages (the afid helper's AMD rules keep these words).
    "bad_pages_over_threshold": _rule(REPLACE_DEVICE),
    "bad_pages_pending": _rule(RESET_DEVICE),
    "bad_pages_near_threshold": _rule(CONTACT_VENDOR, escalation=REPLACE_DEVICE),
    # Intel Level Zero: zes_reset_reason_flag_t and zes_mem_health_t.
    "reset_required": _vendor(RESET_DEVICE, LEVEL_ZERO, "zesDeviceGetState: reset required"),
    "reset_wedged": _vendor(
        RESET_DEVICE,
        f"{LEVEL_ZERO}; {XE_WEDGING}",
        "ZES_RESET_REASON_FLAG_WEDGED: hardware wedged (xe: rebind or bus reset)",
        REBOOT_NODE,
    ),
    "reset_repair": _vendor(
        RESET_DEVICE, LEVEL_ZERO, "ZES_RESET_REASON_FLAG_REPAIR: reset to complete in-field repairs"
    ),
    "memory_degraded": _vendor(
        RESET_DEVICE, LEVEL_ZERO, "ZES_MEM_HEALTH_DEGRADED: excessive correctable errors"
    ),
    "memory_critical": _vendor(
        NONE, LEVEL_ZERO, "ZES_MEM_HEALTH_CRITICAL: running on reduced memory", REPLACE_DEVICE
    ),
    "memory_replace": _vendor(
        REPLACE_DEVICE, LEVEL_ZERO, "ZES_MEM_HEALTH_REPLACE: excessive uncorrectable errors"
    ),
    # Gaudi HLML: replaced rows wait for a device reset.
    "row_replacement_pending": _vendor(RESET_DEVICE, HLML, "replaced HBM rows pending a reset"),
}
REASON_ACTIONS: dict[str, str] = {reason: a.action for reason, a in REASON_ADVICE.items()}

# accel_device_down_reason_info's reason -> what a device down for it asks (others:
# REASON_ADVICE's device_down). A chip gone from the host (TPU) comes back with the
# host's reboot; a Level Zero device in survivability mode needs its firmware flashed.
DOWN_ADVICE: dict[str, Advice] = {
    "gpu_lost": _rule(RESET_DEVICE, escalation=REBOOT_NODE),
    "device_missing": _rule(REBOOT_NODE, escalation=CONTACT_VENDOR, scope="node"),
    "survivability_mode": Advice(
        SERVICE,
        "device",
        "",
        "flash the firmware (survivability mode)",
        "vendor_catalog",
        XE_WEDGING,
    ),
}

Test = Callable[[float, tuple[str, ...]], bool]
# Vendor families -> the rules reading them: (reason, state, test of value and labels).
# zes_mem_health_t: 1 ok, 2 degraded, 3 critical, 4 replace (accel_intel_memory_health).
VALUE_RULES: dict[str, tuple[tuple[str, str, Test], ...]] = {
    ACCEL_INTEL_MEMORY_HEALTH: (
        ("memory_degraded", DEGRADED, lambda v, _l: v == 2),
        ("memory_critical", DEGRADED, lambda v, _l: v == 3),
        ("memory_replace", FAILED, lambda v, _l: v == 4),
    ),
    ACCEL_INTEL_RESET_REQUIRED: (("reset_required", FAILED, lambda v, _l: v == 1),),
    ACCEL_INTEL_RESET_REASON_INFO: (
        ("reset_wedged", FAILED, lambda v, labels: v == 1 and labels[2] == "wedged"),
        ("reset_repair", DEGRADED, lambda v, labels: v == 1 and labels[2] == "repair"),
    ),
    ACCEL_GAUDI_ROW_REPLACEMENT_PENDING: (
        ("row_replacement_pending", DEGRADED, lambda v, _l: v > 0),
    ),
}
# Counters whose growth is a finding, remembered as an event (kind "ras") for the event
# window: family -> (the label position of the category, category -> (reason, state,
# advice)). Intel's uncorrectable RAS categories (zes_ras_error_cat_t); display errors
# ask nothing of a compute device. The spec says what each counts, not what to do: the
# actions are the exporter's.
_RAS = f"{LEVEL_ZERO}, zes_ras_error_cat_t"


def _ras(action: str, detail: str, escalation: str = "") -> Advice:
    return Advice(action, "device", escalation, detail, "exporter_rule", _RAS)


# AWS Neuron: neuron-monitor's per-device uncorrectable counts (neuron_hw_counters'
# mem_ecc_uncorrected, sram_ecc_uncorrected). AWS's hardware-error table: "SRAM
# Uncorrectable" and "HBM Unrepairable Uncorrectable" -> "Replace the EC2 instance by
# terminating it or stopping then starting it" (an EC2 retirement notice follows within
# 15 minutes; the kernel logs NEURON_HW_ERR=... action=TERMINATE_INSTANCE). A reboot stays
# on the same hardware, so the word is replace_device, and the instance carries every
# device of the node: scope node. AWS names no next step; contact_vendor (AWS Support,
# should a replaced instance report it again) is the exporter's.
_NEURON_REPLACE = (
    "replace the EC2 instance: terminate it, or stop then start it"
    " (a reboot stays on the same hardware)"
)


def _neuron(memory: str) -> Advice:
    return Advice(
        REPLACE_DEVICE,
        "node",
        CONTACT_VENDOR,
        f"{memory} uncorrectable error: {_NEURON_REPLACE}",
        "vendor_catalog",
        NEURON_HW_ERRORS,
    )


GROWTH_RULES: dict[str, tuple[int, dict[str, tuple[str, str, Advice]]]] = {
    ACCEL_INTEL_RAS_UNCORRECTABLE_ERRORS_TOTAL: (
        2,
        {
            "reset": (
                "ras_reset",
                DEGRADED,
                _ras(RESTART_APP, "the driver reset an engine: its work was lost", RESET_DEVICE),
            ),
            "programming": (
                "ras_programming",
                DEGRADED,
                _ras(RESTART_APP, "a hardware exception the workload caused"),
            ),
            "driver": (
                "ras_driver",
                DEGRADED,
                _ras(RESET_DEVICE, "low-level driver communication errors", REBOOT_NODE),
            ),
            "compute": (
                "ras_compute",
                FAILED,
                _ras(RESET_DEVICE, "uncorrectable compute hardware errors", CONTACT_VENDOR),
            ),
            "non_compute": (
                "ras_non_compute",
                FAILED,
                _ras(RESET_DEVICE, "uncorrectable fixed-function errors", CONTACT_VENDOR),
            ),
            "cache": (
                "ras_cache",
                FAILED,
                _ras(RESET_DEVICE, "uncorrectable cache errors", CONTACT_VENDOR),
            ),
        },
    ),
    ACCEL_NEURON_ECC_UNCORRECTED_ERRORS_TOTAL: (
        2,
        {
            "hbm": ("hbm_uncorrectable", FAILED, _neuron("HBM")),
            "sram": ("sram_uncorrectable", FAILED, _neuron("SRAM")),
        },
    ),
}
# Counters the source counts since the daemon started (neuron-monitor's per-period
# deltas, added up): their first reading has a baseline of 0, not none, so a count
# already there at the first poll is growth (it happened while this daemon ran).
COUNTED_FROM_ZERO = frozenset({ACCEL_NEURON_ECC_UNCORRECTED_ERRORS_TOTAL})
GROWTH_STATES: dict[str, str] = {
    reason: state for _pos, rules in GROWTH_RULES.values() for reason, state, _a in rules.values()
}
GROWTH_ADVICE: dict[str, Advice] = {
    reason: advice for _pos, rules in GROWTH_RULES.values() for reason, _s, advice in rules.values()
}


def growth_reason(metric: str, labels: tuple[str, ...]) -> str:
    """The reason a growth of this counter is; "" when it is none."""
    rule = GROWTH_RULES.get(metric)
    if rule is None or len(labels) <= rule[0]:
        return ""
    found = rule[1].get(labels[rule[0]])
    return found[0] if found else ""


# A reason that says more than another: the other is dropped when both are found.
SUPERSEDES = {"reset_wedged": "reset_required", "reset_repair": "reset_required"}


def reason_advice(reason: str, down_why: frozenset[str] = frozenset()) -> Advice | None:
    """What ``reason`` asks for (``device_down`` by the down reasons); None: nothing."""
    if reason == "device_down":
        for why in sorted(down_why):
            found = DOWN_ADVICE.get(why)
            if found is not None:
                return found
    return REASON_ADVICE.get(reason)


def apply_value_rules(
    metric: str, value: float, labels: tuple[str, ...], out: dict[str, str]
) -> None:
    """Add to ``out`` (reason -> state) each vendor rule of ``metric`` the reading meets."""
    for reason, state, test in VALUE_RULES.get(metric, ()):
        if test(value, labels):
            out[reason] = state


def settle(reasons: dict[str, str]) -> None:
    """Drop the reasons a more telling one found beside them supersedes."""
    for better, worse in SUPERSEDES.items():
        if better in reasons:
            reasons.pop(worse, None)
