"""``dcgmi diag --json`` output, pinned to the DCGM releases whose writer was read.

NVIDIA publishes no stable schema for this JSON ("release-pin and test CLI
consumers"), so each accepted shape is the one ``dcgmi/Diag.cpp`` of NVIDIA/DCGM
writes at the tagged releases read (the mirror of NVIDIA/DCGM, tags v3.0.4 to
v4.6.0):

- DCGM 3.x (``HelperJsonBuildOutput`` at v3.3.9): the tests under
  ``"DCGM GPU Diagnostic"`` > ``test_categories`` > ``tests``, one result per GPU with
  ``gpu_id`` (a string), ``status`` (``Pass``, ``Skip``, ``Fail``), ``warnings``
  (``warning``, ``error_id``, ``error_category``, ``error_severity``; the Deployment
  tests of 3.x put the message under ``warnings`` itself) and ``info``; the version
  at the top (``version``), beside ``GPU Device Serials`` (GPU id -> serial). The
  NVVS binary's own output of the same era (NVIDIA's test "Deserialize real output",
  nvvs/src/tests/JsonResultTests.cpp) names the GPUs ``gpu_ids`` ("0,1,2" or a
  number), its statuses in capitals, and keeps ``version`` inside the body: read too.
- DCGM 4.0 to 4.6 (``HelperJsonBuildOutput`` at v4.0.0 ... v4.6.0, unchanged): the
  tests under ``"DCGM Diagnostic"`` > ``test_categories``, each result with
  ``entity_group`` / ``entity_group_id`` / ``entity_id``, ``status`` (``Pass``,
  ``Skip``, ``Warn``, ``Fail``), ``warnings`` and ``info`` (a list), a
  ``test_summary``; ``entity_groups`` list each entity's ``serial_num``; the version
  under ``metadata`` > ``version``.

Both may come wrapped in ``iterations`` (``dcgmi diag --iterations``): the last
iteration is the run. A failure to run at all is ``runtime_error`` (a run with no
results). A version outside these releases, a status word or a field of another
type than the pinned writer's is ``schema_drift``: never guessed at.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from exporter.diag import dcgm_errors
from exporter.diag.model import (
    DCGM,
    FAIL,
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

# The releases whose writer was read, by (major, minor), per document shape.
V3_RELEASES = frozenset({(3, 0), (3, 1), (3, 2), (3, 3)})
V4_RELEASES = frozenset({(4, 0), (4, 1), (4, 2), (4, 3), (4, 4), (4, 5), (4, 6)})
V3_BODY = "DCGM GPU Diagnostic"
V4_BODY = "DCGM Diagnostic"
# The status words of HelperDisplayDiagResult (any case: NVVS writes them in capitals).
# "Not Run" results are not written by dcgmi; NVVS may: nothing ran, nothing to say.
STATUSES = {"pass": PASS, "skip": SKIP, "warn": WARN, "fail": FAIL, "not run": SKIP}
# DCGM's GPU entity group (dcgm_fields.h DCGM_FE_GPU), as dcgmi names it.
GPU_GROUP, GPU_GROUP_ID = "GPU", 1
# What DCGM writes for a serial number the GPU does not expose.
NO_SERIAL = frozenset({"", "<<<NOT_SUPPORTED>>>", "N/A"})
_VERSION = re.compile(r"^(\d+)\.(\d+)(?:\.\d+)*")


def is_dcgm(doc: Mapping[str, Any]) -> bool:
    """Whether a JSON document is dcgmi's (either shape, or its iterations)."""
    if V3_BODY in doc or V4_BODY in doc:
        return True
    runs = doc.get("iterations")
    return isinstance(runs, list) and any(
        isinstance(r, dict) and (V3_BODY in r or V4_BODY in r) for r in runs
    )


def parse(doc: Mapping[str, Any]) -> Run:
    """The run a dcgmi document describes; DiagError(schema_drift) when not the pinned shape."""
    runs = doc.get("iterations")
    if V3_BODY not in doc and V4_BODY not in doc and isinstance(runs, list):
        last = [r for r in runs if isinstance(r, dict)]
        if not last:
            raise _drift("iterations without a run")
        doc = last[-1]
    if V4_BODY in doc:
        return _parse_v4(doc)
    return _parse_v3(doc)


def _drift(detail: str, version: str = "") -> DiagError:
    return DiagError(SCHEMA_DRIFT, detail, DCGM, version)


def _release(version: object, releases: frozenset[tuple[int, int]], shape: str) -> str:
    """The version string, checked against the releases of ``shape``'s writer."""
    if not isinstance(version, str) or not version:
        raise _drift(f"a {shape} document without a version")
    found = _VERSION.match(version.strip())
    if found is None or (int(found[1]), int(found[2])) not in releases:
        raise _drift(f"DCGM {version} is no release whose {shape} output was read", version)
    return version.strip()


