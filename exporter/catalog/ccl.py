"""NCCL/RCCL job health (RAS) and collective performance (Inspector) families.

RAS series carry ``address`` (the RAS address as configured, e.g.
``localhost:28028``); ``comm`` is a communicator hash as 16 lowercase hex
digits. Per-rank series exist only for the ranks ``rank_series`` selects, and
job- and communicator-level series only on the job's reporter (see docs/ccl.md).
Inspector series come from the ranks whose files this node sees.
"""

from __future__ import annotations

from exporter.catalog import budget
from exporter.catalog.spec import Kind, MetricSpec
from exporter.catalog.vocabulary import CCL_JOB_STATES

QUERY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0, 30.0, 60.0)
# Bus bandwidth from 100 MB/s to 1.6 TB/s (NVLink 5 peaks near 900 GB/s per direction).
BANDWIDTH_BUCKETS = (
    1e8,
    2.5e8,
    5e8,
    1e9,
    2.5e9,
    5e9,
    1e10,
    2.5e10,
    5e10,
    1e11,
    2e11,
    4e11,
    8e11,
    1.6e12,
)
# One collective: from a 10 us latency-bound op to a 10 s stall.
DURATION_BUCKETS = (1e-5, 5e-5, 1e-4, 5e-4, 1e-3, 5e-3, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0)

_A = ("address",)
_COMM = ("address", "comm")

