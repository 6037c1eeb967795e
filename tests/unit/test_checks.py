"""Every check's exit code and status line for OK, WARNING, CRITICAL and UNKNOWN.

The checks run through the real CLI against a stand-in daemon serving a fixed
exposition (or, for ``health``, a fixed /v1/devices document built by the daemon's
own code from verdict records); tests/e2e/test_checks_daemon.py runs them against
the real daemon.
"""

from __future__ import annotations

import dataclasses
import json
import re
import time

import pytest
import structlog

from exporter import health_api
from exporter.checks.nagios import Perf, Result, Status, exit_code, render
from exporter.cli import main
from exporter.verdict import UNKNOWN, DeviceHealth, Finding, Reason
from tests.helpers.metrics_server import MetricsServer

U0, U1 = "GPU-0", "GPU-1"


def info(dev: str, uuid: str, vendor: str = "nvidia") -> str:
    return f'accel_device_info{{vendor="{vendor}",device="{dev}",uuid="{uuid}",model="H100"}} 1\n'


def up(dev: str, uuid: str, v: int = 1, reason: str = "") -> str:
    out = f'accel_device_up{{device="{dev}",uuid="{uuid}"}} {v}\n'
    if reason:
        out += (
            f'accel_device_down_reason_info{{device="{dev}",uuid="{uuid}",reason="{reason}"}} 1\n'
        )
    return out


TWO = info("0", U0) + info("1", U1)


def temp(dev: str, uuid: str, value: float, sensor: str = "gpu") -> str:
    return f'accel_temperature_celsius{{device="{dev}",uuid="{uuid}",sensor="{sensor}"}} {value}\n'


def ecc_lines(dev, uuid, corrected=0, uncorrected=0, counter="volatile"):
    return (
        f'accel_ecc_errors_total{{device="{dev}",uuid="{uuid}",type="corrected",counter="{counter}"}} {corrected}\n'
        f'accel_ecc_errors_total{{device="{dev}",uuid="{uuid}",type="uncorrected",counter="{counter}"}} {uncorrected}\n'
    )


def remap(dev, uuid, pending=0, failure=0, corrected=0, uncorrected=0):
    return (
        f'accel_remapped_rows{{device="{dev}",uuid="{uuid}",type="corrected"}} {corrected}\n'
        f'accel_remapped_rows{{device="{dev}",uuid="{uuid}",type="uncorrected"}} {uncorrected}\n'
        f'accel_remapped_rows_pending{{device="{dev}",uuid="{uuid}"}} {pending}\n'
        f'accel_remapped_rows_failure{{device="{dev}",uuid="{uuid}"}} {failure}\n'
    )


def retired(dev, uuid, sbe=0, dbe=0, pending=0):
    return (
        f'accel_retired_pages{{device="{dev}",uuid="{uuid}",cause="multiple_single_bit_ecc"}} {sbe}\n'
        f'accel_retired_pages{{device="{dev}",uuid="{uuid}",cause="double_bit_ecc"}} {dbe}\n'
        f'accel_retired_pages_pending{{device="{dev}",uuid="{uuid}"}} {pending}\n'
    )


# A timestamp ``age`` seconds before the test runs, not before the module was imported:
# the cases are built at collection, and on a loaded CI machine a test can run more
# than its check's 10m window later. served() puts the time in when the body is served.
AGO = re.compile(r"@ago:([0-9.]+)@")


def ago(age: float) -> str:
    return f"@ago:{age}@"


def served(body: str | None) -> str:
    return AGO.sub(lambda m: repr(time.time() - float(m[1])), body or "")


def xid_line(dev, uuid, code, age):
    stamp = ago(age)
    return (
        f'accel_xid_errors_total{{device="{dev}",uuid="{uuid}",xid="{code}"}} 1\n'
        f'accel_xid_last_timestamp_seconds{{device="{dev}",uuid="{uuid}",xid="{code}"}} {stamp}\n'
    )


