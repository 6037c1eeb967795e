"""The diag source on a real directory: matching, the newest run, the window, bad input."""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from exporter.catalog import CATALOG
from exporter.catalog.device import INFO_LABELS
from exporter.config.diag import DiagSourceConfig
from exporter.diag import files
from exporter.diag.model import NOT_REGULAR, SYMLINK, TOO_LARGE, UNREADABLE, DiagError
from exporter.errors import SourceError, SourceUnavailable
from exporter.evidence import EvidenceBoard
from exporter.model import Reading
from exporter.sources.diag import DiagSource
from exporter.verdict import DEGRADED, FAILED

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "diag"
WINDOW = 3600.0
NOW = float(int(time.time()))  # the files made without utime are of now
NVIDIA = [
    ("nvidia", "0", "GPU-aaaa", "00000000:3B:00.0", "SN-0"),
    ("nvidia", "1", "GPU-bbbb", "00000000:3C:00.0", "SN-1"),
]
AMD = [("amd", "0", "amd-0000", "0000:c1:00.0", ""), ("amd", "1", "amd-1111", "0000:c2:00.0", "")]


class FakeView:
    def __init__(self, readings: list[Reading]) -> None:
        self._readings = readings

    def readings(self, metric: str) -> list[Reading]:
        return [r for r in self._readings if r.metric == metric]


class FakeStore:
    """What the device sources reported: accel_device_info per device."""

    def __init__(self, devices: list[tuple[str, ...]]) -> None:
        self.devices = devices
        self.threads: list[str] = []  # the thread of each view() call

    def view(self) -> FakeView:
        self.threads.append(threading.current_thread().name)
        out = []
        for vendor, device, uuid, bus, serial, *partition in self.devices:
            values = dict.fromkeys(INFO_LABELS, "")
            values.update(vendor=vendor, device=device, uuid=uuid, pci_bus_id=bus, serial=serial)
            values.update(partition=partition[0] if partition else "")
            out.append(Reading("accel_device_info", tuple(values[k] for k in INFO_LABELS), 1.0))
        return FakeView(out)


class Harness:
    def __init__(self, path: Path, devices: list[Any], **cfg: Any) -> None:
        self.path = path
        self.wall = [NOW]
        self.board = EvidenceBoard()
        config = DiagSourceConfig(path=str(path), **cfg)
        self.source = DiagSource(
            "diag", config, window=WINDOW, board=self.board, wall=lambda: self.wall[0]
        )
        self.store = FakeStore(devices)
        self.source.attach(self.store)  # type: ignore[arg-type]

    def poll(self) -> dict[tuple[str, tuple[str, ...]], float]:
        got = asyncio.run(self.source.poll())
        out: dict[tuple[str, tuple[str, ...]], float] = {}
        for r in got:
            assert r.metric in CATALOG, r.metric
            assert len(r.labels) == len(CATALOG[r.metric].labels), r.metric
            assert (r.metric, r.labels) not in out, (r.metric, r.labels)
            assert isinstance(r.value, float)
            out[(r.metric, r.labels)] = r.value
        return out

    def put(self, name: str, data: bytes, age: float = 60.0) -> Path:
        path = self.path / name
        path.write_bytes(data)
        os.utime(path, (NOW - age, NOW - age))
        return path

    def evidence(self, uuid: str) -> dict[str, tuple[str, str]]:
        return {
            e.reason: (e.state, e.advice.action)
            for e in self.board.for_device(uuid, "", self.wall[0])
        }


def dcgm4(failing: int, version: str = "4.2.3", code: int = 52, severity: int = 2) -> bytes:
    """A DCGM 4 run of GPUs 0 and 1: ``failing`` fails the memory test, the other passes."""

    def result(gpu: int) -> dict[str, Any]:
        out: dict[str, Any] = {"entity_group": "GPU", "entity_group_id": 1, "entity_id": gpu}
        if gpu == failing:
            out["status"] = "Fail"
            out["warnings"] = [
                {"error_category": 10, "error_id": code, "error_severity": severity, "warning": "x"}
            ]
        else:
            out["status"] = "Pass"
        return out

    doc = {
        "DCGM Diagnostic": {
            "test_categories": [
                {
                    "category": "Hardware",
                    "tests": [
                        {
                            "name": "memory",
                            "results": [result(0), result(1)],
                            "test_summary": {"status": "Fail"},
                        }
                    ],
                }
            ]
        },
        "metadata": {"version": version},
    }
    return json.dumps(doc).encode()