RAS_ROWS = (
    MetricSpec(
        "accel_ccl_ras_up",
        Kind.GAUGE,
        "1 when the RAS service at this address returned a report on the last query, else 0.",
        _A,
        max_series=budget.RAS_ADDRESSES,
    ),
    MetricSpec(
        "accel_ccl_job_state",
        Kind.GAUGE,
        "Job state seen through this RAS address, one-hot over no_job, unreachable, error, "
        "healthy, degraded, stalled.",
        (*_A, "state"),
        values={"state": CCL_JOB_STATES},
        max_series=budget.RAS_ADDRESSES,
    ),
    MetricSpec(
        "accel_ccl_job_state_reason_info",
        Kind.INFO,
        "Why the job is not healthy (missing_ranks, dead_processes, no_progress, timeout, ...); "
        "present only while it is not.",
        (*_A, "reason"),
        max_series=budget.RAS_ADDRESSES,
    ),
    MetricSpec(
        "accel_ccl_job_info",
        Kind.INFO,
        "NCCL or RCCL library and version of the job behind this RAS address; always 1.",
        (*_A, "library", "version"),
        max_series=budget.RAS_ADDRESSES,
    ),
    MetricSpec(
        "accel_ccl_ras_reporter",
        Kind.GAUGE,
        "1 when this exporter is the job's reporter (exports job and communicator series), "
        "0 when a follower or when no job answers at this address.",
        _A,
        max_series=budget.RAS_ADDRESSES,
    ),
    MetricSpec(
        "accel_ccl_job_nodes",
        Kind.GAUGE,
        "Nodes running processes of the job, per RAS.",
        _A,
        otel_unit="{node}",
        max_series=budget.RAS_ADDRESSES,
    ),
    MetricSpec(
        "accel_ccl_job_processes",
        Kind.GAUGE,
        "NCCL processes of the job, dead ones included, per RAS.",
        _A,
        otel_unit="{process}",
        max_series=budget.RAS_ADDRESSES,
    ),
    MetricSpec(
        "accel_ccl_job_gpus",
        Kind.GAUGE,
        "GPUs used by the job, per RAS.",
        _A,
        otel_unit="{gpu}",
        max_series=budget.RAS_ADDRESSES,
    ),
    MetricSpec(
        "accel_ccl_job_missing_processes",
        Kind.GAUGE,
        "Job processes that did not answer the last RAS query (and are not yet declared dead).",
        _A,
        otel_unit="{process}",
        max_series=budget.RAS_ADDRESSES,
    ),
    MetricSpec(
        "accel_ccl_job_dead_processes",
        Kind.GAUGE,
        "Job processes RAS declared dead (unreachable for about 60 s).",
        _A,
        otel_unit="{process}",
        max_series=budget.RAS_ADDRESSES,
    ),
    MetricSpec(
        "accel_ccl_job_last_progress_timestamp_seconds",
        Kind.GAUGE,
        "Unix time of the last RAS query in which some RUNNING communicator's operation "
        "counts had moved.",
        _A,
        unit="seconds",
        max_series=budget.RAS_ADDRESSES,
    ),
    MetricSpec(
        "accel_ccl_communicators",
        Kind.GAUGE,
        "Communicators RAS collected data about.",
        _A,
        otel_unit="{communicator}",
        max_series=budget.RAS_ADDRESSES,
    ),
    MetricSpec(
        "accel_ccl_comm_ranks",
        Kind.GAUGE,
        "Ranks of a communicator (its size).",
        _COMM,
        otel_unit="{rank}",
        max_series=budget.RAS_COMMS,
    ),
    MetricSpec(
        "accel_ccl_comm_missing_ranks",
        Kind.GAUGE,
        "Ranks of a communicator RAS has no data from (unresponsive, or not yet or no "
        "longer members).",
        _COMM,
        otel_unit="{rank}",
        max_series=budget.RAS_COMMS,
    ),
    MetricSpec(
        "accel_ccl_comm_op_skew",
        Kind.GAUGE,
        "Highest minus lowest operation count of one collective type across the ranks of a "
        "communicator that reported.",
        (*_COMM, "collective"),
        otel_unit="{operation}",
        max_series=budget.RAS_COMM_COLLECTIVES,
    ),
    MetricSpec(
        "accel_ccl_rank_collective_ops_total",
        Kind.COUNTER,
        "Collective operations of one type a rank has launched on a communicator, per RAS.",
        (*_COMM, "rank", "collective"),
        otel_unit="{operation}",
        max_series=budget.RAS_RANK_SERIES,
    ),
    MetricSpec(
        "accel_ccl_rank_device_info",
        Kind.INFO,
        "Which GPU of this node a communicator rank runs on, as RAS reports it (device: the"
        " NVML/SMI index; uuid from the device source, empty when unknown), for the ranks on"
        " this node only: join on device or uuid with the GPU's series.",
        (*_COMM, "rank", "device", "uuid", "pid"),
        max_series=budget.RAS_RANK_DEVICES,
    ),
    MetricSpec(
        "accel_ccl_ras_query_duration_seconds",
        Kind.HISTOGRAM,
        "Wall time of RAS queries from connect to the end of the report, failed ones included "
        "(refused connections are not queries).",
        _A,
        unit="seconds",
        buckets=QUERY_BUCKETS,
        max_series=budget.RAS_ADDRESSES,
    ),
    MetricSpec(
        "accel_ccl_ras_collection_seconds",
        Kind.GAUGE,
        "Time RAS reported it spent gathering communicator data across the job, last query.",
        _A,
        unit="seconds",
        max_series=budget.RAS_ADDRESSES,
    ),
    MetricSpec(
        "accel_ccl_ras_timeouts_total",
        Kind.COUNTER,
        "Communication timeouts RAS reported while gathering data, summed over queries.",
        _A,
        otel_unit="{timeout}",
        max_series=budget.RAS_ADDRESSES,
    ),
    MetricSpec(
        "accel_ccl_job_state_transitions_total",
        Kind.COUNTER,
        "Changes of the job state seen through this RAS address.",
        (*_A, "from", "to"),
        otel_unit="{transition}",
        max_series=budget.RAS_ADDRESSES,
    ),
    MetricSpec(
        "accel_ccl_ras_monitor_up",
        Kind.GAUGE,
        "1 while the RAS MONITOR event stream (NCCL 2.29.2+) is connected, else 0.",
        _A,
        max_series=budget.RAS_ADDRESSES,
    ),
    MetricSpec(
        "accel_ccl_ras_events_total",
        Kind.COUNTER,
        "RAS MONITOR events received, by type (PEER_DEAD, PEER_UNRESPONSIVE, ...).",
        (*_A, "event"),
        otel_unit="{event}",
        max_series=budget.RAS_ADDRESSES,
    ),
)