def afid_line(dev, uuid, code, age, severity="non_fatal_corrected", count=1):
    stamp = ago(age)
    return (
        f'accel_amd_afid_errors_total{{device="{dev}",uuid="{uuid}",afid="{code}",severity="{severity}"}} {count}\n'
        f'accel_amd_afid_last_timestamp_seconds{{device="{dev}",uuid="{uuid}",afid="{code}"}} {stamp}\n'
    )


def afid_info(dev, uuid, code, severity):
    return (
        f'accel_amd_afid_info{{device="{dev}",uuid="{uuid}",afid="{code}",category="c",'
        f'type="t",severity="{severity}",classified="true"}} 1\n'
    )


AMD_TWO = (
    info("0", U0, "amd") + info("1", U1, "amd") + 'accel_exporter_source_up{source="amdsmi"} 1\n'
)


def ccl(state, dead=0, missing=0, address="localhost:28028"):
    out = ""
    for s in ("no_job", "unreachable", "error", "healthy", "degraded", "stalled"):
        out += f'accel_ccl_job_state{{address="{address}",state="{s}"}} {1 if s == state else 0}\n'
    if dead is not None:  # None: no report, so the source exports no counts
        out += f'accel_ccl_job_dead_processes{{address="{address}"}} {dead}\n'
        out += f'accel_ccl_job_missing_processes{{address="{address}"}} {missing}\n'
    return out


def source(name, ok=True, reason=""):
    out = f'accel_exporter_source_up{{source="{name}"}} {1 if ok else 0}\n'
    if reason:
        out += f'accel_exporter_source_down_reason_info{{source="{name}",reason="{reason}"}} 1\n'
    return out


def health(dev, uuid, state, *reasons, action="none", why="", vendor="nvidia"):
    """One device with its verdict record (``state`` "unknown": ``why`` says why)."""
    reason_state = "degraded" if state in (UNKNOWN, "ok") else state
    findings = tuple(Finding(r, action) for r in reasons) if action != "none" else ()
    record = DeviceHealth(
        dev,
        uuid,
        state,
        tuple(Reason(r, reason_state) for r in sorted(reasons)),
        findings,
        action,
        time.time() - 60,
        time.time(),
        why if state == UNKNOWN else "",
    )
    return health_api.DeviceReport(vendor, int(dev), dev, uuid, "", record)


def doc(*devices, source_state="ok", fresh=True):
    """The /v1/devices body the daemon would serve for these devices (one nvml source)."""
    source = health_api.SourceReport("nvml", source_state, "", list(devices), fresh)
    return json.dumps(health_api.document([source], time.time(), "node-a"))


BUILD = 'accel_exporter_build_info{version="0.1.0",python="3.11"} 1\n'
LINE = re.compile(r"^[A-Z-]+ (OK|WARNING|CRITICAL|UNKNOWN) - [^|\n]+( \| \S+(?: \S+)*)?$")