def test_an_absent_directory_is_no_result_and_no_error(tmp_path: Path) -> None:
    h = Harness(tmp_path / "missing", NVIDIA, enabled=True)
    got = h.poll()
    assert got == {("accel_diag_directory_present", ()): 0.0}
    assert h.board.sources() == []
    (tmp_path / "missing").mkdir()
    assert h.poll()[("accel_diag_directory_present", ())] == 1.0


def test_auto_without_the_directory_is_unavailable_and_withdraws_its_evidence(
    tmp_path: Path,
) -> None:
    h = Harness(tmp_path / "d", NVIDIA)  # enabled: auto, the default
    (tmp_path / "d").mkdir()
    h.put("a.json", dcgm4(failing=1))
    h.poll()
    assert h.evidence("GPU-bbbb") == {"diag_failed": (FAILED, "service")}
    (tmp_path / "d" / "a.json").unlink()
    (tmp_path / "d").rmdir()
    with pytest.raises(SourceUnavailable) as caught:
        h.poll()
    assert caught.value.reason == "directory_missing"
    assert h.board.sources() == []


def test_a_failing_gpu_gets_families_and_evidence_the_other_none(tmp_path: Path) -> None:
    h = Harness(tmp_path, NVIDIA)
    h.put("prolog-job7.json", dcgm4(failing=1))
    got = h.poll()
    b = ("1", "GPU-bbbb", "dcgm", "memory")
    a = ("0", "GPU-aaaa", "dcgm", "memory")
    assert got[("accel_diag_test_result", (*b, "fail"))] == 1.0
    assert got[("accel_diag_test_result", (*b, "pass"))] == 0.0
    assert got[("accel_diag_test_result", (*a, "pass"))] == 1.0
    info = ("accel_diag_test_info", (*b, "DCGM_FR_FAULTY_MEMORY", "isolate", "hardware_memory"))
    assert got[info] == 1.0
    assert got[("accel_diag_device_run_timestamp_seconds", ("1", "GPU-bbbb", "dcgm"))] == NOW - 60
    assert got[("accel_diag_run_timestamp_seconds", ("dcgm",))] == NOW - 60
    assert got[("accel_diag_run_info", ("dcgm", "4.2.3"))] == 1.0
    assert got[("accel_diag_files_total", ("dcgm", "accepted"))] == 1.0
    assert got[("accel_diag_unmatched_results", ("dcgm",))] == 0.0
    assert h.evidence("GPU-bbbb") == {"diag_failed": (FAILED, "service")}
    assert h.evidence("GPU-aaaa") == {}
    (item,) = h.board.for_device("GPU-bbbb", "", NOW)
    assert item.expires_at == NOW - 60 + WINDOW
    assert item.detail == "dcgm memory: fail DCGM_FR_FAULTY_MEMORY (isolate, hardware_memory)"
    # Polled again: nothing counted twice, the same evidence.
    again = h.poll()
    assert again[("accel_diag_files_total", ("dcgm", "accepted"))] == 1.0
    assert h.evidence("GPU-bbbb") == {"diag_failed": (FAILED, "service")}


def test_matching_by_serial_beats_the_number(tmp_path: Path) -> None:
    # The run says GPU 0 has serial SN-1: the device with that serial is the one.
    doc = json.loads(dcgm4(failing=0))
    doc["entity_groups"] = [
        {
            "entity_group": "GPU",
            "entity_group_id": 1,
            "entities": [{"entity_id": 0, "serial_num": "SN-1", "device_id": "2330"}],
        }
    ]
    h = Harness(tmp_path, NVIDIA)
    h.put("a.json", json.dumps(doc).encode())
    h.poll()
    assert h.evidence("GPU-bbbb") == {"diag_failed": (FAILED, "service")}
    assert h.evidence("GPU-aaaa") == {}


