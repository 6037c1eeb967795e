"""What nvidia-smi and the exporter must agree on, and how closely.

Each :class:`Field` names nvidia-smi's query field (with the older aliases some
drivers use), the exporter family and labels holding the same quantity, how to
read both, and the tolerance. Static quantities must agree exactly: within one
unit of the last digit nvidia-smi prints (it rounds watts to 0.01 and floors
bytes to MiB). Moving quantities are bracketed: the daemon is scraped before
and after nvidia-smi runs, and nvidia-smi's figure must lie between the two
scrapes' values, widened by the field's tolerance.

Absent is a value too: where nvidia-smi prints ``[N/A]`` or ``[Not Supported]``
the exporter must have no series (it never exports a sentinel), and where
nvidia-smi has a value the exporter must have one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .expo import Samples, find, info, one
from .smi import Cell

MIB = 1048576.0
MHZ = 1e6
PERCENT = 0.01

# accel_clock_throttle_active{reason}: nvidia-smi's names are the exporter's reasons.
_REASONS = (
    "gpu_idle",
    "applications_clocks_setting",
    "sw_power_cap",
    "hw_slowdown",
    "hw_thermal_slowdown",
    "hw_power_brake_slowdown",
    "sw_thermal_slowdown",
    "sync_boost",
)


@dataclass(frozen=True)
class Field:
    """One quantity both sides report.

    ``read``: ``number`` (a numeric cell), ``flag`` (Active/Enabled/Yes = 1),
    ``pstate`` (P0 = 0), ``label`` (a label of the ``family`` info series),
    ``presence`` (1 when the exporter has any series of ``family`` for the GPU:
    ECC counters exist exactly when ECC is on), ``devices`` (the GPU count).
    ``scale``: exporter units per nvidia-smi unit. ``tol_abs``/``tol_rel``: in
    nvidia-smi's units, for moving quantities only.
    """

    names: tuple[str, ...]
    family: str
    labels: tuple[tuple[str, str], ...] = ()
    read: str = "number"
    label: str = ""
    scale: float = 1.0
    moving: bool = False
    tol_abs: float = 0.0
    tol_rel: float = 0.0

    @property
    def key(self) -> str:
        """The report's name for it: nvidia-smi's newest name."""
        return self.names[0]

    def tolerance(self) -> str:
        """The tolerance in words, for the report."""
        if self.read == "label":
            return "exact (text)"
        if not self.moving:
            return "exact (to nvidia-smi's last printed digit)"
        parts = []
        if self.tol_abs:
            parts.append(f"±{self.tol_abs:g}")
        if self.tol_rel:
            parts.append(f"±{self.tol_rel:.0%}")
        widen = " or ".join(parts) + " (the larger)" if len(parts) > 1 else "".join(parts)
        return "between the two scrapes" + (f", widened by {widen}" if widen else "")


def _info(label: str, *names: str) -> Field:
    return Field(names, "accel_device_info", read="label", label=label)


FIELDS: tuple[Field, ...] = (
    # Identity: static, exact.
    _info("device", "index"),
    _info("model", "name"),
    _info("serial", "serial"),
    _info("pci_bus_id", "pci.bus_id", "gpu_bus_id"),
    _info("vbios", "vbios_version"),
    _info("driver_version", "driver_version"),
    _info("mig_mode", "mig.mode.current"),
    Field(("count",), "accel_devices", (("vendor", "nvidia"),), read="devices"),
    # Static quantities.
    Field(("memory.total",), "accel_memory_total_bytes", scale=MIB),
    Field(("memory.reserved",), "accel_memory_reserved_bytes", scale=MIB),
    Field(("enforced.power.limit", "power.limit"), "accel_power_limit_watts"),
    Field(
        ("clocks.max.graphics", "clocks.max.gr"),
        "accel_clock_max_hertz",
        (("clock", "graphics"),),
        scale=MHZ,
    ),
    Field(("clocks.max.sm",), "accel_clock_max_hertz", (("clock", "sm"),), scale=MHZ),
    Field(
        ("clocks.max.memory", "clocks.max.mem"),
        "accel_clock_max_hertz",
        (("clock", "memory"),),
        scale=MHZ,
    ),
    Field(("pcie.link.gen.max",), "accel_pcie_link_max_generation"),
    Field(("pcie.link.width.max",), "accel_pcie_link_max_width"),
    Field(("ecc.mode.current",), "accel_ecc_errors_total", read="presence"),
    # Error counts: they only grow, and exactly (the scrapes bracket them).
    *(
        Field(
            (f"ecc.errors.{kind}.{counter}.total",),
            "accel_ecc_errors_total",
            (("counter", counter), ("type", kind)),
            moving=True,
        )
        for kind in ("corrected", "uncorrected")
        for counter in ("volatile", "aggregate")
    ),
    Field(
        ("retired_pages.single_bit_ecc.count", "retired_pages.sbe"),
        "accel_retired_pages",
        (("cause", "multiple_single_bit_ecc"),),
        moving=True,
    ),
    Field(
        ("retired_pages.double_bit.count", "retired_pages.dbe"),
        "accel_retired_pages",
        (("cause", "double_bit_ecc"),),
        moving=True,
    ),
    Field(("retired_pages.pending",), "accel_retired_pages_pending", read="flag", moving=True),
    Field(
        ("remapped_rows.correctable",), "accel_remapped_rows", (("type", "corrected"),), moving=True
    ),
    Field(
        ("remapped_rows.uncorrectable",),
        "accel_remapped_rows",
        (("type", "uncorrected"),),
        moving=True,
    ),
    Field(("remapped_rows.pending",), "accel_remapped_rows_pending", read="flag", moving=True),
    Field(("remapped_rows.failure",), "accel_remapped_rows_failure", read="flag", moving=True),
    # Moving quantities.
    Field(("memory.used",), "accel_memory_used_bytes", scale=MIB, moving=True, tol_abs=4),
    Field(("memory.free",), "accel_memory_free_bytes", scale=MIB, moving=True, tol_abs=4),
    Field(
        ("temperature.gpu",),
        "accel_temperature_celsius",
        (("sensor", "gpu"),),
        moving=True,
        tol_abs=2,
    ),
    Field(
        ("temperature.memory",),
        "accel_temperature_celsius",
        (("sensor", "memory"),),
        moving=True,
        tol_abs=2,
    ),
    Field(("power.draw",), "accel_power_watts", moving=True, tol_abs=15, tol_rel=0.10),
    Field(("utilization.gpu",), "accel_utilization_ratio", scale=PERCENT, moving=True, tol_abs=15),
    Field(
        ("utilization.memory",),
        "accel_memory_bandwidth_utilization_ratio",
        scale=PERCENT,
        moving=True,
        tol_abs=15,
    ),
    Field(
        ("utilization.encoder",),
        "accel_encoder_utilization_ratio",
        scale=PERCENT,
        moving=True,
        tol_abs=15,
    ),
    Field(
        ("utilization.decoder",),
        "accel_decoder_utilization_ratio",
        scale=PERCENT,
        moving=True,
        tol_abs=15,
    ),
    Field(
        ("clocks.current.graphics", "clocks.gr"),
        "accel_clock_hertz",
        (("clock", "graphics"),),
        scale=MHZ,
        moving=True,
        tol_abs=50,
        tol_rel=0.05,
    ),
    Field(
        ("clocks.current.sm", "clocks.sm"),
        "accel_clock_hertz",
        (("clock", "sm"),),
        scale=MHZ,
        moving=True,
        tol_abs=50,
        tol_rel=0.05,
    ),
    Field(
        ("clocks.current.memory", "clocks.mem"),
        "accel_clock_hertz",
        (("clock", "memory"),),
        scale=MHZ,
        moving=True,
        tol_abs=50,
        tol_rel=0.05,
    ),
    Field(
        ("clocks.current.video", "clocks.video"),
        "accel_clock_hertz",
        (("clock", "video"),),
        scale=MHZ,
        moving=True,
        tol_abs=50,
        tol_rel=0.05,
    ),
    Field(
        ("fan.speed",),
        "accel_fan_speed_ratio",
        (("fan", "0"),),
        scale=PERCENT,
        moving=True,
        tol_abs=5,
    ),
    Field(("pstate",), "accel_performance_state", read="pstate", moving=True),
    Field(("pcie.link.gen.current",), "accel_pcie_link_generation", moving=True),
    Field(("pcie.link.width.current",), "accel_pcie_link_width", moving=True),
    *(
        Field(
            (f"clocks_event_reasons.{reason}", f"clocks_throttle_reasons.{reason}"),
            "accel_clock_throttle_active",
            (("reason", reason),),
            read="flag",
            moving=True,
        )
        for reason in _REASONS
    ),
)


@dataclass
class Check:
    """One comparison of one field on one GPU (or of the whole node)."""

    name: str
    uuid: str
    verdict: str  # "pass" | "fail" | "skip"
    smi: str = ""
    exporter: list[Any] = field(default_factory=list)
    tolerance: str = ""
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        """For the JSON report."""
        return {
            "name": self.name,
            "uuid": self.uuid,
            "verdict": self.verdict,
            "nvidia_smi": self.smi,
            "exporter": self.exporter,
            "tolerance": self.tolerance,
            "note": self.note,
        }


def choose(fields: Sequence[Field], offered: set[str] | None) -> dict[str, str | None]:
    """For each field's key, the name this nvidia-smi offers (None: none of them).

    ``offered`` None (the help could not be read): the newest name of each.
    """
    out: dict[str, str | None] = {}
    for f in fields:
        if offered is None:
            out[f.key] = f.names[0]
        else:
            out[f.key] = next((n for n in f.names if n in offered), None)
    return out


def exporter_value(f: Field, samples: Samples, uuid: str) -> Any:
    """The exporter's reading of ``f`` for GPU ``uuid`` in nvidia-smi's units; None absent."""
    labels = dict(f.labels)
    if f.read == "label":
        found = info(samples, f.family, uuid=uuid)
        text = None if found is None else found.get(f.label, "")
        return text or None
    if f.read == "presence":
        return 1.0 if find(samples, f.family, uuid=uuid) else 0.0
    if f.read == "devices":
        return one(samples, f.family, **labels)
    value = one(samples, f.family, uuid=uuid, **labels)
    return None if value is None else value / f.scale


def _smi_number(f: Field, c: Cell) -> tuple[float, float]:
    if f.read in ("flag", "presence"):
        return c.flag(), 0.0
    if f.read == "pstate":
        return c.pstate(), 0.0
    return c.number(), c.resolution()


def _same_text(f: Field, a: str, b: str) -> bool:
    if f.label in ("pci_bus_id", "mig_mode"):
        return a.strip().casefold() == b.strip().casefold()
    return a.strip() == b.strip()


def compare(f: Field, c: Cell, seen: Sequence[Any], uuid: str) -> Check:
    """Compare nvidia-smi's cell with the exporter's readings (one per scrape)."""
    check = Check(f.key, uuid, "pass", c.text, list(seen), f.tolerance())
    present = [v is not None for v in seen]
    if not c.present:
        if any(present):
            check.verdict = "fail"
            check.note = f"nvidia-smi says {c.text}; the exporter exports a value"
        else:
            check.note = "absent on both sides"
        return check
    if not all(present):
        check.verdict = "fail"
        check.note = f"the exporter has no {f.family} series"
        return check
    if f.read == "label":
        if not all(_same_text(f, c.text, str(v)) for v in seen):
            check.verdict = "fail"
            check.note = "text differs"
        return check
    try:
        smi, resolution = _smi_number(f, c)
    except ValueError as exc:
        check.verdict = "fail"
        check.note = f"nvidia-smi printed something this kit cannot read: {exc}"
        return check
    values = [float(v) for v in seen]
    if f.moving:
        slack = resolution + max(f.tol_abs, f.tol_rel * abs(smi)) + 1e-9 * max(1.0, abs(smi))
        low, high = min(values) - slack, max(values) + slack
        if not low <= smi <= high:
            check.verdict = "fail"
            check.note = f"outside [{low:g}, {high:g}]"
    elif not all(_exact(smi, v, resolution) for v in values):
        check.verdict = "fail"
        check.note = f"differs by {max(abs(smi - v) for v in values):g}"
    return check


def _exact(smi: float, value: float, resolution: float) -> bool:
    """Equal as far as nvidia-smi's print shows.

    Less than one unit of its last digit apart (it rounds watts, floors MiB);
    exactly equal for flags and P-states.
    """
    if resolution == 0:
        return abs(smi - value) <= 1e-9
    return abs(smi - value) < resolution


def compare_round(
    fields: Sequence[Field],
    names: Mapping[str, str | None],
    rows: Sequence[Mapping[str, Cell]],
    before: Samples,
    after: Samples,
) -> list[Check]:
    """Every field on every GPU nvidia-smi listed, for one scrape-query-scrape round.

    GPUs are matched by UUID; one that either side lacks is a failure.
    """
    checks: list[Check] = []
    smi_uuids = [row["uuid"].text for row in rows if "uuid" in row]
    exported = sorted(
        {labels["uuid"] for labels, _ in find(after, "accel_device_info", vendor="nvidia")}
    )
    for uuid in exported:
        if uuid not in smi_uuids:
            checks.append(
                Check("uuid", uuid, "fail", "", [uuid], "exact", "nvidia-smi does not list it")
            )
    for row in rows:
        uuid = row["uuid"].text
        if uuid not in exported:
            checks.append(Check("uuid", uuid, "fail", uuid, [], "exact", "not exported"))
            continue
        checks.append(Check("uuid", uuid, "pass", uuid, [uuid], "exact"))
        for f in fields:
            name = names.get(f.key)
            if name is None:
                checks.append(
                    Check(
                        f.key,
                        uuid,
                        "skip",
                        note="this nvidia-smi answers none of " + ", ".join(f.names),
                    )
                )
                continue
            seen = [exporter_value(f, s, uuid) for s in (before, after)]
            checks.append(compare(f, row[name], seen, uuid))
    return checks


def combine(rounds: Sequence[Sequence[Check]], fields: Sequence[Field]) -> list[Check]:
    """One check per (field, GPU) over several rounds.

    Exact fields must pass in every round; a moving one passes when it passed in
    most rounds (a clock that steps between a scrape and the query is not a bug,
    one that disagrees every time is). The note says how many rounds passed.
    """
    moving = {f.key for f in fields if f.moving}
    grouped: dict[tuple[str, str], list[Check]] = {}
    for checks in rounds:
        for c in checks:
            grouped.setdefault((c.name, c.uuid), []).append(c)
    out: list[Check] = []
    for (name, _uuid), group in grouped.items():
        passed = sum(c.verdict == "pass" for c in group)
        failed = [c for c in group if c.verdict == "fail"]
        last = failed[-1] if failed else group[-1]
        if all(c.verdict == "skip" for c in group):
            out.append(last)
            continue
        ok = passed * 2 > len(group) if name in moving else not failed
        merged = Check(
            last.name,
            last.uuid,
            "pass" if ok else "fail",
            last.smi,
            last.exporter,
            last.tolerance,
            last.note,
        )
        if len(group) > 1:
            merged.note = f"{passed}/{len(group)} rounds agreed" + (
                f"; last disagreement: {failed[-1].note}" if failed else ""
            )
        out.append(merged)
    return out