CASES = [
    # (name, args, body, expected status, fragment of the text)
    ("health", [], doc(health("0", U0, "ok"), health("1", U1, "ok")), 0, "2 GPUs, all ok"),
    (
        "health",
        [],
        doc(health("0", U0, "ok"), health("1", U1, "failed", "recovery_action", "device_down")),
        2,
        "gpu1 failed (device_down,recovery_action)",
    ),
    (
        "health",
        [],
        doc(health("0", U0, "degraded", "link_down"), health("1", U1, "ok")),
        1,
        "gpu0 degraded (link_down)",
    ),
    (
        "health",
        [],
        doc(health("0", U0, "predicted_failure", "retired_pages_near_limit")),
        1,
        "gpu0 predicted_failure",
    ),
    (
        "health",
        [],
        doc(health("1", U1, "failed", "xid_79", action="reboot_node")),
        2,
        "gpu1 failed (xid_79) -> reboot_node",
    ),
    # An action a person must do pages (no reset or reboot clears it), but on a predicted
    # failure it is planned, not paged: it warns.
    (
        "health",
        [],
        doc(health("0", U0, "predicted_failure", "sram_ecc_threshold", action="replace_device")),
        1,
        "gpu0 predicted_failure (sram_ecc_threshold) -> replace_device",
    ),
    (
        "health",
        [],
        doc(health("0", U0, "degraded", "memory_critical", action="contact_vendor")),
        2,
        "gpu0 degraded (memory_critical) -> contact_vendor",
    ),
    (
        "health",
        [],
        doc(health("0", U0, "degraded", "reset_repair", action="reset_device")),
        1,
        "gpu0 degraded (reset_repair) -> reset_device",
    ),
    # The worker is down: the exporter cannot vouch for the GPUs (Nagios: UNKNOWN, never
    # CRITICAL, which would drain the node in a Slurm prolog for a crash of ours).
    (
        "health",
        [],
        doc(
            health("0", U0, UNKNOWN, why="worker restarting: timeout"),
            health("1", U1, UNKNOWN, why="worker restarting: timeout"),
            source_state="failing",
        ),
        3,
        "gpu0 unknown (source nvml worker restarting: timeout)",
    ),
    # Remembered findings still name their action while unknown.
    (
        "health",
        [],
        doc(
            health("0", U0, UNKNOWN, "xid_79", action="reboot_node", why="reloading"),
            source_state="pending",
        ),
        3,
        "gpu0 unknown (source nvml reloading; remembered xid_79; recommended action: reboot_node)",
    ),
    # The data is stale: Unknown whatever the last verdict was.
    (
        "health",
        [],
        doc(health("0", U0, "failed", "xid_79"), source_state="stale", fresh=False),
        3,
        "gpu0 unknown (source nvml is stale)",
    ),
    # A failed device beside unknown ones: CRITICAL (the worst of the known).
    (
        "health",
        [],
        doc(
            health("0", U0, "failed", "isolated", action="reset_device"),
            health("1", U1, UNKNOWN, why="worker restarting: hung"),
            source_state="failing",
        ),
        2,
        "gpu0 failed (isolated) -> reset_device, gpu1 unknown",
    ),
    ("health", [], doc(), 3, "no health verdict reported"),
    ("health", ["--missing-ok"], doc(), 0, "no health verdict reported"),
    ("health", [], TWO, 3, "is not JSON"),
    ("health", [], json.dumps({"kind": "Other", "devices": []}), 3, "not a DeviceHealthList"),
    (
        "gpu-count",
        ["--expected", "2"],
        TWO + up("0", U0) + up("1", U1),
        0,
        "2 of 2 expected GPUs present, 2 up",
    ),
    ("gpu-count", ["--expected", "1"], TWO + up("0", U0) + up("1", U1), 1, "2 of 1"),
    (
        "gpu-count",
        ["--expected", "2"],
        TWO + up("0", U0) + up("1", U1, 0, "gpu_lost"),
        2,
        "down: gpu1 gpu_lost",
    ),
    ("gpu-count", ["--expected", "4"], TWO + up("0", U0) + up("1", U1), 2, "2 of 4"),
    ("gpu-count", ["--expected", "2"], None, 3, "cannot read"),
    (
        "temperature",
        ["--warn", "80", "--crit", "90"],
        TWO + temp("0", U0, 45) + temp("1", U1, 61),
        0,
        "hottest gpu sensor 61C",
    ),
    (
        "temperature",
        ["--warn", "80", "--crit", "90"],
        TWO + temp("0", U0, 45) + temp("1", U1, 84),
        1,
        "gpu1 84C",
    ),
    (
        "temperature",
        ["--warn", "80", "--crit", "90"],
        TWO + temp("0", U0, 95) + temp("1", U1, 84),
        2,
        "gpu0 95C",
    ),
    ("temperature", ["--warn", "80", "--crit", "90"], TWO, 3, "no gpu temperature"),
    ("ecc", [], TWO + ecc_lines("0", U0, 5) + ecc_lines("1", U1), 0, "no uncorrectable errors"),
    (
        "ecc",
        ["--warn-corrected", "100"],
        TWO + ecc_lines("0", U0, 150) + ecc_lines("1", U1),
        1,
        "gpu0 150 correctable",
    ),
    ("ecc", [], TWO + ecc_lines("0", U0) + ecc_lines("1", U1, 0, 2), 2, "gpu1 2 uncorrectable"),
    ("ecc", [], TWO, 3, "no ECC counters"),
    (
        "row-remap",
        [],
        TWO + remap("0", U0, corrected=3) + remap("1", U1),
        0,
        "no pending or failed",
    ),
    (
        "row-remap",
        [],
        TWO + remap("0", U0) + remap("1", U1, pending=1),
        1,
        "gpu1 remapping pending",
    ),
    (
        "row-remap",
        [],
        TWO + remap("0", U0, failure=1) + remap("1", U1, pending=1),
        2,
        "gpu0 remapping failed",
    ),
    ("row-remap", [], TWO, 3, "no row remapping data"),
    ("retired-pages", [], TWO + retired("0", U0, 2, 1) + retired("1", U1), 0, "no pages near"),
    (
        "retired-pages",
        [],
        TWO + retired("0", U0) + retired("1", U1, pending=1),
        1,
        "gpu1 retirement pending",
    ),
    (
        "retired-pages",
        [],
        TWO + retired("0", U0, 40, 21) + retired("1", U1),
        2,
        "gpu0 61 pages retired",
    ),
    ("retired-pages", [], TWO, 3, "no retired page data"),
    (
        "xid",
        ["--window", "1h"],
        TWO + source("nvml") + xid_line("0", U0, 79, 7200),
        0,
        "0 XID codes seen in the last 60m",
    ),
    ("xid", ["--window", "1h"], TWO + source("nvml") + xid_line("0", U0, 13, 60), 1, "gpu0 xid 13"),
    # No NVML source up: nothing reads XIDs, so "none seen" would be a guess.
    ("xid", [], BUILD + source("host"), 3, "the nvml source is not running here"),
    ("xid", [], BUILD + source("nvml", False, "timeout"), 3, "the nvml source is down"),
    (
        "xid",
        ["--window", "10m"],
        TWO + source("nvml") + xid_line("1", U1, 79, 30) + xid_line("0", U0, 13, 30),
        2,
        "gpu1 xid 79",
    ),
    ("xid", ["--window", "1h"], None, 3, "cannot read"),
    ("afid", [], AMD_TWO, 0, "0 AFIDs seen in the last 60m"),
    ("afid", [], AMD_TWO + afid_line("0", U0, 30, 7200, "fatal"), 0, "0 AFIDs seen"),
    ("afid", [], AMD_TWO + afid_line("1", U1, 12, 60), 1, "gpu1 afid 12"),
    (
        "afid",
        ["--window", "10m"],
        AMD_TWO + afid_line("0", U0, 30, 30, "fatal") + afid_line("1", U1, 12, 30),
        2,
        "gpu0 afid 30 (fatal); gpu1 afid 12",
    ),
    ("afid", ["--critical-afids", "12"], AMD_TWO + afid_line("1", U1, 12, 60), 2, "12 (critical)"),
    ("afid", ["--ignore-afids", "12"], AMD_TWO + afid_line("1", U1, 12, 60), 0, "0 AFIDs"),
    ("afid", [], None, 3, "cannot read"),
    ("ccl-job", [], ccl("healthy"), 0, "localhost:28028 healthy"),
    ("ccl-job", [], ccl("degraded"), 1, "degraded"),
    ("ccl-job", [], ccl("stalled"), 2, "stalled"),
    ("ccl-job", [], ccl("degraded", dead=2), 2, "2 dead"),
    ("ccl-job", [], ccl("unreachable"), 3, "unreachable"),
    ("ccl-job", [], ccl("unreachable", dead=None), 3, "localhost:28028_dead=U;;0;0"),
    ("ccl-job", [], ccl("healthy"), 0, "localhost:28028_dead=0;;0;0"),
    ("ccl-job", [], BUILD, 3, "no NCCL/RCCL job state"),
    ("exporter", [], BUILD + source("host") + source("nvml"), 0, "2 of 2 sources up"),
    (
        "exporter",
        [],
        BUILD + source("host") + source("nvml", False, "timeout"),
        1,
        "nvml (timeout)",
    ),
    ("exporter", [], None, 2, "cannot read"),
    # A GPU node whose driver was never injected: every source up, the bus says 8.
    (
        "exporter",
        [],
        BUILD + source("host") + 'accel_pci_devices{vendor="nvidia"} 8\n',
        1,
        "not seen by their library: nvidia 8 on the PCI bus, 0 seen",
    ),
    (
        "exporter",
        [],
        BUILD + source("nvml") + 'accel_pci_devices{vendor="nvidia"} 8\n'
        'accel_devices{vendor="nvidia"} 8\n',
        0,
        "1 of 1 sources up",
    ),
    ("exporter", [], "# just some other exporter\nfoo 1\n", 2, "does not serve accel-exporter"),
]


