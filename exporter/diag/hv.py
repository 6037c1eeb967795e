"""NVIDIA Health Validation's ``NodeVerdict`` JSON, read as far as NVIDIA documents it.

What is read, and where it is documented (tests/fixtures/diag/README.md quotes each):

- ``overall_severity``: the node's verdict, one of ``PASS``, ``INFO``, ``WARNING``,
  ``CRITICAL``, ``UNKNOWN`` (FAQ, "What does the process exit code mean?": "read
  ``overall_severity`` from the JSON"; overview: "a single verdict: PASS, INFO,
  WARNING, CRITICAL, or UNKNOWN"; verdict schema: "Enums serialize as strings").
- ``AffectedComponent`` objects, "a category with non-Pass results": ``check_ids``
  (list of strings), ``entities`` (list of strings), ``category``, ``max_severity``
  (verdict schema, struct AffectedComponent).

What is not read, because the part of the schema that names it could not be had
(the struct tables of ``CheckVerdict`` and ``NodeVerdict`` and the enums follow
AffectedComponent on the schema page, beyond what could be read of it): the key
under which a NodeVerdict holds its AffectedComponents (they are found here by
their four documented keys, wherever they sit at the top level), the per-check
verdicts, the version field. So no version is pinned, none is guessed, and the
run's version is "". What pins the format instead is the documented shape: a
document whose ``overall_severity`` is no documented word, or with an object that
has some but not all of AffectedComponent's keys, or those keys of other types, is
``schema_drift``.

How the severities read (:data:`RESULT_OF`): CRITICAL fails, WARNING warns, INFO and
PASS pass, UNKNOWN says nothing about the device (a result of ``skip``, counted).
An entity is a GPU of ours when it is a GPU UUID (``GPU-...``), a PCI bus id, or a
bare GPU index (the entity naming is not documented either: other names match
nothing). A component blames a GPU only when it names exactly one entity: with two,
the documented ``max_severity`` is the worse of them and says nothing of which, so
each gets no more than INFO and the component's severity stands at the node. Node
checks (``cpu_count``, ``numa_node_count``, ``gpu_count``: "host-wide ... not bound
to any single device"; ``rdma_linkflap_fatal``: condition scope CLUSTER) are never
evidence about a GPU, whatever their entities: they are node results (entity "").
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from exporter import actions
from exporter.actions import Advice
from exporter.diag.model import (
    FAIL,
    HEALTH_VALIDATION,
    PASS,
    SCHEMA_DRIFT,
    SKIP,
    WARN,
    DeviceResult,
    DiagError,
    Issue,
    Run,
    label_for_test,
)

DOCS = "https://docs.nvidia.com/health-validation"
SCHEMA_URL = f"{DOCS}/reference/verdict-schema.md"
CHECKS_URL = f"{DOCS}/reference/checks"

SEVERITIES = ("PASS", "INFO", "WARNING", "CRITICAL", "UNKNOWN")
RESULT_OF = {"PASS": PASS, "INFO": PASS, "WARNING": WARN, "CRITICAL": FAIL, "UNKNOWN": SKIP}
COMPONENT_KEYS = frozenset({"check_ids", "entities", "category", "max_severity"})
# The test name of the node's own verdict.
NODE_VERDICT = "node_verdict"
# At most this many components, and entities or checks in one: a file cannot grow the
# run without bound.
MAX_COMPONENTS, MAX_ENTITIES = 256, 64

# Checks about the node, never about one GPU (docs: checks/cpu.md, node.md, infiniband.md).
NODE_CHECKS = frozenset({"cpu_count", "numa_node_count", "gpu_count", "rdma_linkflap_fatal"})

# Each remediation rung in our vocabulary (docs: "Recommended action: operational state
# `drain`, then `reset_gpu` -> `restart_os` -> `service_required`"). ``drain`` is the
# operational state that goes with every rung (the node or device leaves service): our
# actions all imply it.
RUNGS: dict[str, str] = {
    "reset_gpu": actions.RESET_DEVICE,
    "restart_os": actions.REBOOT_NODE,
    "service_required": actions.SERVICE,
}
# Each check's ladder, as its catalog page lists it (only those read whole).
LADDERS: dict[str, tuple[str, tuple[str, ...]]] = {
    "cpu_count": ("cpu.md", ("reset_gpu", "restart_os", "service_required")),
    "gpu_count": ("node.md", ("reset_gpu", "restart_os", "service_required")),
    "gpu_xid_46": ("xid.md", ("reset_gpu", "service_required")),
}

_UUID = re.compile(r"^GPU-[0-9A-Fa-f]{8}(-[0-9A-Fa-f]{4}){3}-[0-9A-Fa-f]{12}$")
_BUS_ID = re.compile(r"^([0-9a-fA-F]{4,8}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")


def is_hv(doc: Mapping[str, Any]) -> bool:
    """Whether a JSON document is a Health Validation NodeVerdict (its documented key)."""
    return "overall_severity" in doc


def _drift(detail: str) -> DiagError:
    return DiagError(SCHEMA_DRIFT, detail, HEALTH_VALIDATION)


def _severity(value: object, where: str) -> str:
    if not isinstance(value, str) or value not in SEVERITIES:
        raise _drift(f"{where} {str(value)[:20]!r} is none of {', '.join(SEVERITIES)}")
    return value


def parse(doc: Mapping[str, Any]) -> Run:
    """The run of a NodeVerdict: the node's verdict and each component's; drift otherwise."""
    overall = _severity(doc.get("overall_severity"), "overall_severity")
    out = [_result("", NODE_VERDICT, overall, (), "node")]
    for comp in _components(doc):
        checks, entities = comp["check_ids"], comp["entities"]
        category, worst = comp["category"], comp["max_severity"]
        test = label_for_test(category)
        gpus = [] if set(checks) <= NODE_CHECKS else [e for e in entities if gpu_entity(e)]
        if len(entities) == 1 and len(gpus) == 1:
            out.append(_result(gpus[0], test, worst, checks, category))
            continue
        # Several entities, or none a GPU: the component's severity is the node's.
        out.append(_result("", test, worst, checks, category))
        for gpu in gpus:
            floor = worst if worst in ("PASS", "INFO", "UNKNOWN") else "INFO"
            out.append(_result(gpu, test, floor, checks, category))
    # One run evaluates the whole node ("collects the current hardware/driver state of
    # one node"): a GPU it does not name passed, so a newer run clears an older one's.
    return Run(HEALTH_VALIDATION, "nvidia", "", tuple(out), whole_node=True)


def _components(doc: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every AffectedComponent at the top level, found by its documented keys, checked."""
    found: list[dict[str, Any]] = []
    for value in doc.values():
        if not isinstance(value, list):
            continue
        for item in value:
            if not isinstance(item, dict) or not COMPONENT_KEYS & item.keys():
                continue
            if not item.keys() >= COMPONENT_KEYS:
                missing = ", ".join(sorted(COMPONENT_KEYS - item.keys()))
                raise _drift(f"an AffectedComponent without {missing}")
            found.append(_component(item))
            if len(found) > MAX_COMPONENTS:
                raise _drift(f"more than {MAX_COMPONENTS} affected components")
    return found


