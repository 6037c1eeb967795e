"""AMD device-metrics-exporter 1.5's ``gpu_*`` and ``pcie_*`` series, from our readings of a poll.

The fields are those of its documented list (docs/configuration/metricslist.md,
tag v1.5.1) that its four Grafana dashboards query or that we read, under its
names and units (VRAM MB, energy uJ, power W, activity percent, PCIe speed
GT/s, PCIe bandwidth Mb/s); every one is a gauge there, and so here. The labels
are its default (mandatory) ones plus those its dashboards route on:
``gpu_id``, ``gpu_uuid``, ``serial_number``, ``card_model`` (the board part
number, ``102-G30211-00``), ``card_series``, ``card_vendor``, ``vbios_version``,
``driver_version``, ``gpu_partition_id``, ``gpu_compute_partition_type``,
``gpu_memory_partition_type``, ``hostname``, ``cluster_name`` (configured), and
``pod``, ``namespace``, ``container``, ``job_id``, ``job_user``,
``job_partition``.

Two rules keep every series within :data:`LABEL_LIMIT` labels (issue 27) and
change nothing a query sees. A label whose value is empty is left out: AMD's
exporter writes ``pod=""`` on an unattributed device, but Prometheus stores an
empty label as no label at all, so ``pod!=""`` and ``by (pod)`` match the same
series either way. A series that would still carry more (a device held by a pod
and a Slurm job, with ``cluster_name`` set, on a per-clock family) leaves out
labels of :data:`SPARE`, in that order: those AMD's dashboards read least,
and never a label they select, group or join on.
docs/migrating.md lists the fields we do not serve and why.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from exporter.family_names import (
    ACCEL_AMD_BOARD_INFO,
    ACCEL_AMD_ECC_CORRECTABLE_ERRORS_TOTAL,
    ACCEL_AMD_ECC_DEFERRED_ERRORS_TOTAL,
    ACCEL_AMD_ECC_UNCORRECTABLE_ERRORS_TOTAL,
    ACCEL_AMD_GTT_TOTAL_BYTES,
    ACCEL_AMD_GTT_USED_BYTES,
    ACCEL_AMD_PARTITION_ID,
    ACCEL_AMD_PCIE_BANDWIDTH_BYTES_PER_SECOND,
    ACCEL_AMD_PCIE_NAK_RECEIVED_TOTAL,
    ACCEL_AMD_PCIE_NAK_SENT_TOTAL,
    ACCEL_AMD_PCIE_RECOVERIES_TOTAL,
    ACCEL_AMD_PCIE_REPLAY_ROLLOVERS_TOTAL,
    ACCEL_AMD_VIOLATION_RESIDENCY_TOTAL,
    ACCEL_AMD_VIOLATION_SAMPLES_TOTAL,
    ACCEL_AMD_VISIBLE_VRAM_TOTAL_BYTES,
    ACCEL_AMD_VISIBLE_VRAM_USED_BYTES,
    ACCEL_AMD_XCP_UTILIZATION_RATIO,
    ACCEL_AMD_XGMI_READ_BYTES_TOTAL,
    ACCEL_AMD_XGMI_WRITE_BYTES_TOTAL,
    ACCEL_CLOCK_HERTZ,
    ACCEL_CLOCK_MAX_HERTZ,
    ACCEL_DEVICE_UP,
    ACCEL_DEVICES,
    ACCEL_ECC_ERRORS_TOTAL,
    ACCEL_ENERGY_JOULES_TOTAL,
    ACCEL_MEMORY_BANDWIDTH_UTILIZATION_RATIO,
    ACCEL_MEMORY_FREE_BYTES,
    ACCEL_MEMORY_TOTAL_BYTES,
    ACCEL_MEMORY_USED_BYTES,
    ACCEL_PCIE_LINK_GENERATION,
    ACCEL_PCIE_LINK_MAX_GENERATION,
    ACCEL_PCIE_REPLAYS_TOTAL,
    ACCEL_POWER_WATTS,
    ACCEL_TEMPERATURE_CELSIUS,
    ACCEL_UTILIZATION_RATIO,
)
from exporter.outputs.compat.family import Family
from exporter.outputs.compat.view import Device, Readings, devices
from exporter.store import View
from exporter.verdict import OK

MB = float(1 << 20)
PCIE_GTS = {1: 2.5, 2: 5.0, 3: 8.0, 4: 16.0, 5: 32.0, 6: 64.0}


def _percent(ratio: float) -> float:
    # Our ratios are percents / 100: undone without binary noise (7.000000000000001).
    return round(ratio * 100, 9)


def _mb(size: float) -> float:
    return size / MB


@dataclass(frozen=True)
class Field:
    """One device-metrics-exporter field served from one of our families."""

    name: str
    help: str
    source: str
    dims: tuple[str, ...] = ()
    scale: Callable[[float], float] = float
    # On a partition other than the first, AMD's exporter reports 0 for a physical
    # quantity that sums over GPUs (power: ZERO) and leaves out the others (DROP), so
    # that a node's sums count each physical GPU once (metricslist.md, per field).
    secondary: str = "keep"


KEEP, ZERO, DROP = "keep", "zero", "drop"

# At most this many labels on one series: with Prometheus' job and instance (and the
# name) it stays far below Mimir's default of 30, the limit dcgm-exporter #585 hit.
LABEL_LIMIT = 15
# What a series over the limit gives up, first to last, by what AMD's four dashboards
# read: job_partition and job_user no query or panel; the partition types only columns
# the GPU dashboard's error table hides; the descriptive labels its variables read with
# label_values over any series of the GPU, and the per-device series keep them in every
# case (19 labels less the first four). Without all of them a series keeps gpu_id,
# gpu_uuid, card_model, gpu_partition_id, hostname, cluster_name, pod, namespace,
# container, job_id and two index labels: 12, so the limit always holds.
SPARE = (
    "job_partition",
    "job_user",
    "gpu_memory_partition_type",
    "gpu_compute_partition_type",
    "vbios_version",
    "card_vendor",
    "driver_version",
    "card_series",
    "serial_number",
)


FIELDS = (
    Field("gpu_package_power", "current socket power in Watts", ACCEL_POWER_WATTS,
          secondary=ZERO),
    Field("gpu_power_usage", "GPU power usage in Watts", ACCEL_POWER_WATTS, secondary=ZERO),
    Field("gpu_edge_temperature", "edge temperature value in Celsius",
          ACCEL_TEMPERATURE_CELSIUS, ("edge",), secondary=DROP),
    Field("gpu_junction_temperature", "hotspot (aka junction) temperature value in Celsius",
          ACCEL_TEMPERATURE_CELSIUS, ("hotspot",), secondary=DROP),
    Field("gpu_memory_temperature", "memory temperature value in Celsius",
          ACCEL_TEMPERATURE_CELSIUS, ("memory",), secondary=DROP),
    Field("gpu_gfx_activity", "graphics engine usage percentage (0 - 100)",
          ACCEL_UTILIZATION_RATIO, scale=_percent),
    Field("gpu_umc_activity", "memory engine usage percentage (0 - 100)",
          ACCEL_MEMORY_BANDWIDTH_UTILIZATION_RATIO, scale=_percent),
    Field("pcie_speed", "current PCIe speed capable in GT/s", ACCEL_PCIE_LINK_GENERATION,
          scale=lambda gen: PCIE_GTS.get(int(gen), 0.0), secondary=DROP),
    Field("pcie_max_speed", "maximum capable PCIe speed in GT/s",
          ACCEL_PCIE_LINK_MAX_GENERATION, scale=lambda gen: PCIE_GTS.get(int(gen), 0.0),
          secondary=DROP),
    Field("pcie_bandwidth", "current instantaneous bandwidth usage in Mb/s",
          ACCEL_AMD_PCIE_BANDWIDTH_BYTES_PER_SECOND, scale=lambda bps: bps * 8 / 1e6,
          secondary=DROP),
    Field("gpu_energy_consumed", "accumulated energy consumed by the GPU in Micro Joules (uJ)",
          ACCEL_ENERGY_JOULES_TOTAL, scale=lambda j: j * 1e6, secondary=DROP),
    Field("pcie_replay_count", "total number of PCIe replays", ACCEL_PCIE_REPLAYS_TOTAL,
          secondary=DROP),
    Field("pcie_recovery_count", "total number of PCIe link recoveries",
          ACCEL_AMD_PCIE_RECOVERIES_TOTAL, secondary=DROP),
    Field("pcie_replay_rollover_count", "PCIe replay accumulated count",
          ACCEL_AMD_PCIE_REPLAY_ROLLOVERS_TOTAL, secondary=DROP),
    Field("pcie_nack_sent_count", "PCIe NACK sent accumulated count",
          ACCEL_AMD_PCIE_NAK_SENT_TOTAL, secondary=DROP),
    Field("pcie_nack_received_count", "PCIe NACK received accumulated count",
          ACCEL_AMD_PCIE_NAK_RECEIVED_TOTAL, secondary=DROP),
    Field("gpu_total_vram", "total VRAM available in MB", ACCEL_MEMORY_TOTAL_BYTES,
          scale=_mb),
    Field("gpu_used_vram", "total VRAM memory used in MB", ACCEL_MEMORY_USED_BYTES,
          scale=_mb),
    Field("gpu_free_vram", "total VRAM memory free in MB", ACCEL_MEMORY_FREE_BYTES,
          scale=_mb),
    Field("gpu_total_visible_vram", "total available visible VRAM memory in MB",
          ACCEL_AMD_VISIBLE_VRAM_TOTAL_BYTES, scale=_mb, secondary=ZERO),
    Field("gpu_used_visible_vram", "used visible VRAM memory in MB",
          ACCEL_AMD_VISIBLE_VRAM_USED_BYTES, scale=_mb, secondary=ZERO),
    Field("gpu_total_gtt", "total GTT memory in MB", ACCEL_AMD_GTT_TOTAL_BYTES, scale=_mb,
          secondary=ZERO),
    Field("gpu_used_gtt", "current GTT memory usage in MB", ACCEL_AMD_GTT_USED_BYTES,
          scale=_mb, secondary=ZERO),
    Field("gpu_ecc_correct_total", "total correctable ECC error count",
          ACCEL_ECC_ERRORS_TOTAL, ("corrected",), secondary=DROP),
    Field("gpu_ecc_uncorrect_total", "total uncorrectable ECC error count",
          ACCEL_ECC_ERRORS_TOTAL, ("uncorrected",), secondary=DROP),
    Field("gpu_ecc_deferred_total", "total deferred ECC error count",
          ACCEL_ECC_ERRORS_TOTAL, ("deferred",), secondary=DROP),
    Field("gpu_violation_current_accumulated_counter", "current accumulated violation counter",
          ACCEL_AMD_VIOLATION_SAMPLES_TOTAL, secondary=DROP),
    *(
        Field(f"gpu_violation_{name}_residency_accumulated",
              f"{name} residency accumulated violation counter",
              ACCEL_AMD_VIOLATION_RESIDENCY_TOTAL, (reason, ""), secondary=DROP)
        for name, reason in (
            ("processor_hot", "prochot"),
            ("ppt", "ppt"),
            ("socket_thermal", "socket_thermal"),
            ("vr_thermal", "vr_thermal"),
            ("hbm_thermal", "hbm_thermal"),
        )
    ),
)  # fmt: skip

# Our RAS block name -> AMD's field suffix.
BLOCKS = {
    **{b: b for b in ("sdma", "gfx", "mmhub", "athub", "hdp", "xgmi_wafl", "df", "smn", "sem")},
    **{b: b for b in ("mp0", "mp1", "fuse", "umc", "mca", "vcn", "jpeg", "ih", "mpio")},
    "pcie_bif": "bif",
}
ECC_KINDS = (
    ("correct", ACCEL_AMD_ECC_CORRECTABLE_ERRORS_TOTAL, "correctable"),
    ("uncorrect", ACCEL_AMD_ECC_UNCORRECTABLE_ERRORS_TOTAL, "uncorrectable"),
    ("deferred", ACCEL_AMD_ECC_DEFERRED_ERRORS_TOTAL, "deferred"),
)
XGMI = (
    (
        "gpu_xgmi_link_rx",
        ACCEL_AMD_XGMI_READ_BYTES_TOTAL,
        "accumulated XGMI link data read in KB",
    ),
    (
        "gpu_xgmi_link_tx",
        ACCEL_AMD_XGMI_WRITE_BYTES_TOTAL,
        "accumulated XGMI link data write in KB",
    ),
)
# Our clock domain -> AMD's clock_type (gpuagent's GPU_CLOCK_TYPE_*, lower case).
CLOCK_TYPES = {
    "graphics": "system",
    "memory": "memory",
    "data_fabric": "data",
    "soc": "soc",
    "video": "video",
    "decode": "video",
}


def _labels(dev: Device, host: str, cluster: str, part: str) -> list[tuple[str, str]]:
    info, job = dev.info, dev.workload
    compute = info.get("compute_partition", "").lower()
    return [
        ("gpu_id", dev.index),
        ("gpu_uuid", dev.uuid),
        ("serial_number", info.get("serial", "")),
        ("card_model", part),
        ("card_series", info.get("model", "")),
        ("card_vendor", "AMD"),
        ("vbios_version", info.get("vbios", "")),
        ("driver_version", info.get("driver_version", "")),
        ("gpu_partition_id", ""),
        ("gpu_compute_partition_type", compute),
        ("gpu_memory_partition_type", info.get("memory_partition", "").lower()),
        ("hostname", host),
        ("cluster_name", cluster),
        ("pod", job.pod),
        ("namespace", job.namespace),
        ("container", job.container),
        ("job_id", job.job_id),
        ("job_user", job.job_user),
        ("job_partition", job.job_partition),
    ]


def fit(labels: list[tuple[str, str]], spare: tuple[str, ...] = SPARE) -> list[tuple[str, str]]:
    """``labels`` without empty values, and within :data:`LABEL_LIMIT` (see the module doc)."""
    kept = [(k, v) for k, v in labels if v]
    names = iter(spare)
    while len(kept) > LABEL_LIMIT:
        name = next(names)
        kept = [(k, v) for k, v in kept if k != name]
    return kept


@dataclass(frozen=True)
class Selection:
    """What a user's config.json selects (compat.amd_fields): fields, labels, names.

    The default (no file) is every field we serve, with the labels of the module doc.
    """

    # GPUMetricField names (upper case); () is every field.
    fields: tuple[str, ...] = ()
    # Labels written (lower case); None: every label of the module doc.
    labels: tuple[str, ...] | None = None
    # Constant labels on every series (CustomLabels), lower case.
    custom: tuple[tuple[str, str], ...] = ()
    prefix: str = ""


class _Families(dict[str, Family]):
    """device-metrics-exporter's families by name, each sample's labels fitted."""

    def __init__(self, selection: Selection) -> None:
        super().__init__()
        self._wanted = frozenset(selection.fields) or None
        self._labels = None if selection.labels is None else frozenset(selection.labels)
        self._custom = list(selection.custom)
        custom = {k for k, _ in selection.custom}
        # Custom labels replace a value of ours of the same name (CLUSTER_NAME), and go
        # after SPARE when a series is over the limit, the last listed first.
        self._replaced = custom
        self._spare = (*SPARE, *reversed([k for k, _ in selection.custom]))
        self._prefix = selection.prefix

    def add(self, name: str, doc: str, labels: list[tuple[str, str]], value: float) -> None:
        if self._wanted is not None and name.upper() not in self._wanted:
            return
        family = self.get(name)
        if family is None:
            family = self[name] = Family(self._prefix + name, "gauge", doc)
        if self._labels is not None or self._custom:
            allowed = self._labels
            labels = [
                (k, v)
                for k, v in labels
                if k not in self._replaced
                and (allowed is None or k in allowed or k == "cluster_name" or _indexed_label(k))
            ] + self._custom
        family.add(fit(labels, self._spare), value)


def _indexed_label(name: str) -> bool:
    # A field's own labels (hbm_index, clock_type, ...) are not among AMD's selectable ones.
    return name.endswith(("_index", "_type")) and not name.startswith("gpu_")


def build(view: View, host: str, cluster: str, selection: Selection | None = None) -> list[Family]:
    """device-metrics-exporter's families for every AMD device in ``view``."""
    gpus = devices(view, "amd")
    if not gpus:
        return []
    readings = Readings(view)
    verdicts = view.health()
    families = _Families(selection or Selection())
    counted = [r for r in view.readings(ACCEL_DEVICES) if r.labels == ("amd",)]
    if counted:
        node = {"hostname": host, "cluster_name": cluster}
        labels = [(k, node.get(k, "")) for k, _ in _labels(gpus[0], host, cluster, "")]
        families.add(
            "gpu_nodes_total",
            "number of GPU nodes on the machine",
            labels,
            float(counted[0].value),  # type: ignore[arg-type]
        )
    for dev in gpus:
        if readings.one(ACCEL_DEVICE_UP, dev.uuid) != 1:
            continue
        part = next((r.labels[2] for r in readings.of(ACCEL_AMD_BOARD_INFO, dev.uuid)), "")
        labels = _labels(dev, host, cluster, part or dev.info.get("model", ""))
        partition = readings.one(ACCEL_AMD_PARTITION_ID, dev.uuid)
        labels[8] = ("gpu_partition_id", str(int(partition)) if partition is not None else "0")
        # A partition other than the first speaks for no physical quantity.
        secondary = partition is not None and partition > 0
        verdict = verdicts.get(dev.uuid)
        if verdict is not None and verdict.known:
            # 1 while ok, 0 in any other state; none while the exporter cannot vouch.
            flag = 1.0 if verdict.state == OK else 0.0
            families.add("gpu_health", "computed GPU health flag", labels, flag)
        for f in FIELDS:
            value = readings.one(f.source, dev.uuid, *f.dims)
            if value is None or (secondary and f.secondary == DROP):
                continue
            scaled = 0.0 if secondary and f.secondary == ZERO else f.scale(value)
            families.add(f.name, f.help, labels, scaled)
        total = readings.one(ACCEL_AMD_VISIBLE_VRAM_TOTAL_BYTES, dev.uuid)
        used = readings.one(ACCEL_AMD_VISIBLE_VRAM_USED_BYTES, dev.uuid)
        if total is not None and used is not None:
            free = 0.0 if secondary else _mb(max(total - used, 0.0))
            families.add("gpu_free_visible_vram", "free visible VRAM memory in MB", labels, free)
        total = readings.one(ACCEL_AMD_GTT_TOTAL_BYTES, dev.uuid)
        used = readings.one(ACCEL_AMD_GTT_USED_BYTES, dev.uuid)
        if total is not None and used is not None:
            free = 0.0 if secondary else _mb(max(total - used, 0.0))
            families.add("gpu_free_gtt", "free GTT memory available in MB", labels, free)
        if secondary:
            _per_partition(families, readings, dev, labels)
            continue
        _indexed(families, readings, dev, labels)
    return list(families.values())