@pytest.fixture(autouse=True)
def _restore_logging():
    # main() configures structlog onto the captured stderr; later tests must not
    # inherit a stream that pytest closes.
    yield
    structlog.reset_defaults()


@pytest.fixture(scope="module")
def server():
    with MetricsServer() as s:
        yield s


@pytest.mark.parametrize(("name", "args", "body", "code", "fragment"), CASES)
def test_check(server, capsys, name, args, body, code, fragment):
    url = server.url if body is not None else "http://127.0.0.1:1"
    server.body = served(body)
    status = main(["check", name, *args, "--url", url, "--timeout", "5"])
    out = capsys.readouterr().out.strip()
    assert status == code, out
    assert fragment in out, out
    assert len(out.splitlines()) == 1
    assert LINE.match(out), out
    assert out.startswith(f"{name.upper()} {Status(code).name} - ")


def test_perfdata(server, capsys):
    server.body = TWO + temp("0", U0, 45) + temp("1", U1, 84)
    main(["check", "temperature", "--warn", "80", "--crit", "90", "--url", server.url])
    out = capsys.readouterr().out
    assert out.strip().endswith("| gpu0_gpu=45;80;90 gpu1_gpu=84;80;90")


def test_http_errors_and_paths(server, capsys):
    server.body, server.status = "x", 503
    try:
        assert main(["check", "exporter", "--url", server.url + "/metrics"]) == 2
    finally:
        server.status = 200
    assert "HTTP 503" in capsys.readouterr().out
    assert server.requests[-1]["path"] == "/metrics"