INSPECTOR_ROWS = (
    MetricSpec(
        "accel_ccl_collective_bus_bandwidth_bytes_per_second",
        Kind.HISTOGRAM,
        "Bus bandwidth of completed operations (Inspector, kernel_gpu timing only); msg_size "
        "is the message size rounded up to a power of two, in bytes.",
        ("comm", "collective", "msg_size"),
        unit="bytes_per_second",
        buckets=BANDWIDTH_BUCKETS,
        max_series=budget.INSPECTOR_SERIES,
    ),
    MetricSpec(
        "accel_ccl_collective_duration_seconds",
        Kind.HISTOGRAM,
        "GPU kernel time of completed operations (Inspector, kernel_gpu timing only).",
        ("comm", "collective", "msg_size"),
        unit="seconds",
        buckets=DURATION_BUCKETS,
        max_series=budget.INSPECTOR_SERIES,
    ),
    MetricSpec(
        "accel_ccl_rank_bus_bandwidth_bytes_per_second",
        Kind.GAUGE,
        "Bus bandwidth of a rank's last completed operation of this type (Inspector).",
        ("comm", "rank", "collective"),
        unit="bytes_per_second",
        max_series=budget.INSPECTOR_RANKS,
    ),
    MetricSpec(
        "accel_ccl_straggler_rank",
        Kind.GAUGE,
        "Rank whose kernel time was furthest from the median in the last collective seen by "
        "every local rank of the communicator (or, when sampled, in the ranks' latest ones); "
        "the shortest time usually means it arrived last.",
        ("comm",),
        max_series=budget.INSPECTOR_COMMS,
    ),
    MetricSpec(
        "accel_ccl_straggler_sampled",
        Kind.GAUGE,
        "1 when straggler and skew of this communicator last came from each local rank's latest "
        "operation of one collective type and size (sampled dumps: NCCL before 2.30, RCCL), "
        "0 when from one collective every local rank recorded.",
        ("comm",),
        max_series=budget.INSPECTOR_COMMS,
    ),
    MetricSpec(
        "accel_ccl_collective_skew_ratio",
        Kind.GAUGE,
        "Longest over shortest kernel time across local ranks in the last collective of this "
        "type seen by all of them, or when sampled in their latest ones (1 = no skew).",
        ("comm", "collective"),
        max_series=budget.INSPECTOR_RANKS,
    ),
    MetricSpec(
        "accel_ccl_bandwidth_implausible",
        Kind.GAUGE,
        "1 when a record of this communicator exceeded the configured link peak bandwidth "
        "(such records are not used; RCCL 2.28.3 reports 10x too high).",
        ("comm",),
        max_series=budget.INSPECTOR_COMMS,
    ),
    MetricSpec(
        "accel_ccl_inspector_files",
        Kind.GAUGE,
        "Inspector output files (one per NCCL process) being followed.",
        otel_unit="{file}",
    ),
    MetricSpec(
        "accel_ccl_inspector_lines_total",
        Kind.COUNTER,
        "Inspector lines read, by outcome (used, not_kernel_gpu, zero_time, implausible, "
        "duplicate, malformed, series_limit, other).",
        ("outcome",),
        otel_unit="{line}",
        max_series=budget.SMALL,
    ),
    MetricSpec(
        "accel_ccl_inspector_incomplete_groups_total",
        Kind.COUNTER,
        "Collectives (comm, coll_sn) given up before every local rank's record arrived: the "
        "ranks moved past them (sampled dumps before NCCL 2.30, operations the plugin dropped) "
        "or too many were pending.",
        otel_unit="{group}",
    ),
    MetricSpec(
        "accel_ccl_inspector_file_restarts_total",
        Kind.COUNTER,
        "Inspector files read again from their start: truncated (shrunk, or its first bytes "
        "changed, as after copytruncate and a refill) or replaced (a new inode under the name).",
        ("reason",),
        otel_unit="{restart}",
        max_series=budget.SMALL,
    ),
    MetricSpec(
        "accel_ccl_inspector_files_refused_total",
        Kind.COUNTER,
        "Inspector file names not read, every poll that finds them: a symbolic link (never "
        "followed) or not a regular file (a FIFO or device is never waited on).",
        ("reason",),
        otel_unit="{file}",
        values={"reason": ("symlink", "not_regular")},
    ),
    MetricSpec(
        "accel_ccl_inspector_skipped_bytes_total",
        Kind.COUNTER,
        "Inspector bytes not parsed: backlog beyond max_read_bytes per poll, or overlong lines.",
        unit="bytes",
    ),
)

ROWS: tuple[MetricSpec, ...] = RAS_ROWS + INSPECTOR_ROWS
