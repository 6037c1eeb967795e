"""What to do about a device: vendor codes mapped to one vocabulary of actions.

XIDs, AFIDs and NVML's recovery action all map to the same recommended actions.

Pure tables and lookups; :mod:`exporter.health` applies them to each poll. The
vocabulary, least to most disruptive: ``none``, ``restart_app``, ``drain_p2p``,
``reset_device``, ``reboot_node``, ``service`` (a person must look, and no table
says at what), ``inspect_hardware`` (reseat, cooling, the PCIe path: the finding's
detail says which), ``contact_vendor``, ``replace_device``. A device's
recommendation is the most disruptive action any of its current findings asks for.
An unknown code maps to ``service``, never to ``none``: a code nobody catalogued is
no reason to keep a job on the device. Each mapping is an :class:`Advice`: the
action, how far it reaches (its scope), the next action when it does not help, and
where the mapping comes from. See docs/health.md for the tables as prose.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from exporter import afids
from exporter.catalog.vocabulary import (
    ACTION_PROVENANCES,
    ACTION_SCOPES,
    RECOMMENDED_ACTIONS,
)

# In rank order: a device's recommendation is the last of these any finding asks for.
ACTIONS = RECOMMENDED_ACTIONS
(
    NONE,
    RESTART_APP,
    DRAIN_P2P,
    RESET_DEVICE,
    REBOOT_NODE,
    SERVICE,
    INSPECT_HARDWARE,
    CONTACT_VENDOR,
    REPLACE_DEVICE,
) = ACTIONS
RANK = {action: rank for rank, action in enumerate(ACTIONS)}
# Actions a person carries out: no reset or reboot resolves what asked for them.
PERSON_ACTIONS = frozenset({SERVICE, INSPECT_HARDWARE, CONTACT_VENDOR, REPLACE_DEVICE})
SCOPES = ACTION_SCOPES
PROVENANCES = ACTION_PROVENANCES


@dataclass(frozen=True)
class Advice:
    """One table row's answer: the action, its scope, the next action, and whence.

    ``scope`` is one of :data:`SCOPES`, ``escalation`` an action or "" (none named),
    ``escalation_scope`` how far the escalation reaches ("": as far as ``scope``; AMD's
    reseat of a GPU tray escalates to replacing the whole baseboard, a reboot of the
    node to replacing one GPU), ``detail`` what exactly to do (the vendor guide's
    words), ``provenance`` one of :data:`PROVENANCES`, ``reference`` the table and its
    version.
    """

    action: str
    scope: str = "device"
    escalation: str = ""
    detail: str = ""
    provenance: str = "exporter_rule"
    reference: str = ""
    escalation_scope: str = ""


def unknown_code(code: str) -> Advice:
    """What a code no table names asks for: ``service``, the code kept in the detail."""
    return Advice(SERVICE, detail=f"no table names {code}", provenance="unknown_code")


# NVIDIA's Xid catalog: "Analyzing Xid Errors with the Xid Catalog"
# (docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html, spreadsheet Xid-Catalog.xlsx,
# sheet "Catalog"), the revision listing codes 1 to 172 (October 2025). Named in docs/health.md.
XID_CATALOG_VERSION = "NVIDIA Xid Catalog, codes 1-172 (docs.nvidia.com, October 2025)"

_APP = ("RESTART_APP", "CONTACT_SUPPORT")
_CUDA = ("RESTART_APP", "CHECK_APP/CUDA")
_IGNORE = ("IGNORE", "CONTACT_SUPPORT")
_RESET = ("RESET_GPU", "CONTACT_SUPPORT")
_RESET_SW = ("RESET_GPU", "INVESTIGATE_SW")
_NVLINK5 = ("WORKFLOW_NVLINK5_ERR", "WORKFLOW_NVLINK5_ERR")
# code -> (immediate resolution bucket, investigatory resolution bucket), as the catalog
# lists them. Codes 1-161 the catalog marks "Unused" and does not list here have the
# bucket CONTACT_SUPPORT (see xid_buckets); 162-172 have no bucket in this revision.
XID_BUCKETS: dict[int, tuple[str, str]] = {
    8: _APP,
    11: _CUDA,
    13: ("RESTART_APP", "WORKFLOW_XID_13"),
    14: _IGNORE,
    25: _CUDA,
    31: ("RESTART_APP", "WORKFLOW_XID_31"),
    32: _CUDA,
    37: ("IGNORE", "CHECK_APP/CUDA"),
    38: _IGNORE,
    39: _APP,
    40: _APP,
    41: _APP,
    43: _IGNORE,
    44: _IGNORE,
    45: ("WORKFLOW_XID_45", "RESTART_FM (solo) / IGNORE, follow the other Xid"),
    46: _RESET,
    48: ("WORKFLOW_XID_48", "WORKFLOW_XID_48"),
    54: ("CHECK_MECHANICALS", "CONTACT_SUPPORT"),
    60: ("RESTART_APP", "INVESTIGATE_SW"),
    62: _RESET,
    63: ("IGNORE", "IGNORE"),
    64: _RESET,
    66: ("IGNORE", "INVESTIGATE_SW"),
    67: _IGNORE,
    68: _APP,
    69: _CUDA,
    70: _APP,
    71: _APP,
    72: _APP,
    74: ("WORKFLOW_NVLINK_ERR", "CONTACT_SUPPORT"),
    75: _APP,
    76: _APP,
    77: _APP,
    78: ("UPDATE_SWFW", "UPDATE_SWFW"),
    79: ("RESTART_BM", "CONTACT_SUPPORT"),
    80: _CUDA,
    82: _APP,
    83: _APP,
    84: _APP,
    85: _APP,
    86: _APP,
    88: _APP,
    89: _APP,
    92: _IGNORE,
    93: _IGNORE,
    94: ("RESTART_APP", "IGNORE (sympathetic)"),
    95: ("RESET_GPU", "IGNORE (sympathetic)"),
    **{code: _APP for code in range(96, 106)},
    106: ("IGNORE", "IGNORE"),
    107: ("IGNORE", "IGNORE"),
    108: ("IGNORE", "XID_137_FLOW"),
    109: _RESET,
    110: _RESET_SW,
    119: _RESET_SW,
    120: _RESET_SW,
    121: _IGNORE,
    **{code: _APP for code in range(126, 136)},
    136: ("RESET_GPU", "INVESTIGATE_LINK_SI"),
    137: ("IGNORE", "XID_137_FLOW"),
    139: _APP,
    140: _RESET,
    141: _IGNORE,
    143: _RESET,
    **{code: _NVLINK5 for code in range(144, 151)},
    151: ("RESTART_VM", "CONTACT_SUPPORT"),
    152: _IGNORE,
    153: _IGNORE,
    154: ("XID_154", "informational, about another Xid"),
    155: ("RESET_GPU", "INVESTIGATE_SW_USER"),
    156: ("RESET_GPU", "IGNORE"),
    157: _IGNORE,
    158: _RESET,
    159: ("CHECK_UVM", "SYMPATHETIC_REPORT_SOLO"),
    160: ("IGNORE", "INVESTIGATE_SW"),
    161: ("IGNORE", "INVESTIGATE_SW"),
}
XID_UNUSED_BELOW = 162  # codes under this not in XID_BUCKETS are "Unused": CONTACT_SUPPORT

# Immediate bucket -> action. The workflows resolve to their first step: Xid 48 (double-bit
# ECC) and the NVLink workflows (74; 144-150, whose intrinfo decode the NVML event does
# not carry, so the fatal reading of the decode table is taken) to a GPU reset, Xid 45
# (preemptive cleanup after another error) to restarting the application. XID_154 is
# resolved by the recovery-action field (see health.py). An empty or unknown bucket: service.
BUCKET_ACTIONS: dict[str, str] = {
    "IGNORE": NONE,
    "RESTART_APP": RESTART_APP,
    "WORKFLOW_XID_45": RESTART_APP,
    "RESET_GPU": RESET_DEVICE,
    "WORKFLOW_XID_48": RESET_DEVICE,
    "WORKFLOW_NVLINK_ERR": RESET_DEVICE,
    "WORKFLOW_NVLINK5_ERR": RESET_DEVICE,
    "RESTART_BM": REBOOT_NODE,
    "RESTART_VM": REBOOT_NODE,
    "CONTACT_SUPPORT": SERVICE,
    "CHECK_MECHANICALS": SERVICE,
    "UPDATE_SWFW": SERVICE,
    "CHECK_UVM": SERVICE,
}
# The Xid whose action is whatever the recovery-action field now says.
XID_RECOVERY_ACTION_CHANGED = 154

# NVML's nvmlDeviceGpuRecoveryAction_t, as accel_device_recovery_action's action label
# names it -> action. recover_imex_domain is an operator's job on the IMEX domain.
RECOVERY_ACTIONS: dict[str, str] = {
    "none": NONE,
    "gpu_reset": RESET_DEVICE,
    "node_reboot": REBOOT_NODE,
    "drain_p2p": DRAIN_P2P,
    "drain_and_reset": RESET_DEVICE,
    "recover_imex_domain": SERVICE,
    "bus_reset": RESET_DEVICE,
    "system_reboot": REBOOT_NODE,
}

# Health reasons that are no event code -> the action they call for. Reasons not here
# (thermal margin, ECC growth, the AFID reasons, whose AFIDs carry their own) ask none.
REASON_ACTIONS: dict[str, str] = {
    "device_down": RESET_DEVICE,
    # A call on it hung or crashed the worker (the exporter isolated it): a reset first.
    "isolated": RESET_DEVICE,
    "row_remap_failure": SERVICE,
    "retired_pages_pending": RESET_DEVICE,
    "row_remap_pending": RESET_DEVICE,
    "link_down": DRAIN_P2P,
    "fabric_degraded": DRAIN_P2P,
    "sram_ecc_threshold": SERVICE,
    "retired_pages_near_limit": SERVICE,
    "bad_pages_over_threshold": SERVICE,
    "bad_pages_pending": RESET_DEVICE,
    "bad_pages_near_threshold": SERVICE,
}

# What clears an event before its window ends: a reset of the device (it came back after
# being lost, or the driver was reloaded) resolves what a restart or a reset resolves;
# a reboot (an event older than this boot) also what a reboot resolves. ``service`` and
# ``drain_p2p`` wait for the window: a reset does not repair hardware.
CLEARED_BY_RESET = frozenset({NONE, RESTART_APP, RESET_DEVICE})
CLEARED_BY_REBOOT = CLEARED_BY_RESET | {REBOOT_NODE}


@dataclass(frozen=True)
class XidAction:
    """One XID's entry: the catalog's buckets and the action they map to."""

    code: int
    immediate: str
    investigatory: str
    action: str


def xid_buckets(code: int) -> tuple[str, str]:
    """(immediate, investigatory) bucket of ``code``; ("", "") when the catalog has none."""
    found = XID_BUCKETS.get(code)
    if found is not None:
        return found
    if 0 < code < XID_UNUSED_BELOW:
        return ("CONTACT_SUPPORT", "")
    return ("", "")


def xid_action(code: int, overrides: Mapping[str, str] | None = None) -> XidAction:
    """The catalog entry of one XID; ``overrides`` (code -> action, from the config) win."""
    immediate, investigatory = xid_buckets(code)
    action = (overrides or {}).get(str(code)) or BUCKET_ACTIONS.get(immediate, SERVICE)
    return XidAction(code, immediate, investigatory, action)


def afid_action(
    afid: str,
    overrides: Mapping[str, Advice | str] | None = None,
    site: Mapping[str, Advice] | None = None,
    *,
    repeated: bool = False,
) -> Advice:
    """What an AMD AFID asks for (:mod:`exporter.afids`, docs/health.md).

    In order: the configured override of the code (``health.afid_actions``, provenance
    ``config``); the site's own AMD-supplied table (``health.afid_table``, provenance
    ``site_table``), which replaces the inferred join: an AFID it does not name keeps
    only the exporter's own rule (corrected, non-fatal), a fatal one is then an unknown
    code; the built-in table; else :func:`unknown_code` (service, the code kept).

    ``repeated``: an uncorrected non-fatal AFID seen ``afids.REPEAT_RECORDS`` times
    within the window: its escalation, which names its own next step. The CPER
    record's severity does not enter: the table's wins (``exporter.afids.severity``).
    """
    given = (overrides or {}).get(afid)
    if isinstance(given, str):  # the plain form of an override: the action word
        given = Advice(given, provenance="config", reference="health config")
    found = given or (site or {}).get(afid)
    if found is None:
        row = afids.guide(afid)
        if row is not None and not (site and row.provenance == "vendor_inferred"):
            found = Advice(
                row.action,
                row.scope,
                row.escalation,
                row.detail,
                row.provenance,
                row.reference,
                row.escalation_scope,
            )
    if found is None:
        found = unknown_code(f"AFID {afid}" + (" (nor does the site table)" if site else ""))
    if repeated and found.escalation:
        nxt = afids.repeated(afid)
        if nxt is not None and found.provenance == "exporter_rule":
            return Advice(
                nxt.action,
                nxt.scope,
                nxt.escalation,
                nxt.detail,
                nxt.provenance,
                nxt.reference,
                nxt.escalation_scope,
            )
        return Advice(
            found.escalation,
            found.escalation_scope or found.scope,
            detail=f"{found.detail} (repeated: escalated)",
            provenance=found.provenance,
            reference=found.reference,
        )
    return found


def recovery_action(name: str) -> str:
    """The action for NVML's recovery-action label; a newer, unknown one asks for service."""
    return RECOVERY_ACTIONS.get(name, SERVICE)


def worst(actions: list[str]) -> str:
    """The most disruptive of ``actions``; ``none`` for none."""
    return max(actions, key=RANK.__getitem__, default=NONE)