def test_basic_auth_file(server, capsys, tmp_path):
    creds = tmp_path / "auth"
    creds.write_text("prom:s3cret\n")
    server.body = BUILD + source("host")
    assert main(["check", "exporter", "--url", server.url, "--basic-auth-file", str(creds)]) == 0
    assert server.requests[-1]["Authorization"] == "Basic cHJvbTpzM2NyZXQ="


def test_health_npd_exit_codes(server, capsys):
    args = ["check", "health", "--url", server.url, "--exit-codes", "npd"]
    server.body = doc(health("0", U0, "failed", "recovery_action"), health("1", U1, "ok"))
    assert main(args) == 1
    assert server.requests[-1]["path"] == "/v1/devices"  # the record, not /metrics
    server.body = doc(health("0", U0, "ok"), health("1", U1, "ok"))
    assert main(args) == 0
    assert "| gpu0_health=0;0;2;0 gpu1_health=0;0;2;0" in capsys.readouterr().out
    server.body = doc(health("0", U0, UNKNOWN, why="worker starting"), source_state="pending")
    assert main(args) == 2  # NPD: unknown, not a problem
    assert "| gpu0_health=U;0;2;0" in capsys.readouterr().out
    server.body = doc()
    assert main(args) == 2


@pytest.mark.parametrize(
    ("url", "path"),
    [("", "/v1/devices"), ("/metrics", "/v1/devices"), ("/node7/metrics", "/node7/v1/devices")],
)
def test_health_asks_for_the_devices_beside_the_metrics(server, capsys, url, path):
    server.body = doc(health("0", U0, "ok"))
    assert main(["check", "health", "--url", server.url + url]) == 0
    assert server.requests[-1]["path"] == path
    capsys.readouterr()


