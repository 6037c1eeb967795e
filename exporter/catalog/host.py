"""Host families read from /proc by the host source."""

from __future__ import annotations

from exporter.catalog.spec import Kind, MetricSpec
from exporter.catalog.vocabulary import CPU_MODES

ROWS = (
    MetricSpec(
        "accel_host_cpu_seconds_total",
        Kind.COUNTER,
        "CPU time spent in each mode, summed over all CPUs, from /proc/stat "
        "(node_cpu_seconds_total without the cpu label): rate() it.",
        ("mode",),
        unit="seconds",
        otel_name="accel.host.cpu.time",
        values={"mode": CPU_MODES},
    ),
    MetricSpec(
        "accel_host_boot_time_seconds",
        Kind.GAUGE,
        "Unix time the host booted (btime in /proc/stat), as node_boot_time_seconds.",
        unit="seconds",
        otel_name="accel.host.boot_time",
    ),
    MetricSpec(
        "accel_host_cpu_ratio",
        Kind.GAUGE,
        "Share of all CPU time spent in each mode over the last host poll interval, 0..1.",
        ("mode",),
        unit="ratio",
        otel_name="accel.host.cpu.utilization",
        values={"mode": CPU_MODES},
    ),
    MetricSpec(
        "accel_host_cpus",
        Kind.GAUGE,
        "Number of online logical CPUs in /proc/stat.",
        otel_unit="{cpu}",
    ),
    MetricSpec(
        "accel_host_memory_total_bytes",
        Kind.GAUGE,
        "MemTotal from /proc/meminfo.",
        unit="bytes",
    ),
    MetricSpec(
        "accel_host_memory_available_bytes",
        Kind.GAUGE,
        "MemAvailable from /proc/meminfo.",
        unit="bytes",
    ),
    MetricSpec("accel_host_load1", Kind.GAUGE, "1-minute load average from /proc/loadavg."),
    MetricSpec("accel_host_load5", Kind.GAUGE, "5-minute load average from /proc/loadavg."),
    MetricSpec("accel_host_load15", Kind.GAUGE, "15-minute load average from /proc/loadavg."),
)
