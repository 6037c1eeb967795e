"""Families about the daemon itself: build, per-source health, workers, the listener."""

from __future__ import annotations

from exporter.catalog import budget
from exporter.catalog.spec import Kind, MetricSpec
from exporter.catalog.vocabulary import (
    EXPORT_RESULTS,
    NVSENTINEL_EVENT_KINDS,
    NVSENTINEL_FAILURES,
)

# Poll durations range from sub-millisecond (/proc) to the RAS deadline (tens of seconds).
POLL_DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)

ROWS = (
    MetricSpec(
        "accel_exporter_build_info",
        Kind.INFO,
        "Build of the running accel-exporter; always 1.",
        ("version", "python"),
        max_series=budget.SMALL,
    ),
    MetricSpec(
        "accel_exporter_source_up",
        Kind.GAUGE,
        "1 when the source's last poll succeeded and its data is fresh, else 0.",
        ("source",),
        max_series=budget.SMALL,
    ),
    MetricSpec(
        "accel_exporter_source_down_reason_info",
        Kind.INFO,
        "Why a source is down (reason is a short snake_case code); present only while down.",
        ("source", "reason"),
        max_series=budget.SMALL,
    ),
    MetricSpec(
        "accel_exporter_source_unavailable_info",
        Kind.INFO,
        "An enabled: auto source that cannot run on this machine, with the reason; not an error.",
        ("source", "reason"),
        max_series=budget.SMALL,
    ),
    MetricSpec(
        "accel_exporter_source_poll_duration_seconds",
        Kind.HISTOGRAM,
        "Wall time of each poll of a source, successful or not.",
        ("source",),
        unit="seconds",
        buckets=POLL_DURATION_BUCKETS,
        max_series=budget.SMALL,
    ),
    MetricSpec(
        "accel_exporter_source_last_success_timestamp_seconds",
        Kind.GAUGE,
        "Unix time of the source's last successful poll.",
        ("source",),
        unit="seconds",
        max_series=budget.SMALL,
    ),
    MetricSpec(
        "accel_exporter_source_errors_total",
        Kind.COUNTER,
        "Failed polls of a source, by reason.",
        ("source", "reason"),
        otel_unit="{error}",
        max_series=budget.SMALL,
    ),
    MetricSpec(
        "accel_exporter_series_dropped_total",
        Kind.COUNTER,
        "Series a source's snapshots had beyond their family's series budget (the catalog "
        "row's max_series), dropped; counted every snapshot that has them, present once a "
        "family of the source went over.",
        ("source", "family"),
        otel_unit="{series}",
        max_series=budget.SOURCE_FAMILIES,
    ),
    MetricSpec(
        "accel_exporter_worker_restarts_total",
        Kind.COUNTER,
        "Times a source's worker process was started again: killed, died, failed its"
        " bootstrap, or replaced to isolate or take back a device.",
        ("source",),
        otel_unit="{restart}",
        max_series=budget.SMALL,
    ),
    MetricSpec(
        "accel_exporter_state_errors_total",
        Kind.COUNTER,
        "Failed reads and writes of a source's state files (the health judge's memory, AMD "
        "CPER ledgers) by reason: corrupt, unreadable, read_only, no_space, "
        "permission_denied, write_failed, locked (another process writes the file). While "
        "writes fail, a daemon restart forgets what the judge learnt since and counts every "
        "CPER record again (/status: health_state, cper_state).",
        ("source", "reason"),
        otel_unit="{error}",
        values={
            "reason": (
                "corrupt",
                "unreadable",
                "read_only",
                "no_space",
                "permission_denied",
                "write_failed",
                "locked",
            )
        },
        max_series=budget.SMALL,
    ),
    MetricSpec(
        "accel_exporter_worker_stuck_processes",
        Kind.GAUGE,
        "Killed worker processes of a source that have not exited (stuck in the driver);"
        " at most one per isolated device.",
        ("source",),
        max_series=budget.SMALL,
    ),
    MetricSpec(
        "accel_exporter_http_connections_refused_total",
        Kind.COUNTER,
        "Connections or requests the listener answered 503 at a limit: connections (every "
        "open connection serving), requests (every request slot busy), auth (too many "
        "password checks waiting for their turn).",
        ("limit",),
        otel_unit="{connection}",
        max_series=budget.SMALL,
    ),
    MetricSpec(
        "accel_exporter_http_idle_connections_closed_total",
        Kind.COUNTER,
        "Connections closed before sending a request, by reason: timeout (idle too long) or "
        "limit (too many keep-alive or open connections; the oldest idle is closed first).",
        ("reason",),
        otel_name="accel.exporter.http.idle_connections.closed",
        otel_unit="{connection}",
        max_series=budget.SMALL,
    ),
    MetricSpec(
        "accel_exporter_http_header_timeouts_total",
        Kind.COUNTER,
        "Connections closed because a request's headers (TLS handshake included) did not "
        "arrive complete within web.header_timeout, or were the slowest at the connection limit.",
        otel_name="accel.exporter.http.header_timeouts",
        otel_unit="{timeout}",
    ),
    MetricSpec(
        "accel_exporter_http_write_timeouts_total",
        Kind.COUNTER,
        "Connections closed because a response was not read within web.write_timeout of its "
        "request's headers (a client reading too slowly holds a request slot).",
        otel_name="accel.exporter.http.write_timeouts",
        otel_unit="{timeout}",
    ),
    MetricSpec(
        "accel_exporter_http_auth_failures_total",
        Kind.COUNTER,
        "Requests answered 401, by reason: missing, malformed or rejected credentials.",
        ("reason",),
        otel_unit="{failure}",
        max_series=budget.SMALL,
    ),
    MetricSpec(
        "accel_exporter_otlp_exports_total",
        Kind.COUNTER,
        "OTLP export attempts by result: success, or failure (refused, unreachable, timed out).",
        ("result",),
        otel_unit="{export}",
        values={"result": EXPORT_RESULTS},
    ),
    MetricSpec(
        "accel_exporter_nvsentinel_events_total",
        Kind.COUNTER,
        "HealthEvents the NVSentinel output delivered to the platform connector, by kind: fatal"
        " (a failed device), non_fatal (degraded or predicted_failure), healthy.",
        ("kind",),
        otel_unit="{event}",
        values={"kind": NVSENTINEL_EVENT_KINDS},
    ),
    MetricSpec(
        "accel_exporter_nvsentinel_failures_total",
        Kind.COUNTER,
        "Calls of the NVSentinel output that delivered nothing, by reason: socket_missing,"
        " unavailable, timeout, rejected (an error status), grpc_missing, internal.",
        ("reason",),
        otel_unit="{failure}",
        values={"reason": NVSENTINEL_FAILURES},
    ),
    MetricSpec(
        "accel_exporter_nvsentinel_connected",
        Kind.GAUGE,
        "1 while the NVSentinel output's last call to the platform connector succeeded, else 0.",
    ),
    MetricSpec(
        "accel_exporter_series",
        Kind.GAUGE,
        "Samples this scrape's exposition carries from each source (exporter: the daemon's own"
        " families), after the profile and include/exclude; the scrape's series budget.",
        ("source",),
        otel_unit="{sample}",
        max_series=budget.SMALL,
    ),
    MetricSpec(
        "accel_compat_field_unserved_info",
        Kind.INFO,
        "A field a peer's field file (outputs.prometheus.compat_fields) lists that compat does"
        " not serve, with the reason; always 1.",
        ("peer", "field", "reason"),
        max_series=budget.SMALL,
    ),
    MetricSpec(
        "accel_compat_info",
        Kind.INFO,
        "Another exporter's vocabulary this daemon serves (outputs.prometheus.compat): the"
        " peer (dcgm: NVIDIA's dcgm-exporter, amd: AMD's device-metrics-exporter) and the"
        " release whose names, units and labels are served; always 1.",
        ("peer", "version"),
        values={"peer": ("dcgm", "amd"), "version": ("4.8", "4.9", "4.10", "1.5")},
    ),
)