def test_npd_exit_codes(server, capsys):
    server.body = TWO + temp("0", U0, 95) + temp("1", U1, 20)
    args = ["check", "temperature", "--warn", "80", "--crit", "90", "--url", server.url]
    assert main([*args, "--exit-codes", "npd"]) == 1
    server.body = TWO
    assert main([*args, "--exit-codes", "npd"]) == 2
    capsys.readouterr()


@pytest.mark.parametrize(
    ("args", "body", "code", "fragment"),
    [
        # Nagios range semantics: a threshold T alerts when the value is above T.
        (["temperature", "--warn", "80", "--crit", "90"], TWO + temp("0", U0, 80), 0, "none at"),
        (["temperature", "--warn", "80", "--crit", "90"], TWO + temp("0", U0, 90), 1, "gpu0 90C"),
        (["temperature", "--warn", "80", "--crit", "90"], TWO + temp("0", U0, 90.5), 2, "90.5C"),
        (["ecc"], TWO + ecc_lines("0", U0, 0, 1), 2, "gpu0 1 uncorrectable"),
        (["ecc", "--crit-uncorrected", "1"], TWO + ecc_lines("0", U0, 0, 1), 0, "no uncorr"),
        (["ecc", "--crit-uncorrected", "1"], TWO + ecc_lines("0", U0, 0, 2), 2, "2 uncorrect"),
        (["ecc", "--warn-corrected", "5"], TWO + ecc_lines("0", U0, 5), 0, "no uncorrectable"),
        (["retired-pages"], TWO + retired("0", U0, 30), 0, "no pages near"),
        (["retired-pages"], TWO + retired("0", U0, 31), 1, "gpu0 31 pages"),
        (["retired-pages"], TWO + retired("0", U0, 60), 1, "gpu0 60 pages"),
    ],
)
def test_thresholds_alert_above_the_value(server, capsys, args, body, code, fragment):
    server.body = served(body)
    status = main(["check", *args, "--url", server.url])
    out = capsys.readouterr().out
    assert status == code, out
    assert fragment in out, out


def test_perfdata_thresholds_are_nagios_ranges(server, capsys):
    server.body = TWO + ecc_lines("0", U0, 3, 0) + ecc_lines("1", U1)
    assert main(["check", "ecc", "--url", server.url]) == 0
    out = capsys.readouterr().out
    # crit=0: the range 0:0, i.e. CRITICAL above 0 uncorrectable errors, as the check does.
    assert "gpu0_uncorrected=0;;0" in out and "gpu0_corrected=3" in out, out


@pytest.mark.parametrize(
    "args", [["temperature", "--warn", "90", "--crit", "80"], ["retired-pages", "--warn", "61"]]
)
def test_warn_above_crit_is_unknown(server, capsys, args):
    server.body = TWO + temp("0", U0, 20) + retired("0", U0)
    assert main(["check", *args, "--url", server.url]) == 3
    out = capsys.readouterr().out.strip()
    assert LINE.match(out) and "UNKNOWN" in out and "is above --crit" in out, out
    assert main(["check", *args, "--url", server.url, "--exit-codes", "npd"]) == 2
    capsys.readouterr()


@pytest.mark.parametrize(
    ("argv", "code"),
    [
        (["check", "gpu-count", "--expected", "2", "--bogus"], 3),
        (["check", "gpu-count", "--expected", "2", "--bogus", "--exit-codes", "npd"], 2),
        (["check", "gpu-count", "--exit-codes=npd"], 2),
        (["check", "temperature", "--exit-codes", "npd", "--warn", "x", "--crit", "9"], 2),
    ],
)
def test_usage_errors_follow_the_exit_convention(capsys, argv, code):
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == code
    out = capsys.readouterr().out.strip()
    assert len(out.splitlines()) == 1 and out.startswith("CHECK UNKNOWN - "), out


