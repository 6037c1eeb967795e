"""OpenTelemetry names for the catalog: one mapping row per Prometheus family.

The OTLP output builds its instruments from :data:`METRICS`, the docs table
(docs/otlp.md) is generated from it, and the tests invert it to compare OTLP
with /metrics. The rules, in order:

1. A family with an OpenTelemetry semantic convention uses it (:data:`OVERRIDES`
   with ``semconv=True``): name, instrument, unit and the attributes the
   convention requires. Several families may share one instrument when the
   convention tells them apart by an attribute (``hw.gpu.utilization`` with
   ``hw.gpu.task`` = general / encoder / decoder).
2. Otherwise a dotted ``accel.*`` name: :data:`OVERRIDES` where the derived name
   would read badly, then the row's own ``otel_name``, then :func:`derive_name`.
   A family that counts things has the UCUM annotation of what it counts as its
   unit (``{error}``, ``{rank}``): from its override, else from :data:`COUNTS`.
3. Attributes are the catalog labels, except the device UUID, which becomes the
   hardware convention's ``hw.id`` everywhere so that every device series joins
   on one key (plus the per-row renames below, e.g. on ``accel_device_info``).

Values are never transformed: an OTLP data point carries exactly the number the
/metrics sample for the same snapshot carries.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from types import MappingProxyType

from exporter.catalog import CATALOG, Kind, MetricSpec

# Semantic conventions release the hw.* names below were checked against.
SEMCONV_VERSION = "1.44.0"

_INSTRUMENT_NAME = re.compile(r"^[a-zA-Z][-_./a-zA-Z0-9]{0,254}$")
_UNIT = re.compile(r"^[\x21-\x7e]{1,63}$")


class Instrument(str, Enum):
    """The OpenTelemetry instrument a family is exported as."""

    GAUGE = "gauge"
    COUNTER = "counter"
    UPDOWNCOUNTER = "updowncounter"
    HISTOGRAM = "histogram"


_BY_KIND = {
    Kind.GAUGE: Instrument.GAUGE,
    Kind.INFO: Instrument.GAUGE,
    Kind.COUNTER: Instrument.COUNTER,
    Kind.HISTOGRAM: Instrument.HISTOGRAM,
}

# Labels renamed on every row: the device UUID is the hardware conventions' hw.id.
ATTRIBUTES: Mapping[str, str] = MappingProxyType({"uuid": "hw.id"})


@dataclass(frozen=True)
class Override:
    """A hand-written mapping for one family (semantic convention or a better name)."""

    name: str
    instrument: Instrument | None = None
    unit: str | None = None
    constants: tuple[tuple[str, str], ...] = ()
    attributes: tuple[tuple[str, str], ...] = ()
    semconv: bool = False
    # For an instrument several families share (each row's help describes only itself).
    description: str = ""


def _hw(
    name: str, instrument: Instrument | None = None, description: str = "", **constants: str
) -> Override:
    keys = {k.replace("__", "."): v for k, v in constants.items()}
    return Override(name, instrument, None, tuple(keys.items()), (), True, description)


_GPU_TASK = "Fraction of time the GPU spent in a task (hw.gpu.task), 0..1."
_PCIE = "PCIe throughput by direction over the driver's last sample window."


# The hardware conventions (semantic-conventions docs/hardware/gpu.md and common.md).
# hw.status carries the health verdict (one series per hw.state, as the convention wants);
# accel_device_up is one 0/1 series, not a status.
# hw.errors is not used for ECC: our counter label (volatile/aggregate) would double count.
# hw.gpu.io counts bytes; our PCIe figures are rates, so they stay accel.*.
_SEMCONV = {
    "accel_utilization_ratio": _hw("hw.gpu.utilization", None, _GPU_TASK, hw__gpu__task="general"),
    "accel_encoder_utilization_ratio": _hw(
        "hw.gpu.utilization", None, _GPU_TASK, hw__gpu__task="encoder"
    ),
    "accel_decoder_utilization_ratio": _hw(
        "hw.gpu.utilization", None, _GPU_TASK, hw__gpu__task="decoder"
    ),
    "accel_memory_total_bytes": _hw("hw.gpu.memory.limit", Instrument.UPDOWNCOUNTER),
    "accel_memory_used_bytes": _hw("hw.gpu.memory.usage", Instrument.UPDOWNCOUNTER),
    "accel_power_watts": _hw("hw.power", hw__type="gpu"),
    "accel_device_health": Override(
        "hw.status",
        Instrument.UPDOWNCOUNTER,
        "1",
        (("hw.type", "gpu"),),
        (("state", "hw.state"),),
        True,
        "Operational status: 1 for the state that holds (hw.state), 0 for the others.",
    ),
    "accel_energy_joules_total": _hw("hw.energy", hw__type="gpu"),
}

_HW_IDENTITY = (
    ("vendor", "hw.vendor"),
    ("model", "hw.model"),
    ("serial", "hw.serial_number"),
    ("driver_version", "hw.driver_version"),
    ("vbios", "hw.firmware_version"),
)

_NAMED = {
    "accel_exporter_source_errors_total": Override("accel.exporter.source.errors", unit="{error}"),
    "accel_exporter_worker_restarts_total": Override(
        "accel.exporter.worker.restarts", unit="{restart}"
    ),
    "accel_exporter_otlp_exports_total": Override("accel.exporter.otlp.exports", unit="{export}"),
    "accel_exporter_http_connections_refused_total": Override(
        "accel.exporter.http.connections.refused", unit="{connection}"
    ),
    "accel_exporter_http_idle_connections_closed_total": Override(
        "accel.exporter.http.idle_connections.closed", unit="{connection}"
    ),
    "accel_exporter_http_header_timeouts_total": Override(
        "accel.exporter.http.header_timeouts", unit="{timeout}"
    ),
    "accel_exporter_http_write_timeouts_total": Override(
        "accel.exporter.http.write_timeouts", unit="{timeout}"
    ),
    "accel_exporter_http_auth_failures_total": Override(
        "accel.exporter.http.auth.failures", unit="{failure}"
    ),
    "accel_host_cpu_ratio": Override("accel.host.cpu.utilization"),
    "accel_host_cpu_seconds_total": Override("accel.host.cpu.time"),
    "accel_host_boot_time_seconds": Override("accel.host.boot_time"),
    "accel_host_cpus": Override("accel.host.cpus", unit="{cpu}"),
    "accel_device_info": Override("accel.device.info", attributes=_HW_IDENTITY),
    "accel_devices": Override(
        "accel.devices", unit="{device}", attributes=(("vendor", "hw.vendor"),)
    ),
    "accel_devices_expected": Override(
        "accel.devices.expected", unit="{device}", attributes=(("vendor", "hw.vendor"),)
    ),
    "accel_memory_bandwidth_utilization_ratio": Override("accel.memory.bandwidth.utilization"),
    "accel_clock_hertz": Override("accel.clock.speed"),
    "accel_clock_max_hertz": Override("accel.clock.speed.limit"),
    "accel_fan_speed_ratio": Override("accel.fan.speed_ratio"),
    "accel_pcie_tx_bytes_per_second": Override(
        "accel.pcie.throughput",
        constants=(("network.io.direction", "transmit"),),
        description=_PCIE,
    ),
    "accel_pcie_rx_bytes_per_second": Override(
        "accel.pcie.throughput",
        constants=(("network.io.direction", "receive"),),
        description=_PCIE,
    ),
    "accel_pcie_replays_total": Override("accel.pcie.replays", unit="{replay}"),
    "accel_pcie_link_width": Override("accel.pcie.link.width", unit="{lane}"),
    "accel_pcie_link_max_generation": Override("accel.pcie.link.generation.limit"),
    "accel_pcie_link_max_width": Override("accel.pcie.link.width.limit", unit="{lane}"),
    "accel_clock_violation_seconds_total": Override("accel.clock.violation.time"),
    "accel_ecc_errors_total": Override("accel.ecc.errors", unit="{error}"),
    "accel_processes": Override("accel.processes", unit="{process}"),
    "accel_process_memory_bytes": Override("accel.process.memory.usage"),
    "accel_device_events_total": Override("accel.device.events", unit="{event}"),
}

OVERRIDES: Mapping[str, Override] = MappingProxyType({**_NAMED, **_SEMCONV})

# What the unit-less count families count (UCUM annotations), where no override names them.
COUNTS: Mapping[str, str] = MappingProxyType(
    {
        "accel_xid_errors_total": "{error}",
        "accel_nvml_field_errors_total": "{error}",
        "accel_nvlink_errors_total": "{error}",
        "accel_nvlink_device_errors_total": "{error}",
        "accel_nvlink_links_up": "{link}",
        "accel_amd_xgmi_links_up": "{link}",
        "accel_intel_fabric_ports_up": "{port}",
        "accel_gaudi_nic_ports_up": "{port}",
        "accel_exporter_series": "{sample}",
        "accel_amd_ecc_correctable_errors_total": "{error}",
        "accel_amd_ecc_uncorrectable_errors_total": "{error}",
        "accel_amd_ecc_deferred_errors_total": "{error}",
        "accel_amd_violation_residency_total": "{sample}",
        "accel_amd_violation_samples_total": "{sample}",
        "accel_amd_pcie_recoveries_total": "{recovery}",
        "accel_amd_pcie_nak_sent_total": "{nak}",
        "accel_amd_pcie_nak_received_total": "{nak}",
        "accel_amd_pcie_replay_rollovers_total": "{rollover}",
        "accel_amd_pcie_other_end_recoveries_total": "{recovery}",
        "accel_amd_afid_errors_total": "{error}",
        "accel_amd_cper_records_skipped_total": "{record}",
        "accel_amd_field_errors_total": "{error}",
        "accel_amd_bad_pages": "{page}",
        "accel_amd_bad_page_threshold": "{page}",
        "accel_amd_process_compute_units": "{compute_unit}",
        "accel_intel_ras_correctable_errors_total": "{error}",
        "accel_intel_ras_uncorrectable_errors_total": "{error}",
        "accel_gaudi_replaced_rows": "{row}",
        "accel_gaudi_nic_statistic_total": "{count}",
        "accel_gaudi_nic_device_statistic_total": "{count}",
        "accel_retired_pages": "{page}",
        "accel_retired_pages_pending": "{page}",
        "accel_remapped_rows": "{row}",
        "accel_remapped_rows_pending": "{row}",
        "accel_workload_attribution_errors_total": "{error}",
        "accel_process_checkpoint_query_errors_total": "{error}",
        "accel_ccl_job_nodes": "{node}",
        "accel_ccl_job_processes": "{process}",
        "accel_ccl_job_gpus": "{gpu}",
        "accel_ccl_job_missing_processes": "{process}",
        "accel_ccl_job_dead_processes": "{process}",
        "accel_ccl_communicators": "{communicator}",
        "accel_ccl_comm_ranks": "{rank}",
        "accel_ccl_comm_missing_ranks": "{rank}",
        "accel_ccl_comm_op_skew": "{operation}",
        "accel_ccl_rank_collective_ops_total": "{operation}",
        "accel_ccl_ras_timeouts_total": "{timeout}",
        "accel_ccl_job_state_transitions_total": "{transition}",
        "accel_ccl_ras_events_total": "{event}",
        "accel_ccl_inspector_files": "{file}",
        "accel_ccl_inspector_lines_total": "{line}",
        "accel_ccl_inspector_file_restarts_total": "{restart}",
        "accel_ccl_inspector_incomplete_groups_total": "{group}",
        "accel_neuron_runtimes": "{runtime}",
        "accel_neuron_execution_status_total": "{execution}",
        "accel_neuron_execution_errors_total": "{error}",
    }
)


@dataclass(frozen=True)
class OtelMetric:
    """How one catalog family is exported over OTLP."""

    row: MetricSpec
    name: str
    instrument: Instrument
    unit: str
    # One attribute key per catalog label, in label order.
    keys: tuple[str, ...]
    constants: tuple[tuple[str, str], ...]
    semconv: bool
    description: str

    def attributes(self, labels: Iterable[str]) -> dict[str, str]:
        """The data point attributes for one reading's label values."""
        out = dict(zip(self.keys, labels, strict=True))
        out.update(self.constants)
        return out

    def labels(self, attributes: Mapping[str, object]) -> tuple[str, ...] | None:
        """The label values of a data point of this family, or None if it is another's."""
        if any(attributes.get(key) != value for key, value in self.constants):
            return None
        if set(attributes) != set(self.keys) | {key for key, _ in self.constants}:
            return None
        return tuple(str(attributes[key]) for key in self.keys)