def _component(item: Mapping[str, Any]) -> dict[str, Any]:
    checks, entities, category = item["check_ids"], item["entities"], item["category"]
    for name, value in (("check_ids", checks), ("entities", entities)):
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise _drift(f"AffectedComponent.{name} is not a list of strings")
    if len(entities) > MAX_ENTITIES or len(checks) > MAX_ENTITIES:
        raise _drift(f"an AffectedComponent of more than {MAX_ENTITIES} entities or checks")
    if not isinstance(category, str) or not category.strip():
        raise _drift("AffectedComponent.category is not a name")
    worst = _severity(item["max_severity"], "AffectedComponent.max_severity")
    return {
        "check_ids": tuple(c.strip() for c in checks),
        "entities": [e.strip() for e in entities],
        "category": category,
        "max_severity": worst,
    }


def gpu_entity(entity: str) -> bool:
    """Whether an entity names a GPU the exporter can match: a UUID, a PCI bus id, an index."""
    return bool(_UUID.match(entity) or _BUS_ID.match(entity) or entity.isdecimal())


def _result(
    entity: str, test: str, severity: str, checks: tuple[str, ...], category: str
) -> DeviceResult:
    """One result; a GPU UUID or bus id as the entity is kept where the matcher looks for it.

    Its issues are the component's check ids (the node's verdict: ``overall_severity``),
    each with the severity it stands at here and the component's category.
    """
    word = severity.lower()
    issues = tuple(Issue(c, word, category) for c in checks) or (
        Issue("overall_severity", word, category),
    )
    uuid = entity if _UUID.match(entity) else ""
    bus = entity if _BUS_ID.match(entity) else ""
    number = entity if entity.isdecimal() else ""
    node = not (number or uuid or bus)
    return DeviceResult(
        number, test, RESULT_OF[severity], issues, uuid=uuid, pci_bus_id=bus, node=node
    )


def advice_for(result: DeviceResult) -> Advice:
    """The action a failed or warned result asks for: its checks' ladder, the worst of them.

    A check with a ladder its catalog page documents gives its first rung, escalating to
    the next (``gpu_xid_46``: reset_device, then service); any other check is a code no
    table names here (``service``, :func:`exporter.actions.unknown_code`).
    """
    found: list[Advice] = []
    for issue in result.issues:
        row = LADDERS.get(issue.code)
        if row is None:
            found.append(actions.unknown_code(f"Health Validation check {issue.code}"))
            continue
        page, rungs = row
        ours = [RUNGS[r] for r in rungs]
        found.append(
            Advice(
                ours[0],
                escalation=ours[1] if len(ours) > 1 else "",
                detail=f"{issue.code}: drain, then " + " -> ".join(rungs),
                provenance="vendor_catalog",
                reference=f"{CHECKS_URL}/{page}",
            )
        )
    return max(found, key=lambda a: actions.RANK[a.action])