def test_the_config_is_read_only_for_local(server, capsys, monkeypatch):
    monkeypatch.setenv("ACCEL_EXPORTER_WEB__LISTEN_ADDRESS", "garbage::")
    server.body = TWO + up("0", U0) + up("1", U1)
    # --url: the broken daemon config is not this check's business.
    assert main(["check", "gpu-count", "--expected", "2", "--url", server.url]) == 0
    assert "GPU-COUNT OK" in capsys.readouterr().out
    # --local needs it: UNKNOWN naming the key, never the config error's exit 2.
    assert main(["check", "gpu-count", "--expected", "2", "--local"]) == 3
    out = capsys.readouterr().out.strip()
    assert out.startswith("GPU-COUNT UNKNOWN - config error:") and "listen_address" in out, out
    assert main(["check", "gpu-count", "--expected", "2", "--local", "--exit-codes", "npd"]) == 2
    capsys.readouterr()


def test_unreadable_ca_file_is_unknown(capsys, tmp_path):
    url = "https://127.0.0.1:1"
    argv = ["check", "gpu-count", "--expected", "2", "--url", url, "--ca-file"]
    assert main([*argv, str(tmp_path / "missing.pem")]) == 3
    out = capsys.readouterr().out.strip()
    assert out.startswith("GPU-COUNT UNKNOWN - cannot read https://127.0.0.1:1/metrics"), out
    assert len(out.splitlines()) == 1


def test_an_internal_error_is_unknown(server, capsys, monkeypatch):
    from exporter.checks import command

    def broken(args, samples):
        raise RuntimeError("bug")

    spec = command.CHECKS["exporter"]
    monkeypatch.setitem(command.CHECKS, "exporter", dataclasses.replace(spec, evaluate=broken))
    server.body = BUILD
    assert main(["check", "exporter", "--url", server.url]) == 3
    assert (
        capsys.readouterr().out.strip() == "EXPORTER UNKNOWN - internal error: RuntimeError('bug')"
    )


@pytest.mark.parametrize(
    "argv",
    [
        ["check", "gpu-count"],
        ["check", "temperature", "--warn", "x", "--crit", "9"],
        ["check", "xid", "--window", "5"],
        ["check", "xid", "--critical-xids", "a,b"],
        ["check", "afid", "--ignore-afids", "x"],
        ["check", "no-such-check"],
    ],
)
def test_bad_arguments_are_unknown(capsys, argv):
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 3
    assert "UNKNOWN" in capsys.readouterr().out


def test_render_rules():
    result = Result(
        Status.WARNING,
        "a | b\nc",
        [Perf("x", 1.5, "s", "1", "2", 0, 10), Perf("odd label", 3), Perf("y", 2, warn="5")],
    )
    assert render("demo", result) == "DEMO WARNING - a / b c | x=1.5s;1;2;0;10 'odd label'=3 y=2;5"
    assert exit_code(Status.CRITICAL, "nagios") == 2
    assert exit_code(Status.WARNING, "npd") == 1
    assert exit_code(Status.UNKNOWN, "npd") == 2


@pytest.mark.parametrize(
    ("body", "nagios", "npd"),
    [
        (AMD_TWO, 0, 0),
        (AMD_TWO + afid_line("1", U1, 12, 60), 1, 1),
        (AMD_TWO + afid_line("0", U0, 30, 60, "fatal"), 2, 1),
        # AMD's table decides: a corrected HBM error in a record marked fatal only warns,
        # a boot's fail-to-init pages, and an AFID it does not classify goes by the record.
        (
            AMD_TWO
            + afid_line("0", U0, 24, 60, "fatal")
            + afid_info("0", U0, 24, "non_fatal_corrected"),
            1,
            1,
        ),
        (
            AMD_TWO
            + afid_line("0", U0, 3, 60, "non_fatal_uncorrected")
            + afid_info("0", U0, 3, "fail_to_init"),
            2,
            1,
        ),
        (AMD_TWO + afid_line("0", U0, 77, 60, "fatal") + afid_info("0", U0, 77, "unknown"), 2, 1),
        (
            AMD_TWO
            + afid_line("0", U0, 77, 60, "non_fatal_uncorrected")
            + afid_info("0", U0, 77, "unknown"),
            1,
            1,
        ),
        (None, 3, 2),
    ],
)
def test_afid_exit_codes_nagios_and_npd(server, capsys, body, nagios, npd):
    url = server.url if body is not None else "http://127.0.0.1:1"
    server.body = served(body)
    for convention, code in (("nagios", nagios), ("npd", npd)):
        args = ["check", "afid", "--url", url, "--timeout", "5", "--exit-codes", convention]
        assert main(args) == code
        assert capsys.readouterr().out.startswith("AFID ")


