"""AMD's AFID (AMD Field ID) table as data: what each AFID is, and what AMD's guide asks.

Pure data and lookups, below :mod:`exporter.actions` (which turns a row into an
``Advice``); the sources are cited per row and gathered in
``shared/reference/afid-table.md`` and docs/amd.md.

**What an AFID is** (:func:`describe`):

- AFIDs 1-34, MI300-class, as AMD's decoder embeds them: ROCm/amdsmi
  ``src/aca-decode/error_map.c`` @ 4bc305a6, "AFID_VERSION 0.7": category, type
  ("service error") and severity. 31-33 (the CPER record was malformed, incomplete
  or invalid) and 34 (nothing matched) say the decoder could not classify the event.
- 16999: ``ADDC_UNCLASSIFIED_AFID`` of the current decoder (addc-base 3.3, vendored in
  ROCm/rocm-systems ``projects/amdsmi/third_party/addc-base``, ``include/addc/lib_c.h``
  @ bfb078ee): the decoder could not classify the event either.
- 40000-59999, MI450-class: ``bank base + 0/64/128 by severity + error code``
  (addc-base ``src/addc-mca/mi450_gpu_afid.hpp`` @ bfb078ee), so the severity is
  ``(afid - base) // 64`` and the bank is the base. A number in that range outside
  every bank is unknown.

**What to do** (:func:`guide`): AMD publishes its service actions keyed by node
condition, not by AFID (the GPU Operator's remediation ConfigMap "derived from the AMD
Service Action Guide", ROCm/gpu-operator
``internal/controllers/remediation/configs/default-configmap.yaml`` @ e1b65568), and
says the AFID -> condition join "is not publicly distributed". The join here is
**inferred by name** (the condition names repeat the AFID types: AMDGPUXgmi,
AMDGPUOnDieEcc, ...), so its rows are ``vendor_inferred``. Corrected and uncorrected
non-fatal AFIDs get the exporter's own rule (``exporter_rule``: the guide's conditions
fire on fatal records only): corrected asks nothing (counted; alert on the rate),
uncorrected non-fatal degrades the device and escalates to a reboot when it repeats
(:data:`REPEAT_RECORDS`). An MI450 fatal AFID takes the row of the MI300 AFID that
addc's MI300 rule gives the same bank and error code (``mi300_gpu_afid.hpp``).

**Severity**: the table's (AMD's decoder derived it from the bank's own status bits,
per error) wins over the CPER record's (the worst of all the sections a record
carries); the record's is used only where the table names none (31-34, 16999, unknown).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from exporter.catalog.vocabulary import AFID_CLASSIFIED, AFID_TABLE_SEVERITIES

# The table's severity words: the CPER ones (accel_amd_afid_errors_total's severity
# label) where they match, so an info series joins its counts; the decoder's
# "Fail-to-init" (boot time) and "ALL" (any severity: the format rows) besides.
FATAL = "fatal"
NON_FATAL = "non_fatal_uncorrected"
CORRECTED = "non_fatal_corrected"
FAIL_TO_INIT = "fail_to_init"
ANY = "any"
UNKNOWN = "unknown"
TABLE_SEVERITIES = AFID_TABLE_SEVERITIES  # the words above (tests/unit/test_afids.py)
# AMD's own words for each, as error_map.c spells them.
AMD_SEVERITY = {
    FATAL: "Fatal",
    NON_FATAL: "Uncorrected, Non-fatal",
    CORRECTED: "Corrected",
    FAIL_TO_INIT: "Fail-to-init",
    ANY: "ALL",
}
# accel_amd_afid_info's classified label: the decoder classified the event, could not
# (31-34, 16999), or no table here names the AFID.
CLASSIFIED = AFID_CLASSIFIED

MI300_SOURCE = "ROCm/amdsmi src/aca-decode/error_map.c @ 4bc305a6 (AFID_VERSION 0.7)"
ADDC_SOURCE = "addc-base 3.3.0 include/addc/lib_c.h (ROCm/rocm-systems @ bfb078ee)"
MI450_SOURCE = "addc-base 3.3.0 src/addc-mca/mi450_gpu_afid.hpp (ROCm/rocm-systems @ bfb078ee)"
SAG_SOURCE = (
    "AMD Service Action Guide ConfigMap (ROCm/gpu-operator default-configmap.yaml"
    " @ e1b65568), condition joined by name (inferred)"
)
RULE_SOURCE = "accel-exporter rule by AFID severity (docs/health.md)"

UNCLASSIFIED_AFID = 16999
MI450_FIRST, MI450_LAST = 40000, 59999
# An uncorrected non-fatal AFID this many times within health.event_window (records,
# the first included) escalates to its escalation: once is a transient the hardware
# contained; a third time in the window, it recurs (and two sections of one burst
# are not yet a pattern).
REPEAT_RECORDS = 3


@dataclass(frozen=True)
class Afid:
    """What one AFID is: its category, type and severity, and the table they come from.

    ``severity`` is one of :data:`TABLE_SEVERITIES`; ``classified`` one of
    :data:`CLASSIFIED`; ``source`` the table (file and commit) the row comes from.
    ``analog`` is, for an MI450-class AFID, the MI300 AFID of the same bank, error
    code and severity (0: none); ``bank`` its bank name.
    """

    afid: int
    category: str
    type: str
    severity: str
    classified: str
    source: str
    bank: str = ""
    analog: int = 0

    @property
    def known(self) -> bool:
        """Whether a table names the AFID."""
        return self.classified != "unknown"


_BOOT = "Boot-Time Errors"
_LINK = "Off-Package Link Errors"
_HBM = "HBM Errors"
_DEV = "Device Internal Errors"
_CPER = "CPER Format"
# error_map.c: {id, category, type, method ("CPER" for all), severity}.
_MI300: dict[int, tuple[str, str, str]] = {
    1: (_BOOT, "FW Load", FAIL_TO_INIT),
    2: (_BOOT, "HBM BIST Test", FAIL_TO_INIT),
    3: (_BOOT, "HBM Memory Test", FAIL_TO_INIT),
    4: (_BOOT, "HBM Training", FAIL_TO_INIT),
    5: (_BOOT, "Unhandled", FAIL_TO_INIT),
    6: (_BOOT, "Unknown", FAIL_TO_INIT),
    7: (_BOOT, "USR CP Link Training", FAIL_TO_INIT),
    8: (_BOOT, "USR DP Link Training", FAIL_TO_INIT),
    9: (_BOOT, "WAFL Link Training", FAIL_TO_INIT),
    10: (_BOOT, "XGMI Link Training", FAIL_TO_INIT),
    11: (_BOOT, "Boot Controller Data Abort", FAIL_TO_INIT),
    12: (_BOOT, "Boot Controller Generic", FAIL_TO_INIT),
    13: (_LINK, "PCIe AER", CORRECTED),
    14: (_LINK, "PCIe AER", FATAL),
    15: (_LINK, "WAFL", CORRECTED),
    16: (_LINK, "WAFL", FATAL),
    17: (_LINK, "XGMI", CORRECTED),
    18: (_LINK, "XGMI", FATAL),
    19: (_HBM, "Bad Page Retirement Threshold", FATAL),
    20: (_HBM, "On-die ECC", FATAL),
    21: (_HBM, "End-to-end CRC", FATAL),
    22: (_HBM, "On-die ECC", NON_FATAL),
    23: (_HBM, "End-to-end CRC", NON_FATAL),
    24: (_HBM, "All", CORRECTED),
    25: (_HBM, "All Others", FATAL),
    26: (_DEV, "Hardware Assertion (HWA)", FATAL),
    27: (_DEV, "Watchdog Timeout (WDT)", FATAL),
    28: (_DEV, "All Others", NON_FATAL),
    29: (_DEV, "All Others", CORRECTED),
    30: (_DEV, "All Others", FATAL),
    31: (_CPER, "Malformed CPER", ANY),
    32: (_CPER, "Incomplete ACA Data", ANY),
    33: (_CPER, "Invalid ACA Data", ANY),
    34: ("Unidentified Errors", "Unidentified Error", ANY),
}
# The AFIDs by which the decoder says it could not classify the event.
UNCLASSIFIED = frozenset({31, 32, 33, 34, UNCLASSIFIED_AFID})

# mi450_gpu_afid.hpp: bank base -> (hw_id, mca_type, the MI300 bank_table name sharing
# that hw_id/type, "" where none does: ROCm/amdsmi src/aca-decode/aca_tables.c @ 71327439).
MI450_BANKS: dict[int, tuple[int, int, str]] = {
    40001: (0x2E, 2, "cs"),
    40257: (0x2E, 1, "pie"),
    40513: (0x77, 5, ""),
    40769: (0x96, 0, "umc"),
    41025: (0x01, 1, "smu"),
    41281: (0xFD, 0, ""),
    41537: (0x12, 0, ""),
    41793: (0xFF, 2, ""),
    42049: (0x1FD, 0, ""),
    42305: (0x18, 0, "nbio"),
    42561: (0x117, 0, ""),
    42817: (0x46, 1, "pcie"),
    43073: (0x259, 0, "kpx_serdes"),
    43329: (0x50, 0, "pcs_xgmi"),
    43585: (0x6C, 0, "nbif"),
    43842: (0x80, 0, "shub"),
    44097: (0x70, 0, ""),
    44353: (0x73, 0, ""),
    44613: (0x27, 0, ""),
    44865: (0x1E1, 0, ""),
    45121: (0x40, 0, ""),
    45377: (0x346, 0, ""),
    45633: (0x164, 0, ""),
    45889: (0x160, 0, ""),
    46081: (0x01, 2, ""),
    46273: (0x5C, 0, ""),
    46465: (0xDD, 0, ""),
    46657: (0x16C, 0, ""),
}
# Severity offset // 64 -> severity; error codes (error_code_ext) are 0..63.
_MI450_SEVERITIES = (CORRECTED, NON_FATAL, FATAL)
_MI450_SPAN = 64 * len(_MI450_SEVERITIES)


def _mi450_analog(bank: str, ext: int) -> int:
    """The MI300 AFID addc's MI300 rule gives a fatal error of this bank and error code.

    mi300_gpu_afid.hpp: pcs_xgmi -> 18; kpx_serdes -> 16; umc ext 0 (on-die ECC) -> 20,
    ext 0xB/0xF (end-to-end CRC) -> 21, other HBM ext -> 25; pie ext 5 (WDT) -> 27;
    pie ext 0 and cs ext 0x11 (hardware assertions) -> 26; anything else -> 30.
    """
    if bank == "pcs_xgmi":
        return 18
    if bank == "kpx_serdes":
        return 16
    if bank == "umc":
        return 20 if ext == 0 else 21 if ext in (0xB, 0xF) else 25
    if bank == "pie" and ext == 5:
        return 27
    if (bank == "pie" and ext == 0) or (bank == "cs" and ext == 0x11):
        return 26
    return 30


def _mi450(afid: int) -> Afid | None:
    """An MI450-class AFID decoded by addc's rule; None outside every bank."""
    for base, (hw_id, mca_type, name) in MI450_BANKS.items():
        if base <= afid < base + _MI450_SPAN:
            offset = afid - base
            severity, ext = _MI450_SEVERITIES[offset // 64], offset % 64
            bank = name or f"hw_id 0x{hw_id:X}/mca_type {mca_type}"
            return Afid(
                afid,
                f"MI450-class GPU bank {bank}",
                f"error code 0x{ext:X}",
                severity,
                "true",
                MI450_SOURCE,
                bank=bank,
                analog=_mi450_analog(name, ext) if severity == FATAL else 0,
            )
    return None


def describe(afid: str | int) -> Afid:
    """What an AFID is, by the table that names it; ``unknown`` when none does."""
    try:
        number = int(afid)
    except ValueError:
        number = -1
    row = _MI300.get(number)
    if row is not None:
        classified = "false" if number in UNCLASSIFIED else "true"
        return Afid(number, *row, classified, MI300_SOURCE)
    if number == UNCLASSIFIED_AFID:
        return Afid(number, "Unclassified", "Unclassified Event", ANY, "false", ADDC_SOURCE)
    if MI450_FIRST <= number <= MI450_LAST:
        found = _mi450(number)
        if found is not None:
            return found
    return Afid(number, "", "", UNKNOWN, "unknown", "")


@dataclass(frozen=True)
class Guide:
    """What AMD's guide (or the exporter's rule) asks for one AFID, before any override.

    The fields of :class:`exporter.actions.Advice` (action, scope, escalation and its
    scope, detail, provenance, reference), plus the guide's node ``condition`` the row
    was joined to ("" for the exporter's rule).
    """

    action: str
    scope: str
    escalation: str
    escalation_scope: str
    detail: str
    provenance: str
    reference: str
    condition: str = ""


# The guide's instructions (default-configmap.yaml), in the words of a finding's detail.
_RESEAT = (
    "reseat the GPU tray (remove it, check the torque of all four screws on all eight"
    " OAMs, re-install), reboot and run AGFHC all_lvl4"
)
_PCIE = (
    "PCIe procedure: run agfhc -t pcie_link_status; check the upstream switches and root"
    " ports for host errors and their mechanical connection; reseat the GPU tray; repeat;"
    " if it still fails replace the OAM, sending AER, SEL and dmesg logs with the RMA"
)
_RMA_OAM = (
    "RMA the GPU (OAM): return it to AMD with the RF event, the CPER records and their"
    " decoded JSON, and install a known-good OAM"
)
_RMA_UBB = "if validation fails, RMA the UBB (the 8-GPU baseboard: all eight OAMs)"
_RERUN = "reboot, run AGFHC all_lvl4 and rerun the known failing workload"


def _sag(
    condition: str,
    action: str,
    scope: str,
    detail: str,
    escalation: str = "",
    escalation_scope: str = "",
) -> Guide:
    return Guide(
        action,
        scope,
        escalation,
        escalation_scope,
        detail,
        "vendor_inferred",
        f"{SAG_SOURCE}: {condition}" if condition else SAG_SOURCE,
        condition,
    )


_BOOT_GUIDE = _sag(
    "AMDGPUBootFailed",
    "reboot_node",
    "node",
    f"{_RERUN}; if validation fails, {_RMA_OAM}",
    "replace_device",
    "device",
)
_GUIDES: dict[int, Guide] = {
    **{afid: _BOOT_GUIDE for afid in range(1, 13)},
    14: _sag(
        "AMDGPUPcieAer",
        "inspect_hardware",
        "baseboard",
        f"{_PCIE}; {_RMA_UBB}",
        "replace_device",
        "baseboard",
    ),
    16: _sag(
        "AMDGPUWafl",
        "inspect_hardware",
        "baseboard",
        f"{_RESEAT}; {_RMA_UBB}",
        "replace_device",
        "baseboard",
    ),
    18: _sag(
        "AMDGPUXgmi",
        "inspect_hardware",
        "baseboard",
        f"{_RESEAT}; {_RMA_UBB}",
        "replace_device",
        "baseboard",
    ),
    19: _sag("AMDGPUBadPageRetirementThreshold", "replace_device", "device", _RMA_OAM),
    20: _sag("AMDGPUOnDieEcc", "replace_device", "device", _RMA_OAM),
    21: _sag("AMDGPUEndToEndCrc", "replace_device", "device", _RMA_OAM),
    25: _sag(
        "AMDGPUHBMError",
        "reboot_node",
        "node",
        f"{_RERUN}; if validation fails, {_RMA_OAM}",
        "replace_device",
        "device",
    ),
    26: _sag(
        "AMDGPUHardwareAssertionHwa",
        "reboot_node",
        "node",
        f"{_RERUN}; if validation fails, {_RMA_OAM}",
        "replace_device",
        "device",
    ),
    27: _sag(
        "AMDGPUWatchdogTimeoutWdt",
        "reboot_node",
        "node",
        f"{_RERUN}; if validation fails, {_RMA_OAM}",
        "replace_device",
        "device",
    ),
    30: _sag("AMDGPUDeviceInternalError", "replace_device", "device", _RMA_OAM),
    **{
        afid: _sag(
            "",
            "contact_vendor",
            "device",
            "the decoder could not read the CPER record: keep the raw record, update amdsmi"
            " and the GPU firmware, and send it to AMD support",
        )
        for afid in (31, 32, 33)
    },
    **{
        afid: _sag(
            "AMDGPUUnhealthy",
            "reboot_node",
            "node",
            "the decoder could not classify the event: reboot and run AGFHC all_lvl4; if it"
            " fails, contact AMD support with the CPER records",
            "contact_vendor",
            "device",
        )
        for afid in (34, UNCLASSIFIED_AFID)
    },
}

# The exporter's rule where the guide's conditions do not fire (fatal records only).
_CORRECTED_DETAIL = {
    13: "corrected PCIe AER: counted; alert on its rate",
    15: "corrected WAFL: counted; alert on its rate (compare with the pre-reset baseline)",
    17: "corrected XGMI: counted; alert on its rate (compare with the pre-reset baseline)",
    24: "corrected HBM: counted; watch the bad-page count against its threshold",
    29: "corrected device internal error: counted; alert on its rate",
}
# After a repeat: the escalation's own next step (AMDGPUOnDieEcc and AMDGPUEndToEndCrc
# ask for the GPU's RMA; nothing is named for the internal errors).
_NON_FATAL_NEXT = {22: "replace_device", 23: "replace_device"}


def _rule(info: Afid) -> Guide | None:
    """The exporter's own rule for a corrected or uncorrected non-fatal AFID."""
    if info.severity == CORRECTED:
        detail = _CORRECTED_DETAIL.get(info.afid, "corrected: counted; alert on its rate")
        return Guide("none", "device", "", "", detail, "exporter_rule", RULE_SOURCE)
    if info.severity == NON_FATAL:
        detail = (
            f"uncorrected, non-fatal: the device is degraded; {REPEAT_RECORDS} records"
            " within health.event_window escalate to reboot_node"
        )
        return Guide("none", "device", "reboot_node", "node", detail, "exporter_rule", RULE_SOURCE)
    return None


def repeated(afid: str | int) -> Guide | None:
    """What a non-fatal AFID asks once it repeated (:data:`REPEAT_RECORDS`); None otherwise."""
    info = describe(afid)
    if info.severity != NON_FATAL:
        return None
    nxt = _NON_FATAL_NEXT.get(info.afid, "")
    detail = (
        f"uncorrected, non-fatal, {REPEAT_RECORDS} or more records within"
        " health.event_window: reboot and run AGFHC all_lvl4"
        + (f"; if it recurs, {_RMA_OAM}" if nxt else "")
    )
    return Guide(
        "reboot_node",
        "node",
        nxt,
        "device" if nxt else "",
        detail,
        "exporter_rule",
        RULE_SOURCE,
    )


def guide(afid: str | int) -> Guide | None:
    """What the built-in table asks for ``afid``; None when no table names it.

    The severity that picks the rule is the table's (see the module); 31-34 and
    16999, which name none, ask the same whatever the CPER record's severity.
    """
    info = describe(afid)
    if not info.known:
        return None
    found = _GUIDES.get(info.analog or info.afid)
    if found is not None and info.analog:
        reference = f"{MI450_SOURCE}; as MI300 AFID {info.analog}: {found.reference}"
        return replace(found, reference=reference)
    if found is not None:
        return found
    return _rule(info)


def inferred(afid: str | int) -> bool:
    """Whether the built-in row of ``afid`` is the inferred join (a site table replaces it)."""
    found = guide(afid)
    return found is not None and found.provenance == "vendor_inferred"


def severity(afid: str | int, record_severity: str) -> str:
    """The severity that counts for ``afid``: the table's, else the CPER record's."""
    info = describe(afid)
    if info.severity in (ANY, UNKNOWN):
        return record_severity or UNKNOWN
    return info.severity


def rows() -> list[Afid]:
    """Every AFID the built-in tables name one by one (1-34 and 16999), in order."""
    return [describe(afid) for afid in (*_MI300, UNCLASSIFIED_AFID)]
