"""Diagnostic results through the real daemon: a ``dcgmi diag --json`` file failing GPU 1
of the fake NVML makes GPU 1's verdict and action follow (/metrics and /v1/devices),
GPU 0 untouched; an unknown DCGM version is schema_drift; bad files are counted; a
CRITICAL Health Validation NodeVerdict naming GPU 1 does the same, its node checks
stay at the node."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from tests.e2e.test_health_actions_daemon import ACTIONS, STATES, one_hot, reasons
from tests.e2e.test_nvml_daemon import nvml_config
from tests.helpers.daemon import Daemon, samples, value

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "diag"


def run_file(failing: int | None, version: str = "4.2.3") -> bytes:
    """A DCGM 4 level-2 run of GPUs 0 and 1; ``failing`` fails the memory test with
    DCGM_FR_PENDING_PAGE_RETIREMENTS (6: severity RESET, category HARDWARE_MEMORY)."""

    def result(gpu: int) -> dict[str, Any]:
        out: dict[str, Any] = {"entity_group": "GPU", "entity_group_id": 1, "entity_id": gpu}
        if gpu == failing:
            out["status"] = "Fail"
            out["warnings"] = [
                {
                    "error_category": 10,
                    "error_id": 6,
                    "error_severity": 6,
                    "warning": f"Pending page retirements detected on GPU {gpu}.",
                }
            ]
        else:
            out["status"] = "Pass"
        return out

    tests = [
        {"name": "memory", "results": [result(0), result(1)], "test_summary": {"status": "Pass"}},
        {
            "name": "software",
            "results": [
                {"entity_group": "GPU", "entity_group_id": 1, "entity_id": g, "status": "Pass"}
                for g in (0, 1)
            ],
            "test_summary": {"status": "Pass"},
        },
    ]
    doc = {
        "DCGM Diagnostic": {"test_categories": [{"category": "Hardware", "tests": tests}]},
        "metadata": {"version": version, "Driver Version Detected": "580.82.09"},
    }
    return json.dumps(doc, indent=4).encode()


def drop(directory: Path, name: str, data: bytes) -> None:
    """Write as a prolog should: a temporary name, then a rename (never read half-written)."""
    tmp = directory / f".{name}.tmp"
    tmp.write_bytes(data)
    tmp.rename(directory / name)


def listed(d: Daemon, uuid: str) -> dict[str, Any]:
    (found,) = [dev for dev in d.get("/v1/devices").json()["devices"] if dev["uuid"] == uuid]
    return found  # type: ignore[no-any-return]


def test_a_failed_diag_run_fails_its_gpu_and_bad_files_are_only_counted(
    daemon_factory: Any, fake_nvml: Any, tmp_path: Path
) -> None:
    fake = fake_nvml(2)
    diag = tmp_path / "diag"
    diag.mkdir()
    config = nvml_config()
    config["sources"]["diag"] = {"path": str(diag), "interval": "1s"}
    d: Daemon = daemon_factory(config, env=fake.env())
    me = [{"device": str(i), "uuid": fake.uuid(i)} for i in range(2)]
    d.wait_metric("accel_device_health", 1, state="ok", **me[1])
    d.wait_metric("accel_diag_directory_present", 1)

    drop(diag, "prolog-job41.json", run_file(failing=1))
    d.wait_metric("accel_device_health", 1, state="failed", **me[1])
    got = samples(d.metrics())
    assert one_hot(got, "accel_device_health", STATES, **me[1]) == "failed"
    assert one_hot(got, "accel_device_recommended_action", ACTIONS, **me[1]) == "reset_device"
    assert reasons(got, me[1]["uuid"]) == {"diag_failed": "reset_device"}
    assert value(got, "accel_device_health_reason_info", reason="diag_failed", **me[1]) == 1
    finding = [
        dict(k[1])
        for k in got
        if k[0] == "accel_device_action_reason_info" and ("uuid", me[1]["uuid"]) in k[1]
    ]
    assert [f["provenance"] for f in finding] == ["vendor_catalog"]
    # GPU 0 passed: untouched.
    assert one_hot(got, "accel_device_health", STATES, **me[0]) == "ok"
    assert one_hot(got, "accel_device_recommended_action", ACTIONS, **me[0]) == "none"
    assert reasons(got, me[0]["uuid"]) == {}
    # The run's own families, per device and test.
    dcgm = {"suite": "dcgm", "test": "memory"}
    assert value(got, "accel_diag_test_result", result="fail", **dcgm, **me[1]) == 1
    assert value(got, "accel_diag_test_result", result="pass", **dcgm, **me[0]) == 1
    code = {"code": "DCGM_FR_PENDING_PAGE_RETIREMENTS", "severity": "reset"}
    assert value(got, "accel_diag_test_info", category="hardware_memory", **code, **dcgm, **me[1])
    assert value(got, "accel_diag_run_info", suite="dcgm", version="4.2.3") == 1
    assert value(got, "accel_diag_files_total", suite="dcgm", result="accepted") == 1

    # /v1/devices says the same, with DCGM's words in the detail.
    gpu1 = listed(d, me[1]["uuid"])
    assert (gpu1["verdict"], gpu1["recommended_action"]) == ("failed", "reset_device")
    (why,) = [r for r in gpu1["reasons"] if r["reason"] == "diag_failed"]
    assert "DCGM_FR_PENDING_PAGE_RETIREMENTS (reset, hardware_memory)" in why["detail"]
    assert why["provenance"] == "vendor_catalog"
    assert listed(d, me[0]["uuid"])["verdict"] == "ok"

    # Bad input dropped beside it: each counted with its reason, nothing else changes.
    drop(diag, "drift.json", run_file(failing=0, version="4.9.0"))
    with (diag / "big.json").open("wb") as fh:
        fh.truncate(50 * 1024 * 1024)
    real = (FIXTURES / "dcgm-4.2.3-gb10-r1.json").read_bytes()
    drop(diag, "cut.json", real[: len(real) // 3])
    drop(diag, "garbage.json", b"{not json: ]")
    outside = tmp_path / "elsewhere.json"
    outside.write_bytes(run_file(failing=0))
    (diag / "link.json").symlink_to(outside)
    os.mkfifo(diag / "pipe.json")
    d.wait_metric("accel_diag_files_rejected_total", 1, reason="not_regular_file")
    d.wait_metric("accel_diag_files_total", 1, suite="dcgm", result="schema_drift")
    got = samples(d.metrics())
    rejected = {
        dict(k[1])["reason"]: v for k, v in got.items() if k[0] == "accel_diag_files_rejected_total"
    }
    assert rejected == {
        "too_large": 1,
        "truncated": 1,
        "unparseable": 1,
        "symlink": 1,
        "not_regular_file": 1,
    }
    assert value(got, "accel_diag_schema_drift_info", suite="dcgm", version="4.9.0") == 1
    assert value(got, "accel_exporter_source_up", source="diag") == 1
    # The drifted file would have failed GPU 0 had it been guessed at; the symlink too.
    assert one_hot(got, "accel_device_health", STATES, **me[0]) == "ok"
    assert one_hot(got, "accel_device_health", STATES, **me[1]) == "failed"

    # A newer run passes GPU 1: its verdict follows the newest run.
    time.sleep(0.05)  # a later modification time than the failing run's
    drop(diag, "epilog-job41.json", run_file(failing=None))
    d.wait_metric("accel_device_health", 1, state="ok", **me[1])
    got = samples(d.metrics())
    assert reasons(got, me[1]["uuid"]) == {}
    assert value(got, "accel_diag_test_result", result="pass", **dcgm, **me[1]) == 1
    assert value(got, "accel_diag_files_total", suite="dcgm", result="accepted") == 2


def hv_verdict(uuid: str) -> bytes:
    """A NodeVerdict of the documented shape (tests/fixtures/diag/README.md): CRITICAL
    gpu_xid_46 on ``uuid``, CRITICAL rdma_linkflap_fatal on a NIC, CRITICAL cpu_count
    naming entity "0" (a node check: never GPU 0's)."""
    doc = json.loads((FIXTURES / "hv-documented-critical.json").read_text())
    doc["affected_components"][0]["entities"] = [uuid]
    return json.dumps(doc, indent=2).encode()


def test_a_critical_health_validation_verdict_fails_only_the_gpu_it_names(
    daemon_factory: Any, fake_nvml: Any, tmp_path: Path
) -> None:
    fake = fake_nvml(2)
    diag = tmp_path / "diag"
    diag.mkdir()
    config = nvml_config()
    config["sources"]["diag"] = {"path": str(diag), "interval": "1s"}
    d: Daemon = daemon_factory(config, env=fake.env())
    me = [{"device": str(i), "uuid": fake.uuid(i)} for i in range(2)]
    d.wait_metric("accel_device_health", 1, state="ok", **me[1])
    d.wait_metric("accel_diag_directory_present", 1)

    drop(diag, "preflight-node.json", hv_verdict(me[1]["uuid"]))
    d.wait_metric("accel_device_health", 1, state="failed", **me[1])
    got = samples(d.metrics())
    assert one_hot(got, "accel_device_recommended_action", ACTIONS, **me[1]) == "reset_device"
    assert reasons(got, me[1]["uuid"]) == {"diag_failed": "reset_device"}
    hv = {"suite": "health_validation"}
    assert value(got, "accel_diag_test_result", result="fail", test="xid", **hv, **me[1]) == 1
    code = {"code": "gpu_xid_46", "severity": "critical", "category": "xid"}
    assert value(got, "accel_diag_test_info", test="xid", **code, **hv, **me[1]) == 1
    # GPU 0 untouched, though the node check cpu_count named entity "0".
    assert one_hot(got, "accel_device_health", STATES, **me[0]) == "ok"
    assert one_hot(got, "accel_device_recommended_action", ACTIONS, **me[0]) == "none"
    assert reasons(got, me[0]["uuid"]) == {}
    # The node's verdict and its node checks: device and uuid "", no evidence.
    node = {"device": "", "uuid": "", **hv}
    for test in ("node_verdict", "infiniband", "cpu"):
        assert value(got, "accel_diag_test_result", result="fail", test=test, **node) == 1
    assert value(got, "accel_diag_files_total", suite="health_validation", result="accepted") == 1
    assert value(got, "accel_diag_run_info", suite="health_validation", version="") == 1

    gpu1 = listed(d, me[1]["uuid"])
    assert (gpu1["verdict"], gpu1["recommended_action"]) == ("failed", "reset_device")
    (why,) = [r for r in gpu1["reasons"] if r["reason"] == "diag_failed"]
    assert why["provenance"] == "vendor_catalog"
    assert "gpu_xid_46 (critical, xid)" in why["detail"]
    assert listed(d, me[0]["uuid"])["verdict"] == "ok"

    # A severity word the documentation does not name: drift, never read.
    drop(diag, "drift.json", b'{"overall_severity": "Critical", "affected_components": []}')
    d.wait_metric("accel_diag_files_total", 1, suite="health_validation", result="schema_drift")
    assert one_hot(samples(d.metrics()), "accel_device_health", STATES, **me[0]) == "ok"

    # A newer verdict of PASS: the run judged the whole node, GPU 1 with it.
    time.sleep(0.05)  # a later modification time than the failing run's
    drop(diag, "preflight-later.json", (FIXTURES / "hv-documented-pass.json").read_bytes())
    d.wait_metric("accel_device_health", 1, state="ok", **me[1])
    got = samples(d.metrics())
    assert reasons(got, me[1]["uuid"]) == {}
    assert value(got, "accel_diag_test_result", result="pass", test="node_verdict", **node) == 1
    assert not [
        k for k in got if k[0] == "accel_diag_test_result" and ("uuid", me[1]["uuid"]) in k[1]
    ]