@pytest.mark.parametrize(
    ("vendor", "fragment"),
    [("bogus", "invalid vendor 'bogus'"), ("gaudi", "did you mean intel_gaudi?")],
)
def test_an_unknown_vendor_is_a_usage_error_not_a_missing_gpu(capsys, vendor, fragment):
    # A typo must not page anyone with "0 of 1 expected".
    with pytest.raises(SystemExit) as raised:
        main(["check", "gpu-count", "--expected", "1", "--vendor", vendor, "--local"])
    assert raised.value.code == 3
    out = capsys.readouterr().out.strip()
    assert out.startswith("CHECK UNKNOWN - ") and fragment in out, out
    assert "nvidia, amd, intel, intel_gaudi, google, aws" in out, out


def test_the_vendor_is_matched_without_regard_to_case(server, capsys):
    server.body = TWO + up("0", U0) + up("1", U1)
    argv = ["check", "gpu-count", "--expected", "2", "--vendor", "NVIDIA", "--url", server.url]
    assert main(argv) == 0, capsys.readouterr().out
    capsys.readouterr()


def test_the_vendor_help_lists_every_vendor(capsys):
    with pytest.raises(SystemExit):
        main(["check", "gpu-count", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "nvidia, amd, intel, intel_gaudi, google, aws" in out, out


def test_every_device_source_vendor_is_a_check_vendor():
    from exporter.checks.devices import VENDORS
    from exporter.sources.neuron import VENDOR as NEURON
    from exporter.sources.pci import VENDOR_IDS

    assert {*VENDOR_IDS, NEURON, "google"} == set(VENDORS)


@pytest.mark.parametrize(
    "argv",
    [
        ["--basic-auth-file", "/nope/auth"],
        ["--url", "garbage"],
        ["--url", "ftp://host:9842"],
    ],
)
def test_a_misused_plugin_is_unknown_not_critical(capsys, argv):
    # By the Nagios convention, CRITICAL is the daemon's state; a bad argument is UNKNOWN.
    try:
        status = main(["check", "exporter", *argv])
    except SystemExit as exc:
        status = exc.code
    captured = capsys.readouterr()
    out = captured.out.strip()
    assert status == 3, out
    assert len(out.splitlines()) == 1 and "UNKNOWN - " in out, out
    # No log line (the JSON of "check failed"), no traceback: usage at most.
    assert "internal error" not in out and '"event"' not in captured.err, captured.err
    assert "Traceback" not in captured.err


def test_a_basic_auth_file_without_a_colon_is_unknown(server, capsys, tmp_path):
    creds = tmp_path / "auth"
    creds.write_text("no colon here\n")
    server.body = BUILD + source("host")
    assert main(["check", "exporter", "--url", server.url, "--basic-auth-file", str(creds)]) == 3
    assert "user:password" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("extra", "fragment"),
    [
        ("", "the amdsmi source is not running here"),
        (source("amdsmi", False, "library_not_found"), "the amdsmi source is down"),
    ],
)
def test_afid_is_unknown_where_amdsmi_cannot_read_them(server, capsys, extra, fragment):
    server.body = info("0", U0, "amd") + info("1", U1, "amd") + source("host") + extra
    assert main(["check", "afid", "--url", server.url]) == 3
    out = capsys.readouterr().out
    assert fragment in out, out