def derive_name(row: MetricSpec) -> str:
    """``accel_exporter_source_poll_duration_seconds`` -> ``accel.exporter.source.poll.duration``.

    The type suffix (``_total``) and the unit suffix go (OTLP carries both as
    fields); every underscore becomes a namespace dot.
    """
    base = row.family_name
    if row.unit and base.endswith("_" + row.unit):
        base = base[: -len(row.unit) - 1]
    return base.replace("_", ".")


def mapping(row: MetricSpec, overrides: Mapping[str, Override] = OVERRIDES) -> OtelMetric:
    """The OTLP mapping of one catalog row."""
    override = overrides.get(row.name)
    renames = dict(ATTRIBUTES)
    if override is not None:
        renames.update(override.attributes)
    name = override.name if override else (row.otel_name or derive_name(row))
    instrument = (override.instrument if override else None) or _BY_KIND[row.kind]
    unit = (override.unit if override else None) or COUNTS.get(row.name) or row.ucum_unit
    return OtelMetric(
        row=row,
        name=name,
        instrument=instrument,
        unit=unit,
        keys=tuple(renames.get(label, label) for label in row.labels),
        constants=override.constants if override else (),
        semconv=bool(override and override.semconv),
        description=(override.description if override else "") or row.help,
    )


def group(metrics: Iterable[OtelMetric]) -> dict[str, tuple[OtelMetric, ...]]:
    """Mappings by OTel instrument name, in catalog order."""
    out: dict[str, list[OtelMetric]] = {}
    for metric in metrics:
        out.setdefault(metric.name, []).append(metric)
    return {name: tuple(items) for name, items in out.items()}


