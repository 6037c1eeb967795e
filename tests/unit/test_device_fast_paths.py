"""The device backends' tuned reads against plain reference implementations (issue 23).

Two backends read their busiest values by hand instead of through
``contract.Emitter``:

- NVML's field values (``nvml_device.DeviceReader._field_values``): one
  ``nvmlDeviceGetFieldValues`` request per GPU whose answers are routed by runs
  of entries (``nvml_gpu.FieldPlan``), raw union bits converted only where the
  valueType is not an unsigned integer, failed entries counted and dropped;
- HLML's fast read (``hlml.HlmlBackend._fast``), which appends rows and checks
  each value's all-ones and range inline.

Each is driven here, through the real binding and the fake library, with
device states Hypothesis draws (sentinels, zeros, huge values, NaN, failures,
NVLink layouts that change between polls), and its rows are compared with rows
computed directly from the drawn state by the rules the modules document. One
backend serves every example of a test: starting one per example is slow, and a
backend that carries its plan and energy total from poll to poll is the one the
daemon runs.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from exporter.backend_api.wire import new_rows
from exporter.backends import hlml
from exporter.backends import nvml_support as nv
from exporter.backends.contract import FIELD_ERRORS, Emitter
from exporter.backends.nvml import NvmlBackend
from exporter.backends.nvml_device import FIELD_SPECS
from tests.fakes.hlml import control as hlml_control
from tests.fakes.hlml.control import FakeHlml
from tests.fakes.nvml import control as nvml_control
from tests.fakes.nvml.control import FakeNvml, FieldValue
from tests.helpers.backend_harness import Backends, backends, poll, started, values

# No shrinking: an example drives a real backend through a fake library, and
# shrinking one took minutes (past the suite's timeout). A failure is reported as
# drawn; the assertion's diff names the rows that differ.
SETTINGS = settings(
    max_examples=60,
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# -- NVML field values -------------------------------------------------------------

LINKS = 4  # NVLinks the fake GPU has; each poll draws which are active
U32, U64 = 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF
# Per-entry nvmlReturn a field can answer: absent (not counted) and failed (counted).
CODES = (nvml_control.NOT_SUPPORTED, nv.NO_PERMISSION, nvml_control.UNKNOWN, nv.TIMEOUT)

# The value of each nvmlValueType_t a driver may put in an entry, "not available"
# encodings, zero and the extremes of the member's range included.
MEMBER_VALUES: dict[int, st.SearchStrategy[Any]] = {
    nvml_control.VALUE_DOUBLE: st.one_of(
        st.floats(),
        st.sampled_from([0.0, -1.0, float(U32), math.nan, math.inf, -math.inf, 1.7e308]),
    ),
    nvml_control.VALUE_UINT: st.one_of(st.integers(0, U32), st.sampled_from([0, U32])),
    nvml_control.VALUE_ULONG: st.one_of(st.integers(0, U64), st.sampled_from([0, U32, U64])),
    nvml_control.VALUE_ULL: st.one_of(st.integers(0, U64), st.sampled_from([0, U32, U64])),
    nvml_control.VALUE_SLL: st.one_of(st.integers(-(2**63), 2**63 - 1), st.just(-1)),
    nvml_control.VALUE_SINT: st.one_of(st.integers(-(2**31), 2**31 - 1), st.just(-1)),
    nvml_control.VALUE_USHORT: st.one_of(st.integers(0, 0xFFFF), st.just(0xFFFF)),
}


@st.composite
def entry_values(draw: st.DrawFn) -> tuple[int, Any]:
    kind = draw(st.sampled_from(sorted(MEMBER_VALUES)))
    return kind, draw(MEMBER_VALUES[kind])


@dataclass
class NvmlPoll:
    """One poll's drawn state: links up, every entry's answer, failing field ids."""

    slow: bool
    active: tuple[int, ...]
    answers: dict[tuple[int, int], tuple[int, Any]]  # (field id, scope id) -> (valueType, value)
    failing: dict[int, int]  # field id -> its entries' nvmlReturn


@st.composite
def nvml_polls(draw: st.DrawFn) -> list[NvmlPoll]:
    out = []
    for n in range(draw(st.integers(1, 3))):
        answers = {}
        for fid, (_metric, extra, _scale) in FIELD_SPECS.items():
            for scope in [0] if extra else range(LINKS):
                answers[fid, scope] = draw(entry_values())
        failing = draw(
            st.dictionaries(st.sampled_from(sorted(FIELD_SPECS)), st.sampled_from(CODES))
        )
        active = tuple(link for link in range(LINKS) if draw(st.booleans()))
        # The first poll is slow: the links it learns make an example independent
        # of the one before (which Hypothesis needs to shrink a failure).
        out.append(NvmlPoll(n == 0 or draw(st.booleans()), active, answers, failing))
    return out


def member_number(kind: int, value: Any) -> float | None:
    """The number an entry holds, or None where it is NVML's "not available"."""
    if kind == nvml_control.VALUE_USHORT and value == 0xFFFF:
        return None  # all ones of the member
    if value in (U32, U64, -1) or not math.isfinite(value):
        return None
    return value  # type: ignore[no-any-return]


