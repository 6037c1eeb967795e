"""Metric profiles: which catalog families a scrape (or an OTLP push) carries.

Three profiles, each a superset of the one before:

* ``minimal``: what an alert or a capacity dashboard needs (the daemon's and the
  sources' health, identity, up, health, utilization, memory, power, energy,
  temperature, throttling, ECC/XID/AFID and row-remapping counts, workload
  attribution, CCL job state). Every shipped alert and recording rule works on it.
* ``default``: every family, but one row per device instead of one per link, port or
  engine: per-link NVLink/XGMI/Xe Link traffic and state, Gaudi NIC port counters and
  per-engine utilization are
  left out (their per-device totals, :mod:`exporter.catalog.totals`, stay), and
  per-link NVLink error counters are written only for a link that has counted an
  error (a healthy link costs no series).
* ``full``: everything, every link and engine.

``include`` and ``exclude`` (family names or globs) apply on top: an included
family is written in full, whatever the profile would thin; an excluded one not
at all. Membership lives here rather than on each catalog row so that a profile
can be read (and reviewed) in one place; :func:`problems` checks it against the
catalog (tests/unit/test_profiles.py).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from exporter.catalog import CATALOG, MetricSpec
from exporter.catalog.totals import TOTALS
from exporter.suggest import closest

PROFILES = ("minimal", "default", "full")
DEFAULT_PROFILE = "default"

MINIMAL: frozenset[str] = frozenset(
    {
        # The daemon and its sources.
        "accel_exporter_build_info",
        "accel_exporter_source_up",
        "accel_exporter_source_down_reason_info",
        "accel_exporter_source_unavailable_info",
        "accel_exporter_source_errors_total",
        "accel_exporter_worker_restarts_total",
        "accel_exporter_series",
        "accel_compat_field_unserved_info",
        "accel_compat_info",
        # The host, for capacity.
        "accel_host_cpus",
        "accel_host_cpu_seconds_total",
        "accel_host_memory_total_bytes",
        "accel_host_memory_available_bytes",
        "accel_host_load1",
        "accel_host_load5",
        "accel_host_load15",
        # Inventory, up and health.
        "accel_device_info",
        "accel_device_up",
        "accel_device_down_reason_info",
        "accel_device_health",
        "accel_device_health_reason_info",
        # What to do about a device: present only while a finding asks for an action.
        "accel_device_action_reason_info",
        "accel_devices",
        "accel_pci_devices",
        "accel_devices_expected",
        "accel_device_isolated_info",
        "accel_mig_device_info",
        # Utilization, memory, power, energy, temperature, throttling.
        "accel_utilization_ratio",
        "accel_memory_total_bytes",
        "accel_memory_used_bytes",
        "accel_power_watts",
        "accel_power_limit_watts",
        "accel_energy_joules_total",
        "accel_temperature_celsius",
        "accel_clock_throttle_active",
        "accel_clock_violation_seconds_total",
        # Errors: ECC, XID, AFID, retired pages and remapped rows, link errors per device.
        "accel_ecc_errors_total",
        "accel_retired_pages_pending",
        "accel_remapped_rows_pending",
        "accel_remapped_rows_failure",
        "accel_xid_errors_total",
        "accel_xid_last_timestamp_seconds",
        "accel_amd_afid_errors_total",
        "accel_amd_afid_last_timestamp_seconds",
        "accel_amd_afid_info",
        "accel_amd_corrected_afids_decoded",
        "accel_nvlink_device_errors_total",
        # Workload attribution.
        "accel_device_workload_info",
        "accel_device_claim_info",
        "accel_mig_workload_info",
        "accel_device_job_info",
        "accel_pod_labels_info",
        # Collective-communication jobs (the CCL alerts and recording rules).
        "accel_ccl_ras_up",
        "accel_ccl_job_state",
        "accel_ccl_job_info",
        "accel_ccl_job_nodes",
        "accel_ccl_job_processes",
        "accel_ccl_job_gpus",
        "accel_ccl_job_missing_processes",
        "accel_ccl_job_dead_processes",
        "accel_ccl_comm_missing_ranks",
        "accel_ccl_comm_op_skew",
        "accel_ccl_rank_collective_ops_total",
        "accel_ccl_rank_bus_bandwidth_bytes_per_second",
        "accel_ccl_straggler_rank",
        "accel_ccl_collective_skew_ratio",
        "accel_ccl_collective_bus_bandwidth_bytes_per_second",
        # The fabric: NIC ports, their joins to GPUs, PCIe training (the fabric alerts).
        "accel_nic_port_up",
        "accel_nic_port_errors_total",
        "accel_nic_port_flaps_total",
        "accel_nic_port_outage_seconds_total",
        "accel_nic_missing",
        "accel_nic_gpu_info",
        "accel_pci_link_downtrained",
        "accel_pci_aer_errors_total",
        "accel_nic_port_last_outage_seconds",
        # Interconnect error rates (the trend alerts, docs/health.md "Trends"): one series
        # per device (per RAS block on AMD), and what the noisy-signal registry downgraded.
        "accel_pcie_replays_total",
        "accel_amd_pcie_recoveries_total",
        "accel_amd_ecc_uncorrectable_errors_total",
        "accel_amd_ecc_correctable_errors_total",
        "accel_health_signal_downgraded_total",
    }
)

# One row per link, port or engine: in ``full`` only (their per-device totals or
# summaries are in ``default``).
FULL_ONLY: frozenset[str] = frozenset(
    {
        "accel_nvlink_up",
        "accel_nvlink_tx_bytes_total",
        "accel_nvlink_rx_bytes_total",
        "accel_amd_xgmi_link_up",
        "accel_amd_xgmi_read_bytes_total",
        "accel_amd_xgmi_write_bytes_total",
        "accel_intel_fabric_port_up",
        "accel_intel_fabric_rx_bytes_total",
        "accel_intel_fabric_tx_bytes_total",
        "accel_gaudi_nic_port_up",
        "accel_gaudi_nic_statistic_total",
        # Per video/JPEG/OFA engine; accel_encoder/decoder_utilization_ratio and
        # accel_amd_mm_activity_ratio summarise them per device.
        "accel_engine_utilization_ratio",
        "accel_amd_vcn_activity_ratio",
        "accel_amd_jpeg_activity_ratio",
    }
)


@dataclass(frozen=True)
class Sparse:
    """A counter family written only for the parts that counted something.

    Readings are grouped by their first ``by`` labels (for per-link errors:
    device, uuid, link); a group is written, every type of it, once any of its
    counters is non-zero. Counters only grow, so a part that appeared stays (no
    series churn), and one that never counted costs nothing.
    """

    family: str
    by: int


# Thinned in the profiles named, written in full elsewhere.
SPARSE: Mapping[str, Mapping[str, Sparse]] = {
    "default": {"accel_nvlink_errors_total": Sparse("accel_nvlink_errors_total", 3)},
    "minimal": {
        # Nine throttle reasons per GPU, most of them never asserted on a given node.
        "accel_clock_violation_seconds_total": Sparse("accel_clock_violation_seconds_total", 3),
        "accel_nvlink_device_errors_total": Sparse("accel_nvlink_device_errors_total", 3),
        # The interconnect error counters of the trend alerts: only the GPUs (and the dozen
        # RAS blocks of an AMD GPU) that counted one.
        "accel_pcie_replays_total": Sparse("accel_pcie_replays_total", 2),
        "accel_amd_pcie_recoveries_total": Sparse("accel_amd_pcie_recoveries_total", 2),
        "accel_amd_ecc_uncorrectable_errors_total": Sparse(
            "accel_amd_ecc_uncorrectable_errors_total", 3
        ),
        "accel_amd_ecc_correctable_errors_total": Sparse(
            "accel_amd_ecc_correctable_errors_total", 3
        ),
    },
}


@dataclass(frozen=True)
class Selection:
    """What one profile with its include/exclude lists writes."""

    profile: str
    families: frozenset[str]
    sparse: Mapping[str, Sparse]


def members(profile: str, catalog: Mapping[str, MetricSpec] = CATALOG) -> frozenset[str]:
    """The families of ``profile`` alone (no include/exclude)."""
    if profile == "minimal":
        return MINIMAL & frozenset(catalog)
    if profile == "default":
        return frozenset(catalog) - FULL_ONLY
    if profile == "full":
        return frozenset(catalog)
    raise ValueError(f"unknown profile {profile!r}; choose one of {', '.join(PROFILES)}")


def _names(row: MetricSpec) -> tuple[str, ...]:
    return (row.name, row.family_name) if row.family_name != row.name else (row.name,)


def matches(pattern: str, catalog: Mapping[str, MetricSpec] = CATALOG) -> set[str]:
    """The catalog families ``pattern`` names, exactly or as a glob.

    A counter may be named with or without ``_total``.
    """
    return {
        name
        for name, row in catalog.items()
        if any(fnmatch.fnmatchcase(shown, pattern) for shown in _names(row))
    }


def pattern_problem(pattern: str, catalog: Mapping[str, MetricSpec] = CATALOG) -> str | None:
    """Why ``pattern`` names no family (with the nearest family name), or None."""
    if matches(pattern, catalog):
        return None
    known = sorted({shown for row in catalog.values() for shown in _names(row)})
    close = closest(pattern.replace("*", "").replace("?", ""), known)
    hint = f" (did you mean {close!r}?)" if close else ""
    kind = "matches no" if any(c in pattern for c in "*?[") else "is not a"
    return f"{pattern!r} {kind} catalog family{hint}"


def _named(patterns: Sequence[str], catalog: Mapping[str, MetricSpec]) -> set[str]:
    out: set[str] = set()
    for pattern in patterns:
        found = matches(pattern, catalog)
        if not found:
            raise ValueError(pattern_problem(pattern, catalog))
        out |= found
    return out


def select(
    profile: str,
    include: Sequence[str] = (),
    exclude: Sequence[str] = (),
    catalog: Mapping[str, MetricSpec] = CATALOG,
) -> Selection:
    """The families and thinning of ``profile`` with ``include`` and ``exclude`` applied.

    Patterns are checked by the config loader first (:func:`pattern_problem`); an
    unknown one here is a ValueError.
    """
    included, excluded = _named(include, catalog), _named(exclude, catalog)
    families = (set(members(profile, catalog)) | included) - excluded
    sparse = {
        name: rule
        for name, rule in SPARSE.get(profile, {}).items()
        if name in families and name not in included
    }
    return Selection(profile, frozenset(families), sparse)


def problems(catalog: Mapping[str, MetricSpec] = CATALOG) -> list[str]:
    """Every inconsistency between this module and the catalog.

    Names the catalog does not have, a sparse family that is not a counter or is
    grouped by more labels than it has, a total whose labels are not its detail's.
    """
    out = [f"minimal: {name} is not in the catalog" for name in sorted(MINIMAL - set(catalog))]
    out += [f"full only: {name} is not in the catalog" for name in sorted(FULL_ONLY - set(catalog))]
    out += [f"minimal and full only: {name}" for name in sorted(MINIMAL & FULL_ONLY)]
    for profile, rules in SPARSE.items():
        for name, rule in rules.items():
            row = catalog.get(name)
            if row is None:
                out.append(f"sparse in {profile}: {name} is not in the catalog")
            elif row.kind.value != "counter" or not 0 < rule.by <= len(row.labels):
                out.append(f"sparse in {profile}: {name} is not a counter grouped by its labels")
    for total in TOTALS:
        detail = catalog.get(total.detail)
        if detail is None or total.over not in detail.labels:
            out.append(f"total {total.row.name}: {total.detail} has no label {total.over}")
        elif tuple(x for x in detail.labels if x != total.over) != total.row.labels:
            out.append(
                f"total {total.row.name}: labels are not {total.detail}'s without {total.over}"
            )
    return out