def problems(
    metrics: Mapping[str, OtelMetric], overrides: Mapping[str, Override] = OVERRIDES
) -> list[str]:
    """Every rule the mapping breaks (empty when valid)."""
    out: list[str] = []
    out.extend(
        f"override for {name}: not in the catalog" for name in overrides if name not in metrics
    )
    for name, members in group(metrics.values()).items():
        first = members[0]
        if not _INSTRUMENT_NAME.match(name):
            out.append(f"{name}: not a valid OpenTelemetry instrument name")
        for m in members:
            if not _UNIT.match(m.unit):
                out.append(f"{m.row.name}: unit {m.unit!r} is not a UCUM unit string")
            keys = list(m.keys) + [key for key, _ in m.constants]
            if len(set(keys)) != len(keys):
                out.append(f"{m.row.name}: attribute keys collide: {keys}")
            if name.startswith("hw.") and "hw.id" not in keys:
                out.append(f"{m.row.name}: hardware conventions require hw.id")
            if (m.row.kind is Kind.HISTOGRAM) != (m.instrument is Instrument.HISTOGRAM):
                out.append(f"{m.row.name}: histogram rows must stay histograms")
        if len(members) == 1:
            continue
        shapes = {
            (m.instrument, m.unit, frozenset(m.keys) | {k for k, _ in m.constants}) for m in members
        }
        if len(shapes) != 1:
            out.append(f"{name}: merged families disagree on instrument, unit or attribute keys")
        if len({m.description for m in members}) != 1:
            out.append(f"{name}: merged families need one shared description")
        tags = [m.constants for m in members]
        if not all(tags) or len(set(tags)) != len(tags):
            out.append(f"{name}: merged families need distinct constant attributes")
        if first.row.kind is Kind.HISTOGRAM:
            out.append(f"{name}: histogram families cannot be merged")
    return out


def build(
    catalog: Mapping[str, MetricSpec] = CATALOG, overrides: Mapping[str, Override] = OVERRIDES
) -> Mapping[str, OtelMetric]:
    """The mapping of every row; ValueError listing every broken rule."""
    metrics = {name: mapping(row, overrides) for name, row in catalog.items()}
    found = problems(metrics, overrides)
    if found:
        raise ValueError("OTel mapping: " + "; ".join(found))
    return MappingProxyType(metrics)


METRICS: Mapping[str, OtelMetric] = build()
INSTRUMENTS: Mapping[str, tuple[OtelMetric, ...]] = MappingProxyType(group(METRICS.values()))


def instruments(catalog: Mapping[str, MetricSpec]) -> Mapping[str, tuple[OtelMetric, ...]]:
    """The instruments of ``catalog`` (a store's, with configured labels): INSTRUMENTS or new."""
    if catalog is CATALOG:
        return INSTRUMENTS
    return MappingProxyType(group(build(catalog).values()))
