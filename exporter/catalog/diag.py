"""Diagnostic verdicts read from a directory: dcgmi diag, Health Validation, AGFHC, RVS.

See docs/diagnostics.md. Device series carry ``device`` and ``uuid`` of the
exporter's own device the result was matched to (a result no device matches is only
counted; a result about the node, Health Validation's own verdict and node checks,
has both ""), ``suite`` (``dcgm``, ``health_validation``, ``agfhc``, ``rvs``) and
``test`` (the suite's test name as a label: lower case, ``_`` for the rest). A
run's codes, severities and categories are in the info family, not on the result
series.
"""

from __future__ import annotations

from exporter.catalog import budget
from exporter.catalog.spec import Kind, MetricSpec
from exporter.catalog.vocabulary import DIAG_FILE_REJECTIONS, DIAG_FILE_RESULTS, DIAG_RESULTS

_TEST = ("device", "uuid", "suite", "test")

ROWS = (
    MetricSpec(
        "accel_diag_test_result",
        Kind.GAUGE,
        "The result of a diagnostic test on a device in the newest run of its suite that"
        " tested the device, one-hot over pass, warn, fail and skip; gone when that run is"
        ' older than the health window (health.event_window). device and uuid are "" for'
        " a result about the node (Health Validation's own verdict and node checks).",
        (*_TEST, "result"),
        values={"result": DIAG_RESULTS},
        max_series=budget.DEVICE_PARTS,
    ),
    MetricSpec(
        "accel_diag_test_info",
        Kind.INFO,
        "An error a diagnostic test reported on a device: the suite's code (DCGM_FR_*,"
        " AGFHC's suggested action), its severity and category as the suite words them"
        " (DCGM: isolate, reset, ...; hardware_memory, ...); present while its run counts.",
        (*_TEST, "code", "severity", "category"),
        max_series=budget.DEVICE_PARTS,
    ),
    MetricSpec(
        "accel_diag_device_run_timestamp_seconds",
        Kind.GAUGE,
        "Unix time of the run a device's results of a suite come from (the result file's"
        " modification time).",
        ("device", "uuid", "suite"),
        unit="seconds",
        max_series=budget.DEVICES,
    ),
    MetricSpec(
        "accel_diag_run_timestamp_seconds",
        Kind.GAUGE,
        "Unix time of the newest accepted run of a suite in the watched directory.",
        ("suite",),
        unit="seconds",
        max_series=budget.SMALL,
    ),
    MetricSpec(
        "accel_diag_run_info",
        Kind.INFO,
        "The version of the tool that wrote the newest accepted run of a suite (DCGM 4.2.3;"
        " empty where the suite writes none); always 1.",
        ("suite", "version"),
        max_series=budget.SMALL,
    ),
    MetricSpec(
        "accel_diag_files_total",
        Kind.COUNTER,
        "Result files of a known suite read since the daemon started, once per file version,"
        " by result: accepted, schema_drift (a version or shape no parser is pinned to:"
        " never guessed at, nothing about any device taken from it), runtime_error (the"
        " tool could not run its tests).",
        ("suite", "result"),
        otel_unit="{file}",
        values={"result": DIAG_FILE_RESULTS},
        max_series=budget.SMALL,
    ),
    MetricSpec(
        "accel_diag_files_rejected_total",
        Kind.COUNTER,
        "Files of the watched directory refused since the daemon started, once per file"
        " version, by reason: too_large, truncated, unparseable, symlink, not_regular_file"
        " (a FIFO, a device, a directory), unreadable, unknown_format, too_many_files,"
        " expired (older than the health window, not read).",
        ("reason",),
        otel_unit="{file}",
        values={"reason": DIAG_FILE_REJECTIONS},
    ),
    MetricSpec(
        "accel_diag_schema_drift_info",
        Kind.INFO,
        "A suite and version of a file in the watched directory that no parser is pinned to"
        " (empty version: the file names none, or its shape drifted); present while the"
        " file is there.",
        ("suite", "version"),
        max_series=budget.SMALL,
    ),
    MetricSpec(
        "accel_diag_unmatched_results",
        Kind.GAUGE,
        "Results of the counted runs of a suite that name a device the exporter does not"
        " list (by serial number, else by the suite's device number): shown nowhere else.",
        ("suite",),
        otel_unit="{result}",
        max_series=budget.SMALL,
    ),
    MetricSpec(
        "accel_diag_directory_present",
        Kind.GAUGE,
        "1 when the watched directory (sources.diag.path) exists, 0 when it does not (no"
        " results then, and no error).",
    ),
)
