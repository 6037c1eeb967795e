from __future__ import annotations

import pytest

from exporter.sources.host import (
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