def expected_fields(state: NvmlPoll, links: tuple[int, ...], uuid: str) -> dict[Any, float]:
    """Every FIELD_SPECS row, link by link, from the drawn state: the plain reference."""
    rows: dict[Any, float] = {}
    for fid, (metric, extra, (mul, per)) in FIELD_SPECS.items():
        for scope, label in [(0, extra)] if extra else [(link, str(link)) for link in links]:
            if fid in state.failing:
                continue
            number = member_number(*state.answers[fid, scope])
            if number is None:
                continue
            scaled = float(number * mul if per == 1 else number / per)
            if math.isfinite(scaled):
                rows[metric, ("0", uuid, label)] = scaled
    return rows


def expected_failures(state: NvmlPoll, links: tuple[int, ...]) -> dict[str, int]:
    """Failed entries of one poll by reason (absent ones are not failures)."""
    out: dict[str, int] = {}
    for fid, code in state.failing.items():
        entries = 1 if FIELD_SPECS[fid][1] else len(links)
        if code in nv.ABSENT or not entries:
            continue
        reason = nv.reason_of(code)
        out[reason] = out.get(reason, 0) + entries
    return out


def field_rows(got: dict[Any, float]) -> dict[Any, float]:
    """The rows of a reply that come from FIELD_SPECS (the memory temperature only)."""
    families = {metric for metric, _extra, _scale in FIELD_SPECS.values()}
    return {
        k: v
        for k, v in got.items()
        if k[0] in families and (k[0] != "accel_temperature_celsius" or k[1][2] == "memory")
    }


def errors_of(got: dict[Any, float]) -> dict[str, float]:
    return {k[1][3]: v for k, v in got.items() if k[0] == FIELD_ERRORS and k[1][2] == "nvml"}


@dataclass
class NvmlRig:
    """One started backend on the shared fake, and what the last polls left behind."""

    fake: FakeNvml
    backend: NvmlBackend
    links: tuple[int, ...] = ()


def answered(**changed: tuple[int, Any]) -> dict[tuple[int, int], tuple[int, Any]]:
    """Every entry an unsigned 0 but ``changed`` (keyed ``f<field id>_<scope id>``)."""
    out = {
        (fid, scope): (nvml_control.VALUE_ULL, 0)
        for fid, (_metric, extra, _scale) in FIELD_SPECS.items()
        for scope in ([0] if extra else range(LINKS))
    }
    for name, answer in changed.items():
        fid, scope = name[1:].split("_")
        out[int(fid), int(scope)] = answer
    return out


@pytest.fixture
def nvml_rig(nvml_shared: FakeNvml) -> Iterator[NvmlRig]:
    nvml_shared.reset(1)
    nvml_shared.device(0).nvlink_count = LINKS
    nvml_shared.device(0).nvlink_active_mask = 0
    made: Backends[NvmlBackend]
    with backends(NvmlBackend, events=False) as made:
        yield NvmlRig(nvml_shared, started(made))
    nvml_shared.set_fields(0, [])
    nvml_shared.clear_rules()


@SETTINGS
@given(polls=nvml_polls())
# Found by this test: a finite double that scaling to bytes made infinite was
# exported, and the worker's reply could not be encoded.
@example(polls=[NvmlPoll(True, (0,), answered(f139_0=(nvml_control.VALUE_DOUBLE, 1.7e305)), {})])
def test_nvml_field_values_equal_the_plain_reference(nvml_rig: NvmlRig, polls: list[NvmlPoll]):
    fake, uuid = nvml_rig.fake, nvml_rig.fake.uuid(0)
    for state in polls:
        fake.device(0).nvlink_active_mask = sum(1 << link for link in state.active)
        fake.set_fields(
            0,
            [
                FieldValue(fid, value, kind, scope)
                for (fid, scope), (kind, value) in state.answers.items()
            ],
        )
        fake.clear_rules()
        for fid, code in state.failing.items():
            fake.add_rule(f"field:{fid}", error=code, device=0)
        # The count before this poll, from the backend itself: an example that failed
        # part-way (Hypothesis goes on with the same backend) leaves no stale baseline.
        before = dict(nvml_rig.backend.gpus[0].errors)
        reply = poll(nvml_rig.backend, slow=state.slow)
        if state.slow:  # the slow read runs first and learns the links the fast one asks
            nvml_rig.links = state.active
        assert reply["devices"][0]["up"]
        got = values(reply)
        assert field_rows(got) == expected_fields(state, nvml_rig.links, uuid)
        want = dict(before)
        for reason, n in expected_failures(state, nvml_rig.links).items():
            want[reason] = want.get(reason, 0) + n
        assert errors_of(got) == want