def test_a_serial_no_device_has_is_not_matched_by_the_number(tmp_path: Path) -> None:
    # The run says GPU 1 is SN-9: neither device is, so GPU 1 (SN-1) is not blamed.
    doc = json.loads(dcgm4(failing=1))
    doc["entity_groups"] = [
        {
            "entity_group": "GPU",
            "entity_group_id": 1,
            "entities": [{"entity_id": 1, "serial_num": "SN-9"}],
        }
    ]
    h = Harness(tmp_path, NVIDIA)
    h.put("a.json", json.dumps(doc).encode())
    got = h.poll()
    assert h.evidence("GPU-bbbb") == {}
    assert got[("accel_diag_unmatched_results", ("dcgm",))] == 1.0
    # GPU 0 gave no serial: still matched by its number.
    assert got[("accel_diag_test_result", ("0", "GPU-aaaa", "dcgm", "memory", "pass"))] == 1.0
    # A device that exposes no serial is still matched by its number.
    h = Harness(tmp_path, [(*NVIDIA[0][:4], ""), (*NVIDIA[1][:4], "N/A")])
    h.poll()
    assert h.evidence("GPU-bbbb") == {"diag_failed": (FAILED, "service")}


def test_unmatched_results_are_counted_not_shown(tmp_path: Path) -> None:
    h = Harness(tmp_path, AMD)  # an AMD node: the DCGM file names no device of it
    h.put("a.json", dcgm4(failing=1))
    got = h.poll()
    assert got[("accel_diag_unmatched_results", ("dcgm",))] == 2.0
    assert not [k for k in got if k[0] == "accel_diag_test_result"]
    assert h.board.sources() == []


def test_the_newest_run_per_device_counts_and_each_ages_out(tmp_path: Path) -> None:
    h = Harness(tmp_path, NVIDIA)
    h.put("old.json", dcgm4(failing=1), age=600)
    h.put("new.json", dcgm4(failing=0), age=60)
    got = h.poll()
    # The newer run passed GPU 1 and failed GPU 0.
    assert h.evidence("GPU-bbbb") == {}
    assert h.evidence("GPU-aaaa") == {"diag_failed": (FAILED, "service")}
    assert got[("accel_diag_run_timestamp_seconds", ("dcgm",))] == NOW - 60
    # A run testing only GPU 1, newer still: GPU 1's results come from it, GPU 0's stay.
    doc = json.loads(dcgm4(failing=1))
    doc["DCGM Diagnostic"]["test_categories"][0]["tests"][0]["results"].pop(0)
    h.put("newest.json", json.dumps(doc).encode(), age=10)
    got = h.poll()
    assert h.evidence("GPU-bbbb") == {"diag_failed": (FAILED, "service")}
    assert h.evidence("GPU-aaaa") == {"diag_failed": (FAILED, "service")}
    assert got[("accel_diag_device_run_timestamp_seconds", ("1", "GPU-bbbb", "dcgm"))] == NOW - 10
    assert got[("accel_diag_device_run_timestamp_seconds", ("0", "GPU-aaaa", "dcgm"))] == NOW - 60
    # The window passes the run of GPU 0's failure: gone, families and evidence.
    h.wall[0] = NOW - 60 + WINDOW + 1
    got = h.poll()
    assert h.evidence("GPU-aaaa") == {}
    assert h.evidence("GPU-bbbb") == {"diag_failed": (FAILED, "service")}
    assert not [k for k in got if k[0] == "accel_diag_test_result" and k[1][1] == "GPU-aaaa"]
    # Files counted when read are not counted again as they expire.
    assert ("accel_diag_files_rejected_total", ("expired",)) not in got
    h.wall[0] = NOW + WINDOW + 1
    got = h.poll()
    assert h.board.sources() == []
    assert not [k for k in got if k[0] == "accel_diag_test_result"]


def test_a_file_older_than_the_window_is_not_read(tmp_path: Path) -> None:
    h = Harness(tmp_path, NVIDIA)
    h.put("ancient.json", b"{not even json", age=WINDOW + 5)
    got = h.poll()
    assert got[("accel_diag_files_rejected_total", ("expired",))] == 1.0
    assert ("accel_diag_files_rejected_total", ("unparseable",)) not in got


def test_a_rewritten_file_is_read_and_counted_again(tmp_path: Path) -> None:
    h = Harness(tmp_path, NVIDIA)
    h.put("a.json", dcgm4(failing=1))
    h.poll()
    h.put("a.json", dcgm4(failing=1, version="4.9.0"), age=30)
    got = h.poll()
    assert got[("accel_diag_files_total", ("dcgm", "accepted"))] == 1.0
    assert got[("accel_diag_files_total", ("dcgm", "schema_drift"))] == 1.0
    assert got[("accel_diag_schema_drift_info", ("dcgm", "4.9.0"))] == 1.0
    # The drifted version says nothing about any device: the evidence went with the old run.
    assert h.board.sources() == []


