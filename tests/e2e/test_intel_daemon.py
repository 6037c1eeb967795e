"""The daemon with the fake Level Zero loader and the fake libhlml: 4 Intel GPUs, 8 Gaudis.

Values, faults and isolation through the real daemon, its worker processes and
the real pyzes and habana-pyhlml packages; once, probe, check and record too.
Both fakes print every call on stdout here, as some vendor builds do: the
worker's protocol channel must not care.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.fakes.hlml import control as hl
from tests.fakes.hlml import expected as hl_expected
from tests.fakes.hlml.control import FakeHlml
from tests.fakes.levelzero import control as ze
from tests.fakes.levelzero import expected as ze_expected
from tests.fakes.levelzero.control import FakeZe
from tests.helpers.cli import record, run_cli
from tests.helpers.daemon import Daemon, samples, value
from tests.helpers.promtool import check_metrics

OFF = {"enabled": False}


def config(ze_lib: Path | None, hlml_lib: Path | None) -> dict[str, Any]:
    timing = {"interval": "1s", "slow_interval": "1s", "timeout": "3s", "bootstrap_timeout": "20s"}
    sources: dict[str, Any] = {"host": OFF, "nvml": OFF, "amdsmi": OFF}
    sources["levelzero"] = {**timing, "library_path": str(ze_lib)} if ze_lib else OFF
    sources["hlml"] = {**timing, "library_path": str(hlml_lib)} if hlml_lib else OFF
    # The full profile: these tests check every row the fakes serve, per fabric and NIC port.
    return {"sources": sources, "outputs": {"prometheus": {"profile": "full"}}}


def start(
    daemon_factory: Any, ze_lib: Path, ze_fake: FakeZe, hlml_lib: Path, hlml_fake: FakeHlml
) -> Daemon:
    d: Daemon = daemon_factory(
        config=config(ze_lib, hlml_lib), env={**ze_fake.env, **hlml_fake.env}
    )
    d.wait_metric("accel_devices", 4, vendor="intel", timeout=40)
    d.wait_metric("accel_devices", 8, vendor="intel_gaudi", timeout=40)
    return d


def intel(i: int) -> dict[str, str]:
    return {"device": str(i), "uuid": ze.uuid(i)}


def gaudi(i: int) -> dict[str, str]:
    return {"device": str(i), "uuid": hl.uuid(i)}


def test_four_intel_gpus_and_eight_gaudis_exact_values(
    daemon_factory: Any, ze_lib: Path, ze_fake: FakeZe, hlml_lib: Path, hlml_fake: FakeHlml
) -> None:
    ze_fake.state.chatty = 1
    hlml_fake.state.chatty = 1
    ze_fake.device(3).throttle[0] = 8 | 256  # thermal_limit and thermal
    d = start(daemon_factory, ze_lib, ze_fake, hlml_lib, hlml_fake)
    d.wait_metric("accel_power_watts", timeout=30, **intel(3))  # rates need two polls
    d.wait_metric("accel_intel_ras_correctable_errors_total", category="compute", **intel(3))
    d.wait_metric("accel_gaudi_replaced_rows", cause="double_bit_ecc", **gaudi(7))
    text = d.metrics()
    got = samples(text)
    for i in range(4):
        dev = ze_fake.device(i)
        want = ze_expected.series(dev, i)
        assert {k: got.get(k) for k in want} == want
        assert value(got, "accel_device_info", **ze_expected.info(dev, i)) == 1
        assert value(got, "accel_device_up", **intel(i)) == 1
        joules = value(got, "accel_energy_joules_total", **intel(i))
        start_uj = 22_000_000_000 + i * 1_000_000_000
        assert joules is not None and joules > start_uj / 1e6
        assert (round(joules * 1e6) - start_uj) % dev.energy_step_uj == 0  # whole steps only
    assert value(got, "accel_clock_throttle_active", reason="thermal", **intel(3)) == 1
    for i in range(8):
        dev = hlml_fake.device(i)
        want = hl_expected.series(dev, i)
        assert {k: got.get(k) for k in want} == want
        assert value(got, "accel_device_info", **hl_expected.info(dev, i)) == 1
        assert value(got, "accel_device_up", **gaudi(i)) == 1
    for source in ("levelzero", "hlml"):
        assert value(got, "accel_exporter_source_up", source=source) == 1
    check_metrics(text)


def test_lost_devices_are_down_with_reason_and_the_rest_unaffected(
    daemon_factory: Any, ze_lib: Path, ze_fake: FakeZe, hlml_lib: Path, hlml_fake: FakeHlml
) -> None:
    d = start(daemon_factory, ze_lib, ze_fake, hlml_lib, hlml_fake)
    ze_fake.device(1).lost = 1
    hlml_fake.device(5).lost = 1
    d.wait_metric("accel_device_up", 0, **intel(1))
    d.wait_metric("accel_device_up", 0, **gaudi(5))
    got = samples(d.metrics())
    assert value(got, "accel_device_down_reason_info", reason="gpu_lost", **intel(1)) == 1
    assert value(got, "accel_device_down_reason_info", reason="gpu_lost", **gaudi(5)) == 1
    assert value(got, "accel_memory_free_bytes", **intel(1)) is None
    assert value(got, "accel_utilization_ratio", **gaudi(5)) is None
    assert [value(got, "accel_device_up", **intel(i)) for i in range(4)] == [1, 0, 1, 1]
    assert sum(value(got, "accel_device_up", **gaudi(i)) or 0 for i in range(8)) == 7
    ze_fake.device(1).lost = 0
    hlml_fake.device(5).lost = 0
    d.wait_metric("accel_device_up", 1, **intel(1))
    d.wait_metric("accel_utilization_ratio", hlml_fake.device(5).util_aip / 100, **gaudi(5))


def test_a_hung_call_takes_down_only_its_device(
    daemon_factory: Any, ze_lib: Path, ze_fake: FakeZe, hlml_lib: Path, hlml_fake: FakeHlml
) -> None:
    # Needs the daemon's device isolation (crumb + quarantine in the worker runner).
    d = start(daemon_factory, ze_lib, ze_fake, hlml_lib, hlml_fake)
    d.wait_metric("accel_power_watts", timeout=30, **intel(0))
    ze_fake.rule("zesEngineGetActivity", device=2, hang=True)
    hlml_fake.rule("hlml_device_get_power_usage", device=6, hang=True)
    d.wait_metric("accel_device_up", 0, timeout=60, **intel(2))
    d.wait_metric("accel_device_up", 0, timeout=60, **gaudi(6))

    def others_fresh() -> bool:
        got = samples(d.metrics())
        return (
            value(got, "accel_device_down_reason_info", reason="hung", **intel(2)) == 1
            and value(got, "accel_device_down_reason_info", reason="hung", **gaudi(6)) == 1
            and all(value(got, "accel_device_up", **intel(i)) == 1 for i in (0, 1, 3))
            and all(value(got, "accel_device_up", **gaudi(i)) == 1 for i in range(8) if i != 6)
        )

    d.wait_for(others_fresh, timeout=60, what="the hung devices down, the others up")
    energy = [value(d.metrics(), "accel_energy_joules_total", **intel(0))]
    d.wait_for(
        lambda: (value(d.metrics(), "accel_energy_joules_total", **intel(0)) or 0) > energy[0],
        timeout=30,
        what="device 0 still polled",
    )
    # The restarted worker has its rates again from its second poll.
    d.wait_metric("accel_power_watts", 330.0, timeout=30, **intel(3))
    d.wait_metric("accel_power_watts", 253.123, timeout=30, **gaudi(3))


def cli(*args: str, env: dict[str, str]) -> Any:
    return run_cli(*args, "--sources.host.enabled=false", env=env)


def test_once_probe_and_check_with_the_libraries(
    ze_lib: Path, ze_fake: FakeZe, hlml_lib: Path, hlml_fake: FakeHlml, tmp_path: Path
) -> None:
    env = {**ze_fake.env, **hlml_fake.env}
    paths = (
        f"--sources.levelzero.library-path={ze_lib}",
        f"--sources.hlml.library-path={hlml_lib}",
    )
    once = cli("once", "--format", "json", *paths, env=env)
    assert once.returncode == 0, once.stderr
    doc = json.loads(once.stdout)
    for source, vendor, count in (("levelzero", "intel", 4.0), ("hlml", "intel_gaudi", 8.0)):
        assert doc[source]["ok"] is True
        devices = [r for r in doc[source]["readings"] if r["metric"] == "accel_devices"]
        assert devices == [
            {"metric": "accel_devices", "labels": {"vendor": vendor}, "value": count}
        ]
    probe = cli("probe", *paths, env=env)
    lines = {x.split()[0]: x.split()[1:3] for x in probe.stdout.splitlines() if x.strip()}
    assert lines["levelzero"] == ["auto", "ok"] and lines["hlml"] == ["auto", "ok"], probe.stdout
    conf = tmp_path / "config.yaml"
    conf.write_text(json.dumps(config(ze_lib, hlml_lib)))
    for vendor, count in (("intel", 4), ("intel_gaudi", 8)):
        checked = run_cli(
            "check", "gpu-count", "--local", "--config.file", str(conf),
            "--expected", str(count), "--vendor", vendor, env=env,
        )  # fmt: skip
        assert checked.returncode == 0, checked.stdout + checked.stderr
        assert f"{count} of {count} expected GPUs present, {count} up" in checked.stdout


def test_once_and_probe_without_the_libraries(tmp_path: Path) -> None:
    paths = (
        f"--sources.levelzero.library-path={tmp_path / 'lib64' / 'libze_loader.so.1'}",
        f"--sources.hlml.library-path={tmp_path / 'habanalabs' / 'libhlml.so'}",
    )
    once = cli("once", *paths, env={})
    assert once.returncode == 0, once.stderr  # auto: not here is not a failure
    assert "levelzero: unavailable" in once.stderr and "libze_loader.so.1" in once.stderr
    assert "hlml: unavailable" in once.stderr and "libhlml.so" in once.stderr
    probe = cli("probe", *paths, env={})
    lines = {x.split()[0]: x for x in probe.stdout.splitlines() if x.strip()}
    for source in ("levelzero", "hlml"):
        assert lines[source].split()[1:3] == ["auto", "unavailable"], lines[source]
        assert "not found (looked in " in lines[source], lines[source]
    forced = cli("once", "--sources.hlml.enabled=true", *paths, env={})
    assert forced.returncode == 1
    assert "hlml: library_not_found: " in forced.stderr


def test_libraries_outside_the_bindings_paths_are_found_by_the_loaders_search(
    ze_lib: Path, ze_fake: FakeZe, hlml_lib: Path, hlml_fake: FakeHlml
) -> None:
    # No library_path: the libraries are where LD_LIBRARY_PATH says, as on a node whose
    # packages are not where pyzes and pyhlml look (RHEL's /usr/lib64, a custom prefix).
    env = {
        **ze_fake.env,
        **hlml_fake.env,
        "LD_LIBRARY_PATH": f"{ze_lib.parent}:{hlml_lib.parent}",
    }
    probe = cli("probe", env=env)
    lines = {x.split()[0]: x.split()[1:3] for x in probe.stdout.splitlines() if x.strip()}
    assert lines["levelzero"] == ["auto", "ok"] and lines["hlml"] == ["auto", "ok"], probe.stdout


def test_probe_says_where_it_looked_for_a_missing_library(tmp_path: Path) -> None:
    probe = cli("probe", env={"LD_LIBRARY_PATH": str(tmp_path)})
    lines = {x.split()[0]: x for x in probe.stdout.splitlines() if x.strip()}
    ze_line, hlml_line = lines["levelzero"], lines["hlml"]
    for place in (
        "/usr/lib/x86_64-linux-gnu/libze_loader.so.1",
        "/usr/lib64/libze_loader.so.1",
        f"{tmp_path}/libze_loader.so.1",
    ):
        assert place in ze_line, ze_line
    assert "/usr/lib/habanalabs/libhlml.so" in hlml_line and f"{tmp_path}/libhlml.so" in hlml_line
    assert "sources.levelzero.library_path" in ze_line, ze_line


def test_record_summarises_gaudi_and_intel_devices(
    ze_lib: Path, ze_fake: FakeZe, hlml_lib: Path, hlml_fake: FakeHlml, tmp_path: Path
) -> None:
    conf = tmp_path / "config.yaml"
    conf.write_text(json.dumps(config(ze_lib, hlml_lib)))
    out = tmp_path / "run"
    args = ("--config.file", str(conf), "--interval", "300ms")
    job = "import time; time.sleep(2.5)"
    result = record(out, sys.executable, "-c", job, env={**ze_fake.env, **hlml_fake.env}, args=args)
    assert result.returncode == 0, result.stderr
    summary = json.loads((out / "summary.json").read_text())
    g3 = summary["devices"][hl.uuid(3)]
    assert g3["vendor"] == "intel_gaudi" and g3["device"] == "3"
    assert g3["peak_memory_bytes"] == hlml_fake.device(3).mem_used
    assert g3["energy_joules"] == 0.0  # the fake's counter did not move
    i1 = summary["devices"][ze.uuid(1)]
    assert i1["vendor"] == "intel" and i1["energy_joules"] > 0
    assert i1["power_watts"]["max"] == 310.0


def test_a_loader_older_than_pyzes_loses_only_its_missing_readings(
    ze_fake: FakeZe, tmp_path: Path
) -> None:
    # No zesEngineGetActivity and no zesMemoryGetBandwidth: pyzes would raise
    # AttributeError on the call; the backend leaves those readings out from the start.
    old = tmp_path / "old" / "libze_loader.so.1"
    old.parent.mkdir()
    source = Path(ze.__file__).with_name("fake_ze.c")
    cmd = ["gcc", "-shared", "-fPIC", "-DZF_OLD_LOADER", "-o", str(old), str(source)]
    subprocess.run(cmd, check=True, capture_output=True, timeout=120)
    once = cli("once", "--format", "json", f"--sources.levelzero.library-path={old}",
               "--sources.hlml.enabled=false", env=ze_fake.env)  # fmt: skip
    assert once.returncode == 0, once.stderr
    doc = json.loads(once.stdout)["levelzero"]
    assert doc["ok"] is True
    metrics = {r["metric"] for r in doc["readings"]}
    assert "accel_intel_engine_utilization_ratio" not in metrics
    assert "accel_intel_memory_read_bytes_total" not in metrics
    assert {"accel_memory_used_bytes", "accel_energy_joules_total", "accel_clock_hertz"} <= metrics
    assert "zesEngineGetActivity" in once.stderr  # said once, at start


def test_a_device_that_hangs_while_identified_is_named_by_what_was_learnt(
    daemon_factory: Any, ze_lib: Path, ze_fake: FakeZe, hlml_lib: Path, hlml_fake: FakeHlml
) -> None:
    # The uuid is known, the PCI address is not yet: the crumb carries the uuid.
    ze_fake.rule("zesDevicePciGetProperties", device=1, hang=True)
    hlml_fake.rule("hlml_device_get_pci_info", device=2, hang=True)
    d: Daemon = daemon_factory(
        config=config(ze_lib, hlml_lib), env={**ze_fake.env, **hlml_fake.env}
    )
    d.wait_metric("accel_device_up", 0, timeout=90, **intel(1))
    d.wait_metric("accel_device_up", 0, timeout=90, **gaudi(2))
    for i in (0, 2, 3):
        d.wait_metric("accel_device_up", 1, timeout=60, **intel(i))
    for i in (0, 1, 3, 4, 5, 6, 7):
        d.wait_metric("accel_device_up", 1, timeout=60, **gaudi(i))
    got = samples(d.metrics())
    assert value(got, "accel_device_down_reason_info", reason="hung", **intel(1)) == 1
    assert value(got, "accel_device_down_reason_info", reason="hung", **gaudi(2)) == 1