def _body(doc: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    body = doc.get(key)
    if not isinstance(body, dict):
        raise _drift(f"{key!r} is not an object")
    return body


def _parse_v4(doc: Mapping[str, Any]) -> Run:
    body = _body(doc, V4_BODY)
    meta = doc.get("metadata")
    version = meta.get("version") if isinstance(meta, dict) else body.get("version")
    version = _release(version, V4_RELEASES, "DCGM 4")
    if "runtime_error" in body:
        return Run(DCGM, "nvidia", version, (), runtime_error=str(body["runtime_error"])[:500])
    serials = _v4_serials(doc.get("entity_groups", []))
    out: list[DeviceResult] = []
    for test, entry in _tests(body):
        for result in _list(entry.get("results", []), "results"):
            if not isinstance(result, dict):
                raise _drift("a result is not an object", version)
            if "entity_id" not in result and "entity_group" not in result:
                continue  # no entity (DCGM_FE_NONE): the node's, in the test summary
            group = result.get("entity_group")
            group_id = result.get("entity_group_id", GPU_GROUP_ID)
            if group != GPU_GROUP or group_id != GPU_GROUP_ID:
                continue  # a CPU or an NVSwitch: no device of ours
            entity = result.get("entity_id")
            if not isinstance(entity, int) or isinstance(entity, bool):
                raise _drift("a GPU result without an integer entity_id", version)
            status = _status(result.get("status"), version)
            out.append(
                DeviceResult(
                    str(entity),
                    test,
                    status,
                    _issues(result.get("warnings", []), version),
                    serials.get(str(entity), ""),
                )
            )
    return Run(DCGM, "nvidia", version, tuple(out))


def _v4_serials(groups: object) -> dict[str, str]:
    """GPU entity id -> serial number, from ``entity_groups`` (empty where none is given)."""
    out: dict[str, str] = {}
    for group in _list(groups, "entity_groups"):
        if not isinstance(group, dict) or group.get("entity_group") != GPU_GROUP:
            continue
        for entity in _list(group.get("entities", []), "entities"):
            if isinstance(entity, dict) and isinstance(entity.get("entity_id"), int):
                serial = entity.get("serial_num", "")
                if isinstance(serial, str) and serial.strip() not in NO_SERIAL:
                    out[str(entity["entity_id"])] = serial.strip()
    return out


def _parse_v3(doc: Mapping[str, Any]) -> Run:
    body = _body(doc, V3_BODY)
    version = _release(doc.get("version", body.get("version")), V3_RELEASES, "DCGM 3")
    if "runtime_error" in body:
        return Run(DCGM, "nvidia", version, (), runtime_error=str(body["runtime_error"])[:500])
    given = doc.get("GPU Device Serials", {})
    serials = {
        str(k): v.strip()
        for k, v in (given.items() if isinstance(given, dict) else ())
        if isinstance(v, str) and v.strip() not in NO_SERIAL
    }
    placed: list[tuple[str, dict[str, Any], list[str]]] = []
    gpus: set[str] = set(str(k) for k in (given if isinstance(given, dict) else ()))
    for test, entry in _tests(body):
        for result in _list(entry.get("results", []), "results"):
            if result is None:
                continue  # NVVS leaves null holes in its arrays
            if not isinstance(result, dict):
                raise _drift("a result is not an object", version)
            ids = _v3_ids(result, version)
            gpus.update(ids)
            placed.append((test, result, ids))
    out: list[DeviceResult] = []
    for test, result, ids in placed:
        status = _status(result.get("status"), version)
        issues = _issues(result.get("warnings", []), version)
        # A result naming no GPU is the whole node's (3.x's Deployment tests): every GPU
        # the run names has it.
        for entity in ids or sorted(gpus, key=_numeric):
            out.append(DeviceResult(entity, test, status, issues, serials.get(entity, "")))
    return Run(DCGM, "nvidia", version, tuple(out))


def _v3_ids(result: Mapping[str, Any], version: str) -> list[str]:
    """The GPU ids one 3.x result names: ``gpu_id`` (dcgmi) or ``gpu_ids`` (NVVS); [] for none."""
    raw = result.get("gpu_id", result.get("gpu_ids"))
    if raw is None:
        return []
    if isinstance(raw, int) and not isinstance(raw, bool):
        return [str(raw)]
    if isinstance(raw, str):
        ids = [part.strip() for part in raw.split(",") if part.strip()]
        if all(part.isdigit() for part in ids):
            return [str(int(part)) for part in ids]
    raise _drift(f"a GPU id of another form: {str(raw)[:40]!r}", version)


def _numeric(entity: str) -> tuple[int, str]:
    return (int(entity), "") if entity.isdigit() else (1 << 30, entity)


def _tests(body: Mapping[str, Any]) -> Iterable[tuple[str, Mapping[str, Any]]]:
    """(test label, test entry) of every test of every category; NVVS's null holes skipped."""
    for category in _list(body.get("test_categories", []), "test_categories"):
        if category is None:
            continue
        if not isinstance(category, dict):
            raise _drift("a test category is not an object")
        for entry in _list(category.get("tests", []), "tests"):
            if entry is None:
                continue
            if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
                raise _drift("a test without a name")
            yield label_for_test(entry["name"]), entry


def _list(value: object, what: str) -> list[Any]:
    if not isinstance(value, list):
        raise _drift(f"{what} is not a list")
    return value


def _status(value: object, version: str) -> str:
    word = value.strip().lower() if isinstance(value, str) else None
    if word is None or word not in STATUSES:
        raise _drift(f"a status DCGM {version} does not write: {str(value)[:40]!r}", version)
    return STATUSES[word]


def _issues(warnings: object, version: str) -> tuple[Issue, ...]:
    """The errors of one result: each code named by DCGM's table, severity and category as given."""
    out: list[Issue] = []
    for entry in _list(warnings, "warnings"):
        if entry is None:
            continue
        if isinstance(entry, str):  # an error with no code (NVVS text)
            out.append(Issue(dcgm_errors.name(1), "unknown", "none", entry[:300]))
            continue
        if not isinstance(entry, dict):
            raise _drift("a warning is not an object", version)
        code = entry.get("error_id", 1)
        if not isinstance(code, int) or isinstance(code, bool):
            raise _drift("an error_id that is not an integer", version)
        message = entry.get("warning", entry.get("warnings", ""))
        out.append(
            Issue(
                dcgm_errors.name(code),
                dcgm_errors.severity(entry.get("error_severity"), code),
                dcgm_errors.category(entry.get("error_category"), code),
                str(message)[:300],
            )
        )
    return tuple(out)