# -- HLML fast read ----------------------------------------------------------------

GAUDIS = 2
H32, H64 = hlml.U32_NA, hlml.U64_NA
# A 32-bit reading: any value, and the ones at the module's limits.
HLML_U32 = st.one_of(
    st.integers(0, H32),
    st.sampled_from([0, 1, 100, 101, hlml.MAX_CELSIUS, hlml.MAX_CELSIUS + 1, H32]),
    st.sampled_from([hlml.MAX_MHZ, hlml.MAX_MHZ + 1, 600_000]),
)
# A 64-bit one: any value, its all-ones, and the 32-bit all-ones (a real value here).
HLML_U64 = st.one_of(st.integers(0, H64), st.sampled_from([0, 1, H32, H64]))
GIB = 1 << 30
# How the energy counter moves from one poll to the next (see energy_step).
ENERGY_STEPS = st.one_of(
    st.sampled_from(["same", "drop", "jump", "not_available", "zero"]),
    st.integers(1, 100),  # mJ: plausible between two polls however close
)


@dataclass
class GaudiState:
    """One device's drawn fast-read values (the fake's units: %, mW, mJ, °C, MHz, ns)."""

    util: tuple[int, int]
    memory: tuple[int, int, int]  # total, used, free
    power: int
    limit: int
    energy: str | int
    temps: tuple[int, ...]
    served: int  # bit per sensor the fake answers; the rest are NOT_SUPPORTED
    clock: int
    throttle: int
    violations: tuple[int, int]
    pcie: tuple[int, int, int]  # replays, generation, width
    ports_up: int


@st.composite
def gaudi_states(draw: st.DrawFn) -> GaudiState:
    total = draw(st.one_of(HLML_U64, st.just(96 * GIB)))
    used = draw(st.one_of(HLML_U64, st.integers(0, max(total, 0))))
    free = draw(st.one_of(HLML_U64, st.just(max(total - used, 0))))
    return GaudiState(
        util=(draw(HLML_U32), draw(HLML_U32)),
        memory=(total, used, free),
        power=draw(HLML_U32),
        limit=draw(HLML_U32),
        energy=draw(ENERGY_STEPS),
        temps=tuple(draw(HLML_U32) for _ in hlml.SENSORS),
        served=draw(st.integers(0, (1 << len(hlml.SENSORS)) - 1)),
        clock=draw(HLML_U32),
        throttle=draw(HLML_U64),
        violations=(draw(HLML_U64), draw(HLML_U64)),
        pcie=(draw(HLML_U32), draw(HLML_U32), draw(HLML_U32)),
        ports_up=draw(st.integers(0, (1 << hlml_control.PORTS) - 1)),
    )


@dataclass
class GaudiModel:
    """What the reference remembers of a device between polls, as the module documents:
    the sensors not found unsupported since the last slow poll, and the energy total
    (the counter's first value, then its plausible increases only)."""

    sensors: list[tuple[int, str]]
    counter: int
    total: int = -1
    previous: int = -1


def energy_step(counter: int, step: str | int) -> tuple[int, int]:
    """The counter after ``step``, and what the fake reports for it."""
    if step == "not_available":
        return counter, H64
    if step == "zero":  # the driver reloaded
        counter = 0
    elif step == "drop":  # a spurious drop: a new baseline
        counter //= 2
    elif step == "jump":  # 10^9 J between two polls: no card draws that
        counter += 10**12
    elif step != "same":
        counter += int(step)
    return counter, counter


