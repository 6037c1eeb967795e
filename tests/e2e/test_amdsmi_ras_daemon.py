"""AMD RAS through the daemon: AFID counts across worker and daemon restarts, CPX, check afid."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.fakes.amdsmi import expected, state
from tests.fakes.amdsmi.state import FakeAmdSmi
from tests.helpers.cli import cli_env
from tests.helpers.daemon import Daemon, samples, value
from tests.helpers.promtool import check_metrics

FATAL, CORRECTED = state.SEV_FATAL, state.SEV_NON_FATAL_CORRECTED
KINDS: list[Any] = [
    (FATAL, [30]),
    (CORRECTED, [12, 13]),
    (CORRECTED, [99], state.CPER_UNKNOWN_SECTION),
]


def config(state_dir: Path | None = None) -> dict[str, Any]:
    amd: dict[str, Any] = {
        "interval": "1s",
        "slow_interval": "1s",
        "timeout": "5s",
        "bootstrap_timeout": "30s",
        "cper_per_poll": 64,
    }
    if state_dir is not None:
        amd["state_dir"] = str(state_dir)
    return {
        "sources": {"host": {"enabled": False}, "nvml": {"enabled": False}, "amdsmi": amd},
        # The full profile: the CPX test compares every row the fake serves, per engine too.
        "outputs": {"prometheus": {"profile": "full"}},
    }


def want(entries: int) -> dict[tuple[str, str], float]:
    """(afid, severity) -> count over ring entries 0..entries-1 of KINDS."""
    out: dict[tuple[str, str], float] = {}
    for i in range(entries):
        kind = KINDS[i % len(KINDS)]
        if len(kind) > 2:
            continue
        sev = "fatal" if kind[0] == FATAL else "non_fatal_corrected"
        for afid in kind[1]:
            out[(str(afid), sev)] = out.get((str(afid), sev), 0) + 1
    return out


def afids(d: Daemon, uuid: str) -> dict[tuple[str, str], float]:
    return {
        (dict(labels)["afid"], dict(labels)["severity"]): v
        for (name, labels), v in samples(d.metrics()).items()
        if name == "accel_amd_afid_errors_total" and dict(labels)["uuid"] == uuid
    }


def wait_counts(d: Daemon, uuid: str, entries: int) -> None:
    d.wait_for(lambda: afids(d, uuid) == want(entries), 40, what=f"AFIDs of {entries} entries")


def test_no_double_count_across_a_worker_restart(
    daemon_factory: Any, amdsmi_env: dict[str, str], amdsmi_fake: FakeAmdSmi
) -> None:
    dev = amdsmi_fake.device(0)
    state.cper(dev, KINDS)
    dev.cper_count = 300  # more than one poll's worth: the restart comes mid-stream
    uuid = expected.uuid(dev)
    d: Daemon = daemon_factory(config=config(), env=amdsmi_env)
    d.wait_for(lambda: afids(d, uuid), 40, what="the first AFIDs")
    (worker,) = d.workers()
    os.kill(worker, signal.SIGKILL)
    dev.cper_count = 330
    d.wait_for(lambda: d.workers() and worker not in d.workers(), 40, what="a new worker")
    wait_counts(d, uuid, 330)
    got = samples(d.metrics())
    me = {"device": "0", "uuid": uuid}
    assert (
        value(got, "accel_amd_cper_records_skipped_total", reason="afid_unexpected_data", **me)
        == 110
    )
    assert (
        value(got, "accel_amd_afid_last_timestamp_seconds", afid="30", **me) == dev.cper_time0 + 327
    )
    # Polls go on and add nothing.
    time.sleep(3)
    assert afids(d, uuid) == want(330)
    check_metrics(d.metrics())


def test_no_double_count_across_a_daemon_restart(
    daemon_factory: Any, amdsmi_env: dict[str, str], amdsmi_fake: FakeAmdSmi, tmp_path: Path
) -> None:
    dev = amdsmi_fake.device(5)
    state.cper(dev, KINDS, 200)
    uuid = expected.uuid(dev)
    state_dir = tmp_path / "state"
    first: Daemon = daemon_factory(config=config(state_dir), env=amdsmi_env)
    first.wait_for(lambda: afids(first, uuid), 40, what="the first AFIDs")
    code, _ = first.stop()
    assert code == 0
    saved = json.loads((state_dir / "amdsmi-cper.json").read_text())
    cursor = saved["devices"][uuid]["cursor"]
    assert 0 < cursor <= 200
    dev.cper_count = 260
    second: Daemon = daemon_factory(config=config(state_dir), env=amdsmi_env)
    wait_counts(second, uuid, 260)
    # Without the state directory a daemon would read the ring from its start again:
    # the same counts from a fresh daemon show it is the file that carries the cursor.
    assert (
        json.loads((state_dir / "amdsmi-cper.json").read_text())["devices"][uuid]["cursor"] == 260
    )


def test_cpx_node_of_64_partitions_through_the_daemon(
    daemon_factory: Any, amdsmi_env: dict[str, str], amdsmi_fake: FakeAmdSmi
) -> None:
    state.cpx(amdsmi_fake, gpus=8)
    d: Daemon = daemon_factory(config=config(), env=amdsmi_env)
    d.wait_metric("accel_devices", 64, timeout=60, vendor="amd")
    last = {"device": "63", "uuid": expected.uuid(amdsmi_fake.device(63))}
    d.wait_metric("accel_amd_power_cap_watts", timeout=40, bound="max", **last)
    got = samples(d.metrics())
    for i in range(64):
        g, p = divmod(i, 8)
        dev = amdsmi_fake.device(i)
        me = {"device": str(i), "uuid": expected.uuid(dev)}
        assert value(got, "accel_amd_xcp_utilization_ratio", xcp=str(p), **me) == (5 * g + p) / 100
        assert value(got, "accel_utilization_ratio", **me) == (5 * g + p) / 100
        others = [
            labels
            for (name, labels), _ in got.items()
            if name == "accel_amd_xcp_utilization_ratio" and ("uuid", me["uuid"]) in labels
        ]
        assert len(others) == 1  # its own XCP only, not the GPU's eight
        residency = value(
            got,
            "accel_amd_violation_residency_total",
            reason="gfx_low_utilization",
            xcp=str(p),
            **me,
        )
        assert residency == 100 - (5 * g + p)
        want_series = expected.series(dev, i)
        assert {k: got.get(k) for k in want_series} == want_series


def check(url: str, *args: str) -> tuple[int, str]:
    done = subprocess.run(
        [sys.executable, "-m", "exporter", "check", "afid", "--url", url, *args],
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done.returncode, done.stdout.strip()


def record(d: Daemon, fake: FakeAmdSmi, i: int, severity: int, afid: int) -> None:
    """One record on GPU i, stamped a minute ago; wait until the daemon counts it."""
    dev = fake.device(i)
    state.cper(dev, [(severity, [afid])])
    dev.cper_time0 = int(time.time()) - 60
    dev.cper_count = 1
    sev = "fatal" if severity == FATAL else "non_fatal_corrected"
    labels = {"device": str(i), "uuid": expected.uuid(dev), "afid": str(afid), "severity": sev}
    d.wait_metric("accel_amd_afid_errors_total", 1, **labels)


def test_check_afid_against_the_daemon(
    daemon_factory: Any, amdsmi_env: dict[str, str], amdsmi_fake: FakeAmdSmi
) -> None:
    # The records are stamped at the fake's time: recent ones make the window count.
    d: Daemon = daemon_factory(config=config(), env=amdsmi_env)
    d.wait_metric("accel_devices", 8, vendor="amd")
    code, out = check(d.url, "--window", "1h")
    assert code == 0 and out.startswith("AFID OK - 0 AFIDs seen in the last 60m"), out
    record(d, amdsmi_fake, 1, CORRECTED, 24)
    code, out = check(d.url, "--window", "1h")
    assert code == 1 and "gpu1 afid 24" in out
    assert check(d.url, "--window", "1h", "--exit-codes", "npd")[0] == 1
    record(d, amdsmi_fake, 2, FATAL, 30)
    code, out = check(d.url, "--window", "1h")
    assert code == 2 and "gpu2 afid 30 (fatal)" in out
    assert check(d.url, "--window", "1h", "--exit-codes", "npd")[0] == 1
    # Older than the window: OK again.
    assert check(d.url, "--window", "30s")[0] == 0