def _per_partition(
    families: _Families, readings: Readings, dev: Device, labels: list[tuple[str, str]]
) -> None:
    """What a partition other than the first has of its own: its XCP's busy share."""
    for r in readings.of(ACCEL_AMD_XCP_UTILIZATION_RATIO, dev.uuid):
        families.add(
            "gpu_gfx_busy_instantaneous",
            "GFX busy instantaneous activity per accelerator compute processor",
            [*labels, ("xcc_index", r.labels[2])],
            _percent(float(r.value)),  # type: ignore[arg-type]
        )


def _indexed(
    families: _Families, readings: Readings, dev: Device, labels: list[tuple[str, str]]
) -> None:
    """The fields with an index label (HBM, XCC, clock, XGMI link) and per-block ECC."""
    for r in readings.of(ACCEL_TEMPERATURE_CELSIUS, dev.uuid):
        sensor = r.labels[2]
        if sensor.startswith("hbm_"):
            families.add(
                "gpu_hbm_temperature",
                "list of hbm temperatures in Celsius",
                [*labels, ("hbm_index", sensor[4:])],
                float(r.value),  # type: ignore[arg-type]
            )
    _per_partition(families, readings, dev, labels)
    for position, r in enumerate(readings.of(ACCEL_CLOCK_HERTZ, dev.uuid)):
        kind = CLOCK_TYPES.get(r.labels[2])
        if kind is None:
            continue
        clock = [*labels, ("clock_index", str(position)), ("clock_type", kind)]
        families.add(
            "gpu_clock",
            "clock measure of the GPU in Mhz",
            clock,
            float(r.value) / 1e6,  # type: ignore[arg-type]
        )
        top = readings.one(ACCEL_CLOCK_MAX_HERTZ, dev.uuid, r.labels[2])
        if top is not None:
            families.add(
                "gpu_max_clock", "maximum clock measure of the GPU in Mhz", clock, top / 1e6
            )
    for name, source, doc in XGMI:
        for r in readings.of(source, dev.uuid):
            families.add(
                name,
                doc,
                [*labels, ("link_index", r.labels[2])],
                float(r.value) / 1024,  # type: ignore[arg-type]
            )
    for kind, source, doc in ECC_KINDS:
        for r in readings.of(source, dev.uuid):
            block = BLOCKS.get(r.labels[2])
            if block is not None:
                families.add(
                    f"gpu_ecc_{kind}_{block}",
                    f"{doc} ECC errors in {block.upper()}",
                    labels,
                    float(r.value),  # type: ignore[arg-type]
                )