def test_bad_input_each_counted_with_its_reason_the_good_file_unharmed(tmp_path: Path) -> None:
    h = Harness(tmp_path, NVIDIA, max_file_bytes=1024 * 1024)
    outside = tmp_path.parent / f"{tmp_path.name}-outside.json"
    outside.write_bytes(dcgm4(failing=0))
    h.put("good.json", dcgm4(failing=1))
    big = tmp_path / "big.json"
    with big.open("wb") as fh:  # 50 MB, sparse: no disk is used
        fh.truncate(50 * 1024 * 1024)
    real = (FIXTURES / "dcgm-4.2.3-gb10-r1.json").read_bytes()
    h.put("cut.json", real[: len(real) // 2])
    h.put("garbage.json", b"\x00\x01 not json at all")
    h.put("drift.json", dcgm4(failing=1, version="5.1.0"))
    h.put("other.json", b'{"hello": "world"}')
    (tmp_path / "link.json").symlink_to(outside)
    os.mkfifo(tmp_path / "pipe.json")
    (tmp_path / "dir.json").mkdir()
    h.put(".hidden.json", b"{")  # a writer's temporary names: not looked at
    h.put("x.json.tmp", b"{")
    h.put("notes.txt", b"{")
    done = threading.Event()
    result: dict[str, Any] = {}

    def run() -> None:
        result["got"] = h.poll()
        done.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    # A FIFO opened without O_NONBLOCK would wait for a writer forever.
    assert done.wait(30), "the poll blocked"
    got = result["got"]
    rejected = {k[1][0]: v for k, v in got.items() if k[0] == "accel_diag_files_rejected_total"}
    assert rejected == {
        "too_large": 1.0,
        "truncated": 1.0,
        "unparseable": 1.0,
        "unknown_format": 1.0,
        "symlink": 1.0,
        "not_regular_file": 2.0,  # the FIFO and the directory
    }
    assert got[("accel_diag_files_total", ("dcgm", "schema_drift"))] == 1.0
    assert got[("accel_diag_files_total", ("dcgm", "accepted"))] == 1.0
    assert got[("accel_diag_schema_drift_info", ("dcgm", "5.1.0"))] == 1.0
    # The good file's verdict stands, and the symlink's target (GPU 0 failing) was not read.
    assert h.evidence("GPU-bbbb") == {"diag_failed": (FAILED, "service")}
    assert h.evidence("GPU-aaaa") == {}
    # Nothing is counted twice, however often it is polled.
    assert {
        k[1][0]: v for k, v in h.poll().items() if k[0] == "accel_diag_files_rejected_total"
    } == rejected


def test_a_file_dated_in_the_future_pins_nothing(tmp_path: Path) -> None:
    """Its run time is min(its modification time, now): never a time to come."""
    h = Harness(tmp_path, NVIDIA)
    h.put("soon.json", dcgm4(failing=1), age=-120.0)  # a writer's clock 2 minutes ahead
    got = h.poll()
    assert got[("accel_diag_run_timestamp_seconds", ("dcgm",))] == NOW
    (item,) = h.board.for_device("GPU-bbbb", "", NOW)
    assert item.expires_at == NOW + WINDOW
    h.wall[0] = NOW + 60
    assert h.poll()[("accel_diag_run_timestamp_seconds", ("dcgm",))] == NOW + 60
    h.wall[0] = NOW + 120 + WINDOW + 1  # its time came and went, with the window
    h.poll()
    assert h.evidence("GPU-bbbb") == {}


def test_a_file_more_than_five_minutes_ahead_is_refused(tmp_path: Path) -> None:
    h = Harness(tmp_path, NVIDIA)
    h.put("later.json", dcgm4(failing=1), age=-3600.0 * 24 * 365)
    got = h.poll()
    assert got[("accel_diag_files_rejected_total", ("future_mtime",))] == 1.0
    assert h.board.sources() == []
    assert not [k for k in got if k[0] == "accel_diag_test_result"]
    assert h.poll()[("accel_diag_files_rejected_total", ("future_mtime",))] == 1.0


def test_too_many_files_the_oldest_refused(tmp_path: Path) -> None:
    h = Harness(tmp_path, NVIDIA, max_files=2)
    h.put("a.json", dcgm4(failing=0), age=300)
    h.put("b.json", dcgm4(failing=1), age=200)
    h.put("c.json", dcgm4(failing=1), age=100)
    got = h.poll()
    assert got[("accel_diag_files_rejected_total", ("too_many_files",))] == 1.0
    assert got[("accel_diag_files_total", ("dcgm", "accepted"))] == 2.0
    assert h.evidence("GPU-aaaa") == {}


def test_a_dcgm_warning_and_a_config_failure_degrade(tmp_path: Path) -> None:
    h = Harness(tmp_path, NVIDIA)
    h.put("cfg.json", dcgm4(failing=1, code=29, severity=5))
    h.poll()
    assert h.evidence("GPU-bbbb") == {"diag_failed": (DEGRADED, "service")}


def test_amd_runs_match_amd_devices(tmp_path: Path) -> None:
    h = Harness(tmp_path, [*NVIDIA, *AMD])
    h.put("agfhc.json", (FIXTURES / "agfhc-amd-testrunner.json").read_bytes())
    h.put("rvs.json", (FIXTURES / "rvs-1.0-amd-testrunner.json").read_bytes())
    got = h.poll()
    assert h.evidence("amd-1111") == {"diag_failed": (FAILED, "service")}
    assert h.evidence("amd-0000") == {"diag_failed": (FAILED, "service")}  # test2, 7, 8
    assert h.evidence("GPU-aaaa") == {}
    key = ("accel_diag_test_result", ("1", "amd-1111", "rvs", "testsuite1_test1", "fail"))
    assert got[key] == 1.0
    assert got[("accel_diag_test_result", ("0", "amd-0000", "agfhc", "test5", "pass"))] == 1.0
    # AMD's runs name no version in AGFHC's case: an empty version label.
    assert got[("accel_diag_run_info", ("agfhc", ""))] == 1.0


def test_a_partition_is_not_matched_by_the_gpu_number(tmp_path: Path) -> None:
    # An AMD GPU in CPX mode: device labels number the partitions, AGFHC numbers GPUs.
    partitions = [("amd", str(i), f"amd-p{i}", "0000:c1:00.0", "", str(i)) for i in range(2)]
    h = Harness(tmp_path, partitions)
    h.put("rvs.json", (FIXTURES / "rvs-1.0-amd-testrunner.json").read_bytes())
    got = h.poll()
    assert h.board.sources() == []
    assert got[("accel_diag_unmatched_results", ("rvs",))] == 4.0


def test_an_unreadable_directory_fails_the_poll_and_keeps_the_evidence(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("root reads any directory")
    h = Harness(tmp_path / "d", NVIDIA)
    (tmp_path / "d").mkdir()
    h.put("a.json", dcgm4(failing=1))
    h.poll()
    (tmp_path / "d").chmod(0)
    try:
        with pytest.raises(SourceError) as caught:
            h.poll()
        assert caught.value.reason == "unreadable"
        assert h.evidence("GPU-bbbb") == {"diag_failed": (FAILED, "service")}
    finally:
        (tmp_path / "d").chmod(0o755)


def test_a_reload_keeps_the_evidence_throughout_and_removal_withdraws_it(tmp_path: Path) -> None:
    h = Harness(tmp_path, NVIDIA)
    h.put("a.json", dcgm4(failing=1))
    h.poll()
    # A reload stops the old source before its replacement adopts it: the devices judged
    # in between (the device sources keep running) still see the evidence.
    asyncio.run(h.source.close())
    assert h.evidence("GPU-bbbb") == {"diag_failed": (FAILED, "service")}
    # The replacement (same directory) keeps it, and the file counted is not counted again.
    config = DiagSourceConfig(path=str(tmp_path), interval=5.0)
    new = DiagSource("diag", config, window=WINDOW, board=h.board, wall=lambda: h.wall[0])
    new.adopt(h.source)
    assert h.evidence("GPU-bbbb") == {"diag_failed": (FAILED, "service")}
    new.attach(FakeStore(NVIDIA))  # type: ignore[arg-type]
    got = {(r.metric, r.labels): r.value for r in asyncio.run(new.poll())}
    assert got[("accel_diag_files_total", ("dcgm", "accepted"))] == 1.0
    assert h.evidence("GPU-bbbb") == {"diag_failed": (FAILED, "service")}
    # A reload that drops the source: a source gone vouches for nothing.
    asyncio.run(new.close())
    new.removed()
    assert h.board.sources() == []


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (lambda p: os.mkfifo(p), NOT_REGULAR),
        (lambda p: os.symlink("/etc/hostname", p), SYMLINK),
        (lambda p: p.write_bytes(b"x" * 2048), TOO_LARGE),
        (lambda p: (p.write_bytes(b"{}"), p.chmod(0)), UNREADABLE),
    ],
)
def test_files_read_refuses(tmp_path: Path, make: Any, reason: str) -> None:
    if reason == UNREADABLE and os.geteuid() == 0:
        pytest.skip("root reads any file")
    make(tmp_path / "f.json")
    with pytest.raises(DiagError) as caught:
        files.read(str(tmp_path), "f.json", 1024)
    assert caught.value.reason == reason


def test_files_listing_newest_first_and_names(tmp_path: Path) -> None:
    for name, age in (("a.json", 30), ("b.json", 10), (".c.json", 5), ("d.txt", 1)):
        (tmp_path / name).write_text("{}")
        os.utime(tmp_path / name, (NOW - age, NOW - age))
    listed = files.listing(str(tmp_path))
    assert listed is not None and [e.name for e in listed] == ["b.json", "a.json"]
    assert files.listing(str(tmp_path / "nope")) is None


def hv_doc(entities: list[str], checks: list[str], severity: str = "CRITICAL") -> bytes:
    """A NodeVerdict of the documented shape (tests/fixtures/diag/README.md)."""
    comp = {"check_ids": checks, "entities": entities, "category": "xid", "max_severity": severity}
    return json.dumps({"overall_severity": severity, "affected_components": [comp]}).encode()


# The fake NVML's UUIDs of GPUs 0 and 1: Health Validation names a GPU by its UUID only.
HV_UUIDS = ("GPU-a1b2c300-1111-2222-3333-000000004455", "GPU-a1b2c301-1111-2222-3333-000000004456")
HV_NVIDIA = [(v, d, HV_UUIDS[i], bus, sn) for i, (v, d, _, bus, sn) in enumerate(NVIDIA)]


def test_health_validation_matches_by_uuid_and_keeps_the_node_apart(tmp_path: Path) -> None:
    h = Harness(tmp_path, HV_NVIDIA)
    h.put("hv.json", hv_doc([HV_UUIDS[1]], ["gpu_xid_46"]))
    got = h.poll()
    assert h.evidence(HV_UUIDS[1]) == {"diag_failed": (FAILED, "reset_device")}
    assert h.evidence(HV_UUIDS[0]) == {}
    hv = ("health_validation",)
    gpu1 = ("1", HV_UUIDS[1], *hv, "xid", "fail")
    assert got[("accel_diag_test_result", gpu1)] == 1.0
    assert got[("accel_diag_test_result", ("", "", *hv, "node_verdict", "fail"))] == 1.0
    assert got[("accel_diag_unmatched_results", hv)] == 0.0


def test_a_health_validation_node_check_is_no_gpu_evidence(tmp_path: Path) -> None:
    h = Harness(tmp_path, NVIDIA)
    h.put("hv.json", hv_doc(["0"], ["cpu_count"]))
    got = h.poll()
    assert h.board.sources() == []
    hv = ("health_validation",)
    assert got[("accel_diag_test_result", ("", "", *hv, "xid", "fail"))] == 1.0
    assert not [k for k in got if k[0] == "accel_diag_test_result" and k[1][0] == "0"]


def test_a_newer_health_validation_verdict_clears_a_gpu_it_does_not_name(tmp_path: Path) -> None:
    h = Harness(tmp_path, HV_NVIDIA)
    h.put("old.json", hv_doc([HV_UUIDS[1]], ["gpu_xid_46"]), age=120.0)
    h.put("dcgm.json", dcgm4(failing=0), age=90.0)
    h.poll()
    assert h.evidence(HV_UUIDS[1]) == {"diag_failed": (FAILED, "reset_device")}
    h.put("new.json", json.dumps({"overall_severity": "PASS"}).encode(), age=30.0)
    h.poll()
    # Health Validation's newest run passed the node; DCGM's run of GPU 0 still counts.
    assert h.evidence(HV_UUIDS[1]) == {}
    assert h.evidence(HV_UUIDS[0]) == {"diag_failed": (FAILED, "service")}


def test_a_newer_verdict_still_naming_a_gpu_in_a_critical_component_degrades_it(
    tmp_path: Path,
) -> None:
    """A worse newer run (CRITICAL on GPUs 0 and 1 together) never clears GPU 1."""
    h = Harness(tmp_path, HV_NVIDIA)
    h.put("old.json", hv_doc([HV_UUIDS[1]], ["gpu_xid_46"]), age=120.0)
    h.poll()
    assert h.evidence(HV_UUIDS[1]) == {"diag_failed": (FAILED, "reset_device")}
    h.put("new.json", hv_doc(list(HV_UUIDS), ["gpu_xid_46"]), age=30.0)
    h.poll()
    for uuid in HV_UUIDS:
        assert h.evidence(uuid) == {"diag_warning": (DEGRADED, "reset_device")}, uuid


def test_matching_runs_off_the_event_loop(tmp_path: Path) -> None:
    """256 files of 160 results take tens of milliseconds to match: never on the loop."""
    h = Harness(tmp_path, NVIDIA)
    h.put("a.json", dcgm4(failing=1))
    h.poll()
    assert h.store.threads and threading.main_thread().name not in h.store.threads
    assert h.evidence("GPU-bbbb") == {"diag_failed": (FAILED, "service")}


def test_status_while_a_scan_counts_a_new_kind_of_file(tmp_path: Path) -> None:
    """/status (the HTTP thread) copies the counters while the scan thread adds to them."""
    h = Harness(tmp_path, NVIDIA)
    h.put("a.json", dcgm4(failing=1))
    h.poll()
    source = h.source

    class Racing(Counter):  # type: ignore[type-arg]
        """Counters that another thread adds to while they are read."""

        def items(self):  # type: ignore[no-untyped-def]
            view = iter(super().items())
            yield next(view)
            other = threading.Thread(
                target=source._count, args=(("b.json", (0, 0, 0, 0)),), kwargs={"rejected": "x"}
            )
            other2 = threading.Thread(
                target=source._count,
                args=(("c.json", (0, 0, 0, 1)),),
                kwargs={"suite": "rvs", "result": "accepted"},
            )
            other.start()
            other2.start()
            other.join(0.3)
            other2.join(0.3)
            yield from view

    source._files = Racing(source._files)
    source._rejected = Racing({"truncated": 1})
    status = source.status()
    assert status["files"] == {"dcgm/accepted": 1}
    assert status["rejected"] == {"truncated": 1}


def test_a_directory_that_goes_and_comes_back_counts_nothing_twice(tmp_path: Path) -> None:
    h = Harness(tmp_path / "d", NVIDIA, enabled=True)
    (tmp_path / "d").mkdir()
    h.put("a.json", dcgm4(failing=1))
    assert h.poll()[("accel_diag_files_total", ("dcgm", "accepted"))] == 1.0
    (tmp_path / "d").rename(tmp_path / "away")
    assert h.poll()[("accel_diag_directory_present", ())] == 0.0
    (tmp_path / "away").rename(tmp_path / "d")
    got = h.poll()
    assert got[("accel_diag_files_total", ("dcgm", "accepted"))] == 1.0
    assert h.evidence("GPU-bbbb") == {"diag_failed": (FAILED, "service")}


def test_the_daemon_gives_the_source_the_health_event_window(tmp_path: Path) -> None:
    # The wiring: a run counts as long as an XID does (health.event_window), and a reload
    # that changes the window builds a new source (its fingerprint holds the window).
    from exporter.config import load_config
    from exporter.sources.registry import build_sources

    def diag_of(window: str) -> DiagSource:
        config = load_config(
            None,
            {},
            {
                "sources.diag.enabled": "true",
                "sources.diag.path": str(tmp_path),
                "health.event_window": window,
            },
        )
        (source,) = [s for s in build_sources(config) if s.name == "diag"]
        assert isinstance(source, DiagSource)
        return source

    short, long = diag_of("2h"), diag_of("3d")
    assert (short.window, long.window) == (7200.0, 3 * 86400.0)
    assert short.fingerprint() != long.fingerprint()
    assert diag_of("2h").fingerprint() == short.fingerprint()