def reference_fast(
    state: GaudiState, model: GaudiModel, energy: int, ports: int, out: Emitter
) -> None:
    """hlml's fast read, value by value through the Emitter, with the module's rules.

    ``out`` drops hlml.SENTINELS, right for a 32-bit value. A 64-bit value is
    "not available" at its own width's all-ones only (hlml._fast's rule): a 64-bit
    0xFFFFFFFF is a reading, so those go through ``wide``.
    """
    wide = Emitter(out.position, out.rows, frozenset({H64}), {})
    out.ratio("accel_utilization_ratio", state.util[0])
    out.ratio("accel_gaudi_memory_utilization_ratio", state.util[1])
    total, used, free = state.memory
    if wide.usable(total) and total > 0 and used <= total:  # used beyond total: no figures
        wide.add("accel_memory_total_bytes", total)
        wide.add("accel_memory_used_bytes", used)
        if free <= total:
            wide.add("accel_memory_free_bytes", free)
    out.scaled("accel_power_watts", state.power, 1, 1000)
    if state.limit:  # 0: no limit set
        out.scaled("accel_power_limit_watts", state.limit, 1, 1000)
    if wide.usable(energy):
        raw, previous = energy, model.previous
        model.previous = raw
        if model.total < 0:
            model.total = raw
        elif previous <= raw <= previous + 100:  # the steps drawn as plausible
            model.total += raw - previous
        wide.add("accel_energy_joules_total", model.total / 1000)
    for sensor, label in list(model.sensors):
        if not state.served & (1 << sensor):
            model.sensors.remove((sensor, label))  # asked again at the next slow poll
        elif state.temps[sensor] <= hlml.MAX_CELSIUS:
            out.add("accel_temperature_celsius", state.temps[sensor], label)
    if 0 < state.clock <= hlml.MAX_MHZ:
        out.scaled("accel_clock_hertz", state.clock, hlml.MHZ, 1, "soc")
    if wide.usable(state.throttle):
        for bit, name in hlml.THROTTLE_REASONS:
            wide.add("accel_clock_throttle_active", 1 if state.throttle & bit else 0, name)
    for (_policy, name), ns in zip(hlml.VIOLATIONS, state.violations, strict=True):
        wide.scaled("accel_clock_violation_seconds_total", ns, 1, hlml.NANO, name)
    for family, value in zip(
        ("accel_pcie_replays_total", "accel_pcie_link_generation", "accel_pcie_link_width"),
        state.pcie,
        strict=True,
    ):
        out.add(family, value)
    for port in range(ports):
        out.add("accel_gaudi_nic_port_up", 1 if state.ports_up >> port & 1 else 0, str(port))


HLML_FAST_FAMILIES = (
    "accel_utilization_ratio",
    "accel_gaudi_memory_utilization_ratio",
    "accel_memory_total_bytes",
    "accel_memory_used_bytes",
    "accel_memory_free_bytes",
    "accel_power_watts",
    "accel_power_limit_watts",
    "accel_energy_joules_total",
    "accel_temperature_celsius",
    "accel_clock_hertz",
    "accel_clock_throttle_active",
    "accel_clock_violation_seconds_total",
    "accel_pcie_replays_total",
    "accel_pcie_link_generation",
    "accel_pcie_link_width",
    "accel_gaudi_nic_port_up",
)


@dataclass
class HlmlRig:
    """One started backend on a fake Gaudi node, and the reference's memory of it."""

    fake: FakeHlml
    backend: Any
    models: list[GaudiModel]


@pytest.fixture
def hlml_rig(hlml_backends: Backends[Any], hlml_inprocess: FakeHlml) -> HlmlRig:
    hlml_inprocess.state.devices = GAUDIS
    backend = started(hlml_backends)
    models = [
        GaudiModel(list(hlml.SENSORS), int(hlml_inprocess.device(i).energy_mj))
        for i in range(GAUDIS)
    ]
    return HlmlRig(hlml_inprocess, backend, models)


def hlml_set(dev: Any, state: GaudiState, energy: int) -> None:
    dev.util_aip, dev.util_memory = state.util
    dev.mem_total, dev.mem_used, dev.mem_free = state.memory
    dev.power_mw, dev.power_limit_mw, dev.energy_mj = state.power, state.limit, energy
    dev.temp[:] = list(state.temps)
    dev.sensor_mask = state.served
    dev.clock_mhz, dev.throttle = state.clock, state.throttle
    dev.violation_ns[:] = list(state.violations)
    dev.pcie_replay, dev.pcie_gen, dev.pcie_width = state.pcie
    dev.port_up[0] = state.ports_up


@SETTINGS
@given(
    polls=st.lists(
        st.tuples(st.booleans(), st.lists(gaudi_states(), min_size=GAUDIS, max_size=GAUDIS)),
        min_size=1,
        max_size=3,
    )
)
def test_hlml_fast_read_equals_the_emitter_reference(
    hlml_rig: HlmlRig, polls: list[tuple[bool, list[GaudiState]]]
):
    for n, (slow, states) in enumerate(polls):
        slow = slow or n == 0  # an example starts from a slow poll: all sensors asked
        rows = new_rows()
        for i, (state, model) in enumerate(zip(states, hlml_rig.models, strict=True)):
            model.counter, energy = energy_step(model.counter, state.energy)
            hlml_set(hlml_rig.fake.device(i), state, energy)
            if slow:
                model.sensors = list(hlml.SENSORS)
            out = Emitter(i, rows, hlml.SENTINELS)
            reference_fast(state, model, energy, hlml_control.PORTS, out)
        reply = poll(hlml_rig.backend, slow=slow)
        assert [d["up"] for d in reply["devices"]] == [True] * GAUDIS
        got = {k: v for k, v in values(reply).items() if k[0] in HLML_FAST_FAMILIES}
        want = values({"devices": reply["devices"], "readings": rows})
        assert got == want
