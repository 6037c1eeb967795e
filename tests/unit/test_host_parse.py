from __future__ import annotations

import pytest

from exporter.host.host_proc import (
    ProcParseError,
    cpu_ratios,
    parse_loadavg,
    parse_meminfo,
    parse_stat,
)

STAT = """cpu  100 10 50 800 20 5 5 10 40 0
cpu0 50 5 25 400 10 2 3 5 20 0
cpu1 50 5 25 400 10 3 2 5 20 0
intr 1 2 3
"""


def test_stat_and_ratios():
    before = parse_stat(STAT)
    assert before.cpus == 2 and before.modes == (100, 10, 50, 800, 20, 5, 5, 10)
    after = parse_stat(STAT.replace("cpu  100 10 50 800", "cpu  150 10 50 850"))
    ratios = cpu_ratios(before, after)
    assert ratios == {
        "user": 0.5,
        "nice": 0.0,
        "system": 0.0,
        "idle": 0.5,
        "iowait": 0.0,
        "irq": 0.0,
        "softirq": 0.0,
        "steal": 0.0,
    }
    assert cpu_ratios(after, after) is None


def test_short_old_kernel_cpu_line_is_padded():
    assert parse_stat("cpu 1 2 3 4\n").modes == (1, 2, 3, 4, 0, 0, 0, 0)


@pytest.mark.parametrize("text", ["", "cpu 1 2\n", "cpu a b c d\n"])
def test_bad_stat(text):
    with pytest.raises(ProcParseError):
        parse_stat(text)


def test_meminfo_and_loadavg():
    assert parse_meminfo("MemTotal: 2 kB\nMemFree: 1 kB\nMemAvailable: 1 kB\n") == {
        "MemTotal": 2048,
        "MemAvailable": 1024,
    }
    with pytest.raises(ProcParseError):
        parse_meminfo("MemFree: 1 kB\n")
    assert parse_loadavg("0.1 0.2 0.3 1/2 3\n") == (0.1, 0.2, 0.3)
    with pytest.raises(ProcParseError):
        parse_loadavg("x y z")


def test_cpu_seconds_counters_and_boot_time_as_node_exporter(tmp_path):
    """Counters in seconds per mode (USER_HZ ticks / SC_CLK_TCK), btime as a Unix time."""
    import asyncio

    from exporter.config.host import HostSourceConfig
    from exporter.host.host_proc import CLOCK_TICKS
    from exporter.sources.host import HostSource

    assert parse_stat(STAT + "btime 1700000000\n").boot_time == 1700000000
    assert parse_stat(STAT).boot_time == 0
    (tmp_path / "stat").write_text(STAT + "btime 1700000000\n")
    (tmp_path / "meminfo").write_text("MemTotal: 1000 kB\nMemAvailable: 500 kB\n")
    (tmp_path / "loadavg").write_text("0.5 0.25 0.1 1/100 42\n")
    source = HostSource("host", HostSourceConfig(proc_path=str(tmp_path), timeout=1.0))
    readings = {(r.metric, r.labels): r.value for r in asyncio.run(source.poll())}
    assert readings[("accel_host_cpu_seconds_total", ("user",))] == 100 / CLOCK_TICKS
    assert readings[("accel_host_cpu_seconds_total", ("idle",))] == 800 / CLOCK_TICKS
    assert readings[("accel_host_boot_time_seconds", ())] == 1700000000.0
    # The counter grows with the file; rate() over it is what the ratio only sampled.
    (tmp_path / "stat").write_text(STAT.replace("cpu  100", "cpu  400") + "btime 1700000000\n")
    later = {(r.metric, r.labels): r.value for r in asyncio.run(source.poll())}
    assert later[("accel_host_cpu_seconds_total", ("user",))] == 400 / CLOCK_TICKS
