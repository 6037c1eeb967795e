"""The diagnostic parsers on published samples (tests/fixtures/diag/README.md) and broken ones."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from exporter import actions
from exporter.diag import advice, formats
from exporter.diag.model import (
    AGFHC,
    DCGM,
    FAIL,
    HEALTH_VALIDATION,
    PASS,
    RVS,
    SCHEMA_DRIFT,
    SKIP,
    TRUNCATED,
    UNKNOWN_FORMAT,
    UNPARSEABLE,
    DeviceResult,
    DiagError,
    Issue,
    Run,
    label_for_test,
)
from exporter.verdict import DEGRADED, FAILED

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "diag"


def sample(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def results(run: Run) -> dict[tuple[str, str], DeviceResult]:
    """(entity, test) -> result; each pair once."""
    out: dict[tuple[str, str], DeviceResult] = {}
    for r in run.results:
        assert (r.entity, r.test) not in out, (r.entity, r.test)
        out[(r.entity, r.test)] = r
    return out


def refused(data: bytes) -> DiagError:
    with pytest.raises(DiagError) as caught:
        formats.parse(data)
    return caught.value


def test_dcgm_4_gb10_real_run() -> None:
    run = formats.parse(sample("dcgm-4.2.3-gb10-r1.json"))
    assert (run.suite, run.vendor, run.version, run.runtime_error) == (DCGM, "nvidia", "4.2.3", "")
    (only,) = run.results
    assert (only.entity, only.test, only.result, only.serial) == ("0", "software", FAIL, "")
    (issue,) = only.issues
    assert (issue.code, issue.severity, issue.category) == (
        "DCGM_FR_PERSISTENCE_MODE",
        "config",
        "software_other",
    )
    assert issue.message.startswith("Persistence Mode: Persistence mode for GPU 0 is disabled")
    # Persistence mode is a setting of the node: degraded and a person to look, never failed.
    hit = advice.judge(DCGM, only)
    assert hit is not None
    assert (hit.reason, hit.state, hit.advice.action) == ("diag_failed", DEGRADED, "service")
    assert hit.advice.provenance == "vendor_catalog"
    assert hit.detail == ("dcgm software: fail DCGM_FR_PERSISTENCE_MODE (config, software_other)")


def test_dcgm_4_issue_215_eight_gpus_pass() -> None:
    run = formats.parse(sample("dcgm-4-issue215-diagnostic.json"))
    got = results(run)
    assert sorted(got) == [(str(g), "diagnostic") for g in range(8)]
    assert {r.result for r in got.values()} == {PASS}
    assert all(advice.judge(DCGM, r) is None for r in got.values())


def test_nvvs_3_1_real_output_with_its_preamble_nulls_and_capitals() -> None:
    run = formats.parse(sample("nvvs-3.1.0-real-output.txt"))
    assert (run.suite, run.version) == (DCGM, "3.1.0")
    got = results(run)
    # Nine Deployment tests named for all eight GPUs ("0,1,...,7"), software per GPU.
    deployment = {t for (_, t) in got if t != "software"}
    assert deployment == {
        "denylist",
        "nvml_library",
        "cuda_main_library",
        "permissions_and_os_related_blocks",
        "persistence_mode",
        "environmental_variables",
        "page_retirement_row_remap",
        "graphics_processes",
        "inforom",
    }
    assert len(got) == 8 * 10
    assert {r.result for r in got.values()} == {PASS}


def test_dcgm_3_dcgmi_shape() -> None:
    run = formats.parse(sample("dcgm-3.3.9-handmade.json"))
    assert run.version == "3.3.9"
    got = results(run)
    # The node-wide Denylist result is every GPU's (the run's serials name 0 and 1).
    assert got[("0", "denylist")].result == PASS and got[("1", "denylist")].result == PASS
    memory = got[("1", "memory")]
    assert (memory.result, memory.serial) == (FAIL, "1652822000002")
    assert memory.issues == (
        Issue(
            "DCGM_FR_FAULTY_MEMORY",
            "isolate",
            "hardware_memory",
            "A memory mismatch was detected on GPU 1, but no error was reported by CUDA or NVML.",
        ),
    )
    hit = advice.judge(DCGM, memory)
    assert hit is not None and (hit.state, hit.advice.action) == (FAILED, "service")
    # 3.x's Deployment error: the message under "warnings", the GPU id a number.
    persistence = got[("1", "persistence_mode")]
    assert persistence.issues[0].message == "Persistence mode for GPU 1 is currently disabled."
    assert persistence.issues[0].code == "DCGM_FR_PERSISTENCE_MODE"
    assert ("0", "persistence_mode") not in got
    assert got[("0", "memory")].result == PASS


def dcgm4(status: str = "Fail", severity: int = 6, version: str = "4.6.0", **extra: Any) -> bytes:
    """A DCGM 4 document: GPU 1 with one error (code 52), GPU 0 passing."""
    warn = {"error_category": 10, "error_id": 52, "error_severity": severity, "warning": "bad"}
    doc: dict[str, Any] = {
        "DCGM Diagnostic": {
            "test_categories": [
                {
                    "category": "Hardware",
                    "tests": [
                        {
                            "name": "memory",
                            "results": [
                                {
                                    "entity_group": "GPU",
                                    "entity_group_id": 1,
                                    "entity_id": 0,
                                    "status": "Pass",
                                },
                                {
                                    "entity_group": "GPU",
                                    "entity_group_id": 1,
                                    "entity_id": 1,
                                    "status": status,
                                    "warnings": [warn],
                                },
                                {
                                    "entity_group": "CPU",
                                    "entity_group_id": 7,
                                    "entity_id": 0,
                                    "status": "Fail",
                                },
                            ],
                            "test_summary": {"status": status},
                        }
                    ],
                }
            ]
        },
        "entity_groups": [
            {
                "entity_group": "GPU",
                "entity_group_id": 1,
                "entities": [{"entity_id": 1, "serial_num": "SN-1", "device_id": "2330"}],
            }
        ],
        "metadata": {"version": version, "Driver Version Detected": "580.82.09"},
    }
    doc.update(extra)
    return json.dumps(doc).encode()


@pytest.mark.parametrize(
    ("severity", "state", "action"),
    [
        (6, FAILED, "reset_device"),  # RESET
        (2, FAILED, "service"),  # ISOLATE
        (3, FAILED, "service"),  # UNKNOWN
        (4, DEGRADED, "service"),  # TRIAGE
        (5, DEGRADED, "service"),  # CONFIG
        (1, DEGRADED, "none"),  # MONITOR
        (0, FAILED, "service"),  # NONE: a failure with no error that counts
        (9, FAILED, "service"),  # outside DCGM's enum: unknown
    ],
)
def test_dcgm_severities(severity: int, state: str, action: str) -> None:
    run = formats.parse(dcgm4(severity=severity))
    got = results(run)
    assert sorted(got) == [("0", "memory"), ("1", "memory")]  # the CPU's result is no GPU's
    assert got[("1", "memory")].serial == "SN-1"
    hit = advice.judge(DCGM, got[("1", "memory")])
    assert hit is not None and (hit.reason, hit.state, hit.advice.action) == (
        "diag_failed",
        state,
        action,
    )
    if severity == 9:
        assert hit.advice.provenance == "unknown_code"


def test_a_dcgm_warning_never_fails() -> None:
    hit = advice.judge(DCGM, results(formats.parse(dcgm4(status="Warn")))[("1", "memory")])
    assert hit is not None
    assert (hit.reason, hit.state, hit.advice.action) == ("diag_warning", DEGRADED, "reset_device")


def test_dcgm_iterations_take_the_last_run() -> None:
    first, last = json.loads(dcgm4(status="Fail")), json.loads(dcgm4(status="Pass"))
    doc = {"iterations": [first, last], "Overall Result": "Pass"}
    got = results(formats.parse(json.dumps(doc).encode()))
    assert got[("1", "memory")].result == PASS


def test_dcgm_runtime_error_is_a_run_without_results() -> None:
    doc = {"DCGM Diagnostic": {"version": "4.2.3", "runtime_error": "Error: unable to connect"}}
    run = formats.parse(json.dumps(doc).encode())
    assert (run.results, run.runtime_error) == ((), "Error: unable to connect")


@pytest.mark.parametrize(
    ("data", "version"),
    [
        (dcgm4(version="4.7.0"), "4.7.0"),  # a release whose writer was not read
        (dcgm4(version="5.0.1"), "5.0.1"),
        (dcgm4(version="3.3.9"), "3.3.9"),  # a 3.x version on a 4.x document
        (dcgm4(status="Inconclusive"), ""),  # a status word no pinned writer writes
        (
            json.dumps(
                {"DCGM GPU Diagnostic": {"test_categories": []}, "version": "4.2.3"}
            ).encode(),
            "4.2.3",
        ),
        (json.dumps({"DCGM Diagnostic": {"test_categories": []}}).encode(), ""),  # no version
    ],
)
def test_dcgm_schema_drift(data: bytes, version: str) -> None:
    exc = refused(data)
    assert (exc.reason, exc.suite) == (SCHEMA_DRIFT, DCGM)
    if version:
        assert exc.version == version


def test_a_drifted_type_is_drift_not_a_crash() -> None:
    doc = json.loads(dcgm4())
    doc["DCGM Diagnostic"]["test_categories"][0]["tests"][0]["results"][1]["entity_id"] = "1"
    assert refused(json.dumps(doc).encode()).reason == SCHEMA_DRIFT
    doc["DCGM Diagnostic"]["test_categories"] = {"not": "a list"}
    assert refused(json.dumps(doc).encode()).reason == SCHEMA_DRIFT


@pytest.mark.parametrize("cut", [0.1, 0.5, 0.9, 0.999])
def test_a_truncated_real_sample_is_truncated(cut: float) -> None:
    data = sample("dcgm-4.2.3-gb10-r1.json")
    assert refused(data[: int(len(data) * cut)]).reason == TRUNCATED


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", TRUNCATED),
        (b"   \n", TRUNCATED),
        (b"Error: could not open /dev/nvidiactl", UNPARSEABLE),
        (b"{not json}", UNPARSEABLE),
        (b'{"a": 1} trailing', UNPARSEABLE),
        (b"\xff\xfe{}", UNPARSEABLE),
        (b"[1, 2]", UNKNOWN_FORMAT),
        (b'{"hello": "world"}', UNKNOWN_FORMAT),
        (b"[" * 100000, UNPARSEABLE),
    ],
)
def test_broken_input(data: bytes, reason: str) -> None:
    assert refused(data).reason == reason


def test_health_validation_is_recognised_and_an_undocumented_severity_is_drift() -> None:
    """The NodeVerdict parser itself: tests/unit/test_diag_hv.py."""
    assert formats.parse(b'{"overall_severity": "PASS"}').suite == HEALTH_VALIDATION
    exc = refused(json.dumps({"overall_severity": "GREEN", "affected_components": []}).encode())
    assert (exc.reason, exc.suite) == (SCHEMA_DRIFT, HEALTH_VALIDATION)


def test_agfhc_amd_sample() -> None:
    run = formats.parse(sample("agfhc-amd-testrunner.json"))
    assert (run.suite, run.vendor) == (AGFHC, "amd")
    got = results(run)
    want = {
        "test1": (PASS, PASS),
        "test2": (FAIL, FAIL),  # GPU-00:GPU-01
        "test3": (SKIP, SKIP),
        "test4": (SKIP, SKIP),  # queued: not run yet
        "test5": (PASS, FAIL),  # GPU-01 only
        "test6": (FAIL, FAIL),  # PROGRAM: recorded on every GPU...
        "test7": (FAIL, FAIL),  # SYSTEM: every GPU, as AMD's runner reads it
        "test8": (FAIL, FAIL),  # no subject: every GPU
    }
    assert {t: (got[("0", t)].result, got[("1", t)].result) for t in want} == want
    hits = {t: advice.judge(AGFHC, got[("1", t)]) for t in want}
    assert hits["test6"] is None  # ...but AGFHC's own failure is no evidence about a GPU
    for t in ("test2", "test5", "test7", "test8"):
        hit = hits[t]
        assert hit is not None and (hit.state, hit.advice.action) == (FAILED, "service"), t
        assert hit.advice.provenance == "vendor_catalog"
    assert got[("1", "test7")].subject == "SYSTEM"
    hit7 = hits["test7"]
    assert hit7 is not None and hit7.detail == "agfhc test7: fail Service [SYSTEM]"


def test_agfhc_pcie_link_and_an_unknown_action() -> None:
    doc = {
        "program_args": {"device_ids": ["GPU-03"]},
        "test_results": {
            "a": {
                "test": "pcie_link_status",
                "state": "failed",
                "primary_suggested_action": "Service",
                "primary_action_subject": "GPU-03",
            },
            "b": {
                "test": "hbm_bw",
                "state": "FAILED",
                "primary_suggested_action": "Reseat",
                "primary_action_subject": "GPU-03",
            },
        },
    }
    got = results(formats.parse(json.dumps(doc).encode()))
    pcie = advice.judge(AGFHC, got[("3", "pcie_link_status")])
    assert pcie is not None
    assert (pcie.advice.action, pcie.advice.escalation, pcie.advice.escalation_scope) == (
        actions.INSPECT_HARDWARE,
        actions.REPLACE_DEVICE,
        "baseboard",
    )
    other = advice.judge(AGFHC, got[("3", "hbm_bw")])
    assert other is not None
    assert (other.advice.action, other.advice.provenance) == ("service", "unknown_code")
    assert "Reseat" in other.advice.detail


@pytest.mark.parametrize(
    "doc",
    [
        {"program_args": {"device_ids": "GPU-00"}, "test_results": {}},
        {"program_args": {"device_ids": ["0"]}, "test_results": {}},
        {"program_args": {"device_ids": ["GPU-00"]}, "test_results": []},
        {"program_args": {"device_ids": ["GPU-00"]}, "test_results": {"t": {"state": "maybe"}}},
    ],
)
def test_agfhc_drift(doc: dict[str, Any]) -> None:
    exc = refused(json.dumps(doc).encode())
    assert (exc.reason, exc.suite) == (SCHEMA_DRIFT, AGFHC)


@pytest.mark.parametrize(
    "name", ["rvs-1.0-amd-testrunner.json", "rvs-noversion-amd-testrunner.json"]
)
def test_rvs_amd_samples(name: str) -> None:
    run = formats.parse(sample(name))
    assert (run.suite, run.vendor) == (RVS, "amd")
    got = results(run)
    if name.startswith("rvs-1.0"):
        assert run.version == "1.0"
        assert {k: r.result for k, r in got.items()} == {
            ("0", "testsuite1_test1"): PASS,
            ("1", "testsuite1_test1"): FAIL,
            ("0", "testsuite1_test2"): PASS,
            ("1", "testsuite1_test2"): PASS,
        }
        hit = advice.judge(RVS, got[("1", "testsuite1_test1")])
        assert hit is not None and (hit.state, hit.advice.action) == (FAILED, "service")
    else:
        assert run.version == ""
        assert got[("0", "testsuite2_test4")].result == FAIL


def test_rvs_stray_braces_of_rocm_711_are_forgiven() -> None:
    data = sample("rvs-1.0-amd-testrunner.json").rstrip() + b"}}}"
    assert len(formats.parse(data).results) == 4


def test_rvs_drift() -> None:
    doc = json.loads(sample("rvs-1.0-amd-testrunner.json"))
    doc["version"] = "2.0"
    exc = refused(json.dumps(doc).encode())
    assert (exc.reason, exc.suite, exc.version) == (SCHEMA_DRIFT, RVS, "2.0")
    doc["version"] = "1.0"
    doc["testsuite1"]["test1"][0]["pass"] = "sometimes"
    assert refused(json.dumps(doc).encode()).reason == SCHEMA_DRIFT


@pytest.mark.parametrize(
    ("name", "label"),
    [
        ("Permissions and OS Blocks", "permissions_and_os_blocks"),
        ("targeted stress", "targeted_stress"),
        ("Page Retirement/Row Remap", "page_retirement_row_remap"),
        ("  ", "unnamed"),
        ("x" * 100, "x" * 64),
    ],
)
def test_test_names_as_labels(name: str, label: str) -> None:
    assert label_for_test(name) == label
