"""AMD's burn-in results: AGFHC's ``results.json`` and RVS's JSON log, as AMD reads them.

Neither format has a published schema or a schema version. The shape pinned here is
the one AMD's GPU Operator test runner consumes (ROCm/device-metrics-exporter at
afd0fe81, ``pkg/testrunner/agfhc.go`` and ``pkg/testrunner/rvs.go``, whose tests
hold AMD's sample documents): a document of another shape is ``schema_drift``.

- AGFHC: ``program_args.device_ids`` (``GPU-00`` ...), ``test_results`` (an object of
  ``{test, state, primary_suggested_action, primary_action_subject}``), optional
  ``test_summary``. ``state`` is ``passed``, ``failed``, ``skipped`` or ``queued``.
  The subject names the failing GPUs (``GPU-00:GPU-01``), else ``SYSTEM`` (the test
  could not call out a GPU), ``PROGRAM`` (AGFHC or a tool it runs failed) or
  ``UNKNOWN`` (AGFHC's manual, as AMD's runner quotes it). AMD's runner fails every
  GPU of the run for ``SYSTEM``, ``UNKNOWN`` and an empty subject; so does this.
  ``PROGRAM`` is the tool's own failure: recorded, but no evidence about a GPU.
- RVS: ``version`` (``1.0``, or none in older logs) and, for every other key (a
  module's action), an object of test -> ``[{gpu_index, pass}]`` with ``pass`` the
  string ``true`` or ``false``. RVS of ROCm 7.1.1 appends stray ``}`` to the log; AMD's
  runner strips them, and so does :func:`rvs_text`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from exporter.diag.model import (
    AGFHC,
    FAIL,
    PASS,
    RVS,
    SCHEMA_DRIFT,
    SKIP,
    DeviceResult,
    DiagError,
    Issue,
    Run,
    label_for_test,
)

AGFHC_STATES = {"passed": PASS, "failed": FAIL, "skipped": SKIP, "queued": SKIP}
AGFHC_GPU = re.compile(r"^GPU-(\d+)$")
# The subjects that blame no GPU (AGFHC's manual, as AMD's runner cites it).
SYSTEM, PROGRAM, UNKNOWN = "SYSTEM", "PROGRAM", "UNKNOWN"
RVS_VERSIONS = frozenset({"1.0"})
RVS_TRAILING_BRACES = 10  # AMD's runner retries as many times


def is_agfhc(doc: Mapping[str, Any]) -> bool:
    """Whether a JSON document is an AGFHC results file."""
    return "program_args" in doc and "test_results" in doc


def is_rvs(doc: Mapping[str, Any]) -> bool:
    """Whether a JSON document is an RVS log: an object of tests whose entries name a gpu_index."""
    for key, value in doc.items():
        if key == "version" or not isinstance(value, dict):
            continue
        for entries in value.values():
            if isinstance(entries, list) and any(
                isinstance(e, dict) and "gpu_index" in e for e in entries
            ):
                return True
    return False


def _drift(suite: str, detail: str, version: str = "") -> DiagError:
    return DiagError(SCHEMA_DRIFT, detail, suite, version)


def parse_agfhc(doc: Mapping[str, Any]) -> Run:
    """The run of an AGFHC ``results.json``; DiagError(schema_drift) when of another shape."""
    args = doc.get("program_args")
    ids = args.get("device_ids") if isinstance(args, dict) else None
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise _drift(AGFHC, "program_args.device_ids is not a list of names")
    gpus = [_agfhc_gpu(i) for i in ids]
    tests = doc.get("test_results")
    if not isinstance(tests, dict):
        raise _drift(AGFHC, "test_results is not an object")
    out: list[DeviceResult] = []
    for key, entry in sorted(tests.items()):
        if not isinstance(entry, dict):
            raise _drift(AGFHC, "a test result is not an object")
        name, state = entry.get("test", key), entry.get("state")
        if not isinstance(name, str) or not isinstance(state, str):
            raise _drift(AGFHC, "a test result without its test and state")
        result = AGFHC_STATES.get(state.strip().lower())
        if result is None:
            raise _drift(AGFHC, f"a state AGFHC's runner does not know: {state[:40]!r}")
        action = str(entry.get("primary_suggested_action", "") or "")
        subject = str(entry.get("primary_action_subject", "") or "").strip()
        blamed, whom = _blamed(subject, gpus)
        for gpu in gpus:
            # The tool's own failure (PROGRAM) is every GPU's failed test, blamed on none.
            failed = result == FAIL and (whom == PROGRAM or blamed is None or gpu in blamed)
            outcome = result if result != FAIL else (FAIL if failed else PASS)
            issues = (Issue(action, message=subject),) if failed and action else ()
            out.append(
                DeviceResult(
                    gpu, label_for_test(name), outcome, issues, subject=whom if failed else ""
                )
            )
    return Run(AGFHC, "amd", "", tuple(out))


def _agfhc_gpu(name: str) -> str:
    found = AGFHC_GPU.match(name.strip())
    if found is None:
        raise _drift(AGFHC, f"a device id not of the form GPU-NN: {name[:40]!r}")
    return str(int(found[1]))


def _blamed(subject: str, gpus: list[str]) -> tuple[set[str] | None, str]:
    """The GPUs a failure's subject blames (None: every GPU of the run) and what it blames.

    ``GPU-00:GPU-01`` blames those two (``GPU``); ``PROGRAM`` blames none of them (the
    tool failed); ``SYSTEM``, ``UNKNOWN``, an empty or another subject: every GPU, as
    AMD's runner reads it.
    """
    parts = [p.strip() for p in subject.split(":") if p.strip()]
    named = [AGFHC_GPU.match(p) for p in parts]
    if parts and all(named):
        return {str(int(m[1])) for m in named if m}, "GPU"
    if parts == [PROGRAM]:
        return set(), PROGRAM
    return None, (parts[0] if len(parts) == 1 and parts[0] in (SYSTEM, UNKNOWN) else UNKNOWN)


def rvs_text(text: str) -> str:
    """An RVS log's text with the stray trailing ``}`` of ROCm 7.1.1's RVS removed.

    Only braces beyond the one closing the document go (the text must still start
    with ``{``); at most as many as AMD's runner strips.
    """
    body = text.strip()
    for _ in range(RVS_TRAILING_BRACES):
        if body.count("}") <= body.count("{") or not body.endswith("}"):
            break
        body = body[:-1].rstrip()
    return body


def parse_rvs(doc: Mapping[str, Any]) -> Run:
    """The run of an RVS JSON log; DiagError(schema_drift) for another version or shape."""
    version = doc.get("version", "")
    if not isinstance(version, str) or (version and version not in RVS_VERSIONS):
        raise _drift(RVS, f"RVS log version {str(version)[:20]!r} is not 1.0", str(version)[:20])
    out: list[DeviceResult] = []
    for module, tests in sorted(doc.items()):
        if module == "version":
            continue
        if not isinstance(tests, dict):
            raise _drift(RVS, f"{module[:40]!r} is not an object of tests", version)
        for name, entries in sorted(tests.items()):
            if not isinstance(entries, list):
                raise _drift(RVS, "a test's results are not a list", version)
            for entry in entries:
                if not isinstance(entry, dict):
                    raise _drift(RVS, "a result is not an object", version)
                passed = entry.get("pass", "")
                if passed in ("", None):
                    continue  # AMD's runner skips an entry with no verdict
                gpu = entry.get("gpu_index")
                if not isinstance(gpu, str | int) or isinstance(gpu, bool):
                    raise _drift(RVS, "a result without its gpu_index", version)
                word = str(passed).strip().lower()
                if word not in ("true", "false"):
                    raise _drift(RVS, f"a pass value not true or false: {word[:20]!r}", version)
                result = PASS if word == "true" else FAIL
                test = label_for_test(f"{module} {name}")
                out.append(DeviceResult(str(gpu).strip(), test, result))
    return Run(RVS, "amd", version, tuple(out))
