"""What a failed or warned test asks for: the state it puts its device in and the action.

A test that failed gives the reason ``diag_failed``, one that passed with a warning
(DCGM's ``Warn``) ``diag_warning``, never worse than degraded. The state and the
action come from the suite's own words:

- DCGM: the most severe error of the result, by DCGM's severity
  (``dcgmErrorSeverity_t``, dcgm_errors.h: "MONITOR: can perform workload, but needs
  to be monitored; ISOLATE: cannot perform workload, GPU should be isolated;
  UNKNOWN: this error code is not recognized; TRIAGE: this error should be triaged;
  CONFIG: this error can be configured; RESET: drain and reset GPU"):
  ``reset`` -> failed, reset_device; ``isolate`` -> failed, service; ``unknown`` ->
  failed, service (an unknown code); ``triage`` -> degraded, service; ``config`` ->
  degraded, service (a setting of the node, not the GPU: persistence mode off fails
  DCGM's software test on a healthy GPU); ``monitor`` -> degraded, none. A failed
  test with no error, or with only ``none``: failed, service.
- AGFHC: its ``primary_suggested_action``: ``Service`` -> service (failed). A failed
  ``pcie_link_status`` test -> inspect_hardware (AMD's PCIe procedure: switches, root
  ports, seating), escalating to replacing the baseboard (AMD's service actions for
  the PCIe conditions: "AGFHC pcie_link_status ... if validation fails: RMA-UBB",
  ROCm/gpu-operator default-configmap.yaml, shared/reference/afid-table.md §2). Any
  other word: service, the word kept. A ``PROGRAM`` subject (AGFHC itself failed) is
  no evidence about a GPU.
- RVS: a failed test -> service (failed): RVS says pass or fail, nothing more.
- Health Validation: CRITICAL fails, WARNING degrades (a warn); the action is the
  first rung of the check's documented ladder, escalating to the next
  (:func:`exporter.diag.hv.advice_for`); a node result (entity "") is no evidence
  about a device and never reaches here from the source.
"""

from __future__ import annotations

from dataclasses import dataclass

from exporter import actions
from exporter.actions import Advice
from exporter.diag import dcgm_errors, hv
from exporter.diag.amd import PROGRAM
from exporter.diag.model import (
    AGFHC,
    DCGM,
    FAIL,
    HEALTH_VALIDATION,
    RVS,
    WARN,
    DeviceResult,
    Issue,
)
from exporter.verdict import DEGRADED, FAILED, RANK

FAILED_REASON, WARNING_REASON = "diag_failed", "diag_warning"
REASONS = (FAILED_REASON, WARNING_REASON)

_DCGM = "NVIDIA DCGM dcgmErrorSeverity_t (dcgm_errors.h), severity as the run gave it"


def _vendor(action: str, detail: str) -> Advice:
    """An action DCGM's severity names (provenance vendor_catalog)."""
    return Advice(action, detail=detail, provenance="vendor_catalog", reference=_DCGM)


# DCGM severity -> (state, advice).
DCGM_SEVERITY: dict[str, tuple[str, Advice]] = {
    "reset": (FAILED, _vendor(actions.RESET_DEVICE, "drain and reset the GPU")),
    "isolate": (FAILED, _vendor(actions.SERVICE, "cannot perform workload: isolate the GPU")),
    "triage": (DEGRADED, _vendor(actions.SERVICE, "triage the error")),
    "config": (DEGRADED, _vendor(actions.SERVICE, "a setting to correct (node or driver)")),
    "monitor": (DEGRADED, _vendor(actions.NONE, "can perform workload; monitor it")),
}

_AGFHC = "AMD AGFHC primary_suggested_action"
_AMD_SERVICE = "AMD service actions (ROCm/gpu-operator default-configmap.yaml @ e1b65568)"
AGFHC_ACTIONS: dict[str, Advice] = {
    "service": Advice(actions.SERVICE, provenance="vendor_catalog", reference=_AGFHC),
}
# AMD's PCIe procedure, then the baseboard's RMA when validation still fails.
PCIE_LINK = Advice(
    actions.INSPECT_HARDWARE,
    "device",
    actions.REPLACE_DEVICE,
    "AMD's PCIe procedure: check upstream switches and root ports, their seating; reseat",
    "vendor_inferred",
    _AMD_SERVICE,
    "baseboard",
)
RVS_FAILED = Advice(
    actions.SERVICE, detail="an RVS test failed", reference="ROCm Validation Suite: pass=false"
)


@dataclass(frozen=True)
class Hit:
    """What one result gives its device: the reason, its state, the advice and the words."""

    reason: str
    state: str
    advice: Advice
    detail: str


def judge(suite: str, result: DeviceResult) -> Hit | None:
    """The hit of one device's result of one test; None when it asks nothing (passed, skipped)."""
    if result.result not in (FAIL, WARN):
        return None
    if suite == DCGM:
        state, advice = _dcgm(result.issues)
    elif suite == AGFHC:
        if result.subject == PROGRAM:
            return None  # AGFHC itself failed: nothing is known of the GPU
        state, advice = FAILED, _agfhc(result)
    elif suite == RVS:
        state, advice = FAILED, RVS_FAILED
    elif suite == HEALTH_VALIDATION:
        state, advice = FAILED, hv.advice_for(result)
    else:
        state, advice = FAILED, actions.unknown_code(f"{suite} {result.test}")
    reason = FAILED_REASON
    if result.result == WARN:
        reason = WARNING_REASON
        if RANK[state] > RANK[DEGRADED]:
            state = DEGRADED  # a warning never fails a device
    return Hit(reason, state, advice, _words(suite, result))


def _dcgm(issues: tuple[Issue, ...]) -> tuple[str, Advice]:
    """The state and advice of the most severe of a DCGM result's errors."""
    found: list[tuple[str, Advice]] = []
    for issue in issues:
        if issue.severity == "none":
            continue
        row = DCGM_SEVERITY.get(issue.severity)
        if row is None:  # DCGM's own "unknown", or a word of a newer release
            row = (FAILED, actions.unknown_code(f"{issue.code} (severity {issue.severity})"))
        found.append(row)
    if not found:
        return FAILED, Advice(
            actions.SERVICE,
            detail="the test failed with no error code",
            reference=dcgm_errors.REFERENCE,
        )
    return max(found, key=lambda row: (RANK[row[0]], actions.RANK[row[1].action]))


def _agfhc(result: DeviceResult) -> Advice:
    """AGFHC's suggested action as ours (PCIe link tests: AMD's PCIe procedure)."""
    if result.test == "pcie_link_status":
        return PCIE_LINK
    word = result.issues[0].code if result.issues else ""
    return AGFHC_ACTIONS.get(word.strip().lower()) or actions.unknown_code(
        f"AGFHC action {word or '(none)'}"
    )


def _words(suite: str, result: DeviceResult) -> str:
    """``dcgm memory: DCGM_FR_FAULTY_MEMORY (isolate, hardware_memory)``: what the run said."""
    codes = ", ".join(
        f"{i.code} ({i.severity}, {i.category})" if i.severity else i.code for i in result.issues
    )
    blamed = f" [{result.subject}]" if result.subject and result.subject != "GPU" else ""
    return f"{suite} {result.test}: {result.result}" + (f" {codes}" if codes else "") + blamed
