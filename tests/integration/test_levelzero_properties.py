"""The levelzero backend's fast read against a plain reference, over drawn device states.

``LevelZeroBackend._fast`` (and its ``_engines``, ``_temperatures``, ``_clocks``,
``_pci``, ``_ports``) appends rows by hand and tests ranges inline, for speed
(issue 23). Here the real backend, through the real pyzes binding and the fake
``libze_loader.so.1``, polls device states Hypothesis draws: Sysman's "unknown"
(-1), NaN, infinities and out-of-range values, counters that step, stall, go
backwards or jump, free memory beyond a module's size, PCIe links of width 0 or
above 64, fabric ports in every status. Every poll's fast rows must equal, row for
row, what :func:`expected_rows` makes of the same state: the module's documented
rules written as the obvious code, each value added through
:class:`exporter.backends.contract.Emitter` (which drops non-finite values once).

The reference keeps its own previous samples (:class:`Previous`) for the
cumulative counters, so every poll is compared, the first after a write
included. Which components a device has is fixed when the backend starts (the
fake enumerates at ``zesInit``), so three devices with different shapes cover
one tile and two (with a temperature sensor on each tile, as Sysman enumerates
them on a Max 1550: ``temp_per_tile`` in the fake), a device without a compute
engine, one without a GPU clock domain, power domain or fabric ports, and a
memory module of unknown size.

Each example starts a backend of its own (about 5 ms) so that it does not depend
on the examples before it; shrinking is off (an example is a start and up to
three polls: shrinking one failure took minutes), so a failure prints the drawn
states unshrunk with the rows that differ.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from exporter.backend_api.wire import ROW_WIDTH, Rows, new_rows
from exporter.backends.contract import Emitter
from exporter.backends.levelzero import LevelZeroBackend
from tests.fakes.levelzero.control import ENGINE_TYPES, GIB, TEMP_TYPES, TILES, Device, FakeZe
from tests.fakes.levelzero.expected import THROTTLE_REASONS
from tests.helpers.backend_harness import Backends, poll, started

U64 = (1 << 64) - 1
NAN, INF = float("nan"), float("inf")

# Labels from Level Zero's enumerations (zes_api.h) as the catalog's vocabulary writes them.
ENGINE_LABEL = {
    0: "all",
    1: "compute",
    2: "media",
    3: "copy",
    11: "3d_render_compute",
    12: "render",
    13: "3d",
}
UTILIZATION_PREFERENCE = ("compute", "3d_render_compute", "render", "all")
SENSOR_LABEL = (
    "global",
    "gpu",
    "memory",
    "global_min",
    "gpu_min",
    "memory_min",
    "board",
    "board_min",
    "voltage_regulator",
)
CLOCK_LABEL = ("graphics", "memory", "video")
# The documented drop rules (exporter/backends/levelzero.py): a GPU sensor reads
# 0..250 °C, a clock 0..100 GHz, a PCIe link generation or width 1..64; an engine
# is busy at most all of the time; a card draws at most 5 kW (counters.py).
MAX_CELSIUS, MAX_MHZ, MAX_LINK, MAX_WATTS = 250.0, 100_000.0, 64, 5000.0


@dataclass(frozen=True)
class Shape:
    """What one fake device has, fixed at bootstrap."""

    tiles: int
    engines: tuple[int, ...]  # zes_engine_group_t values
    sensors: tuple[int, ...]  # zes_temp_sensors_t values
    clocks: tuple[int, ...]  # zes_freq_domain_t values
    power: bool
    ports: int
    bandwidth: bool  # PCIe rx/tx counters
    replay: bool
    mem_size: int  # each module's physical size (0: not known)
    sensors_per_tile: bool = False  # each sensor once per tile, as a Max 1550's


SHAPES = (
    # One tile, no compute group (utilization from "render"), every sensor.
    Shape(1, (0, 2, 12, 13), tuple(range(TEMP_TYPES)), (0, 1, 2), True, 2, True, True, 64 * GIB),
    # Two tiles (a Max 1550), sensors on each tile (maxima and minima), four ports.
    Shape(2, (1, 2, 3, 12), (0, 1, 2, 3, 4, 6), (0, 1, 2), True, 4, True, True, 64 * GIB, True),
    # Integrated-like: no GPU clock domain, power domain or ports; size unknown.
    Shape(1, (0, 3), (0, 3), (1, 2), False, 0, False, True, 0),
)


def configure(dev: Device, shape: Shape) -> None:
    """Give a fake device ``shape`` (before the backend starts)."""
    dev.tiles = shape.tiles if shape.tiles > 1 else 0
    dev.engine_mask = sum(1 << e for e in shape.engines)
    dev.temp_mask = sum(1 << s for s in shape.sensors)
    dev.freq_mask = sum(1 << f for f in shape.clocks)
    dev.power_domains = int(shape.power)
    dev.fabric_ports = shape.ports
    dev.have_bandwidth, dev.have_replay = int(shape.bandwidth), int(shape.replay)
    dev.temp_per_tile = int(shape.sensors_per_tile)
    for t in range(TILES):
        dev.mem_size[t] = shape.mem_size


# -- drawn states -------------------------------------------------------------

CELSIUS = st.one_of(
    st.floats(0.0, MAX_CELSIUS),
    st.sampled_from([-1.0, NAN, INF, -INF, 0.0, MAX_CELSIUS, 250.001, 1e6, -0.5, -40.0]),
)
MHZ = st.one_of(
    st.floats(0.0, MAX_MHZ),
    st.sampled_from([-1.0, NAN, INF, 0.0, MAX_MHZ, 100_000.5, 1e12]),
)
LINK = st.one_of(st.integers(1, MAX_LINK), st.sampled_from([0, -1, 65, 255, (1 << 31) - 1]))
COUNTER = st.integers(0, 1 << 40)


def free_of(size: int) -> st.SearchStrategy[int]:
    """A module's free bytes: within its size, all of it, beyond it (garbage), any."""
    if not size:
        return st.one_of(st.integers(0, 1 << 40), st.just(0), st.just(U64))
    return st.one_of(st.integers(0, size), st.just(size), st.integers(size + 1, U64), st.just(0))


@dataclass
class Counters:
    """Where a device's cumulative counters stand (each counter's value and timestamp)."""

    engines: tuple[int, int]  # active time, timestamp (of every engine group: their steps differ)
    energy: tuple[int, int]  # µJ, µs
    pci: tuple[int, int, int]  # rx, tx, timestamp
    ports: list[tuple[int, int]]  # rx, tx
    memory: tuple[int, int]  # read, write


@dataclass
class Draw:
    """One device's drawn state: readings, counters, each counter's step a call, and
    optionally where the counters stand before the third poll (a reset or a jump)."""

    temp: dict[int, float]  # zes_temp_sensors_t -> °C (tile 0's when per tile)
    temp_tile1: dict[int, float]  # tile 1's, when per tile
    actual: list[float]
    throttle: list[int]
    free: list[int]
    link: tuple[int, int]  # generation, width
    port_status: list[int]
    counters: Counters
    engine_steps: dict[tuple[int, int], int]
    engine_ts_step: int
    energy_steps: tuple[int, int]
    pci_steps: tuple[int, int, int]
    port_step: int
    memory_steps: tuple[int, int]
    later: Counters | None


def counters(shape: Shape) -> st.SearchStrategy[Counters]:
    """Counter values of a device of ``shape``."""
    pair = st.tuples(COUNTER, COUNTER)
    return st.builds(
        Counters,
        engines=pair,
        energy=pair,
        pci=st.tuples(COUNTER, COUNTER, COUNTER),
        ports=st.lists(pair, min_size=shape.ports, max_size=shape.ports),
        memory=pair,
    )


@st.composite
def draws(draw: Callable[..., Any], shape: Shape) -> Draw:
    """A drawn state of a device of ``shape``."""
    ts_step = draw(st.one_of(st.just(0), st.integers(1, 1 << 20)))
    busy = st.integers(0, 2 * ts_step + 1)  # a busy share up to 2 (garbage above 1)
    engines = [(t, e) for t in range(shape.tiles) for e in shape.engines]
    step = st.integers(0, 1 << 30)
    return Draw(
        temp=draw(st.fixed_dictionaries(dict.fromkeys(shape.sensors, CELSIUS))),
        temp_tile1=draw(
            st.fixed_dictionaries(
                dict.fromkeys(shape.sensors if shape.sensors_per_tile else (), CELSIUS)
            )
        ),
        actual=draw(st.lists(MHZ, min_size=3, max_size=3)),
        throttle=draw(st.lists(st.integers(0, (1 << 32) - 1), min_size=3, max_size=3)),
        free=draw(st.lists(free_of(shape.mem_size), min_size=shape.tiles, max_size=shape.tiles)),
        link=draw(st.tuples(LINK, LINK)),
        port_status=draw(st.lists(st.integers(-1, 5), min_size=shape.ports, max_size=shape.ports)),
        counters=draw(counters(shape)),
        engine_steps=draw(st.fixed_dictionaries(dict.fromkeys(engines, busy))),
        engine_ts_step=ts_step,
        # µJ and µs: up to 20 kJ in up to 2 s, so above and below 5 kW
        energy_steps=draw(
            st.tuples(
                st.integers(0, 20_000_000_000), st.one_of(st.just(0), st.integers(1, 2_000_000))
            )
        ),
        pci_steps=draw(st.tuples(step, step, st.integers(0, 2_000_000))),
        port_step=draw(step),
        memory_steps=draw(st.tuples(step, step)),
        later=draw(st.none() | counters(shape)),
    )


def place(dev: Device, c: Counters) -> None:
    """Set where the fake device's counters stand."""
    for t in range(TILES):
        for e in range(ENGINE_TYPES):
            dev.engine_active[t][e], dev.engine_ts[t][e] = c.engines
    dev.energy_uj, dev.energy_ts_us = c.energy
    dev.pci_rx, dev.pci_tx, dev.pci_ts = c.pci
    for p, (rx, tx) in enumerate(c.ports):
        dev.port_rx[p], dev.port_tx[p] = rx, tx
    dev.mem_read, dev.mem_write = c.memory


def write(dev: Device, d: Draw) -> None:
    """Put a drawn state into the fake device (the running backend sees it at once)."""
    for s, v in d.temp.items():
        dev.temp[s] = v
    for s, v in d.temp_tile1.items():
        dev.temp_tile1[s] = v
    for i in range(3):
        dev.freq_actual[i], dev.throttle[i] = d.actual[i], d.throttle[i]
    for t, free in enumerate(d.free):
        dev.mem_free[t] = free
    dev.pci_gen, dev.pci_width = d.link
    for p, status in enumerate(d.port_status):
        dev.port_status[p] = status
    place(dev, d.counters)
    for (t, e), step in d.engine_steps.items():
        dev.engine_step[t][e] = step
    dev.engine_ts_step = d.engine_ts_step
    dev.energy_step_uj, dev.energy_ts_step_us = d.energy_steps
    dev.pci_rx_step, dev.pci_tx_step, dev.pci_ts_step = d.pci_steps
    dev.port_step = d.port_step
    dev.mem_read_step, dev.mem_write_step = d.memory_steps


# -- the reference --------------------------------------------------------------


@dataclass
class Previous:
    """The reference's previous sample of each cumulative counter, and the energy total."""

    samples: dict[str, tuple[int, float]] = field(default_factory=dict)
    energy_total: int | None = None

    def rate(self, name: str, value: int, stamp: float, limit: float = INF) -> float | None:
        """Increase per stamp unit since the previous sample; None without a previous
        sample, when the stamp did not advance, the counter went back or the rate is
        above ``limit``."""
        before = self.samples.get(name)
        self.samples[name] = (value, stamp)
        if before is None or stamp <= before[1] or value < before[0]:
            return None
        rate = (value - before[0]) / (stamp - before[1])
        return rate if rate <= limit else None


def expected_rows(fake: FakeZe, previous: list[Previous]) -> Rows:
    """The fast rows of the next poll, from the fake's state before it (the fake adds
    each counter's step on the call, then answers)."""
    rows = new_rows()
    for pos, shape in enumerate(SHAPES):
        dev, prev = fake.device(pos), previous[pos]
        out = Emitter(pos, rows)
        engines(out, dev, shape, prev)
        memory(out, dev, shape)
        if shape.power:
            uj = (dev.energy_uj + dev.energy_step_uj) & U64
            seconds = ((dev.energy_ts_us + dev.energy_ts_step_us) & U64) / 1e6
            before = prev.samples.get("energy")
            rate = prev.rate("energy", uj, seconds, MAX_WATTS * 1e6)
            if prev.energy_total is None:
                prev.energy_total = uj
            elif rate is not None and before is not None:
                prev.energy_total += uj - before[0]
            out.add("accel_energy_joules_total", prev.energy_total / 1e6)
            out.add("accel_power_watts", None if rate is None else rate / 1e6)
        for s in shape.sensors:
            # A sensor on each tile: the hottest, or for a *_min sensor the coldest.
            readings = [dev.temp[s], *([dev.temp_tile1[s]] if shape.sensors_per_tile else [])]
            known = [v for v in readings if 0.0 <= v <= MAX_CELSIUS]
            if known:
                label = SENSOR_LABEL[s]
                extreme = min(known) if label.endswith("_min") else max(known)
                out.add("accel_temperature_celsius", extreme, label)
        for c in shape.clocks:
            mhz = dev.freq_actual[c]
            if 0.0 <= mhz <= MAX_MHZ:
                out.add("accel_clock_hertz", mhz * 1e6, CLOCK_LABEL[c])
        if 0 in shape.clocks:  # the GPU domain's throttle reasons are the device's
            for bit, reason in enumerate(THROTTLE_REASONS):
                out.add("accel_clock_throttle_active", (dev.throttle[0] >> bit) & 1, reason)
        pcie(out, dev, shape, prev)
        for p in range(shape.ports):
            port = f"{pos + 1}.0.{p + 1}"
            out.add("accel_intel_fabric_port_up", int(dev.port_status[p] in (1, 2)), port)
            through = (dev.port_rx[p] + dev.port_step) & U64, (dev.port_tx[p] + dev.port_step) & U64
            out.add("accel_intel_fabric_rx_bytes_total", through[0], port)
            out.add("accel_intel_fabric_tx_bytes_total", through[1], port)
    return rows


def engines(out: Emitter, dev: Device, shape: Shape, prev: Previous) -> None:
    """Busy ratio of each engine group: the mean over tiles, only when every tile has one."""
    busy: dict[str, list[float]] = {}
    for t in range(shape.tiles):
        for e in shape.engines:
            active = (dev.engine_active[t][e] + dev.engine_step[t][e]) & U64
            stamp = (dev.engine_ts[t][e] + dev.engine_ts_step) & U64
            ratio = prev.rate(f"engine {t} {e}", active, stamp)
            if ratio is not None and ratio <= 1.0:
                busy.setdefault(ENGINE_LABEL[e], []).append(ratio)
    means = {label: sum(r) / len(r) for label, r in busy.items() if len(r) == shape.tiles}
    for label, mean in means.items():
        out.add("accel_intel_engine_utilization_ratio", mean, label)
    labels = {ENGINE_LABEL[e] for e in shape.engines}
    source = next(label for label in UTILIZATION_PREFERENCE if label in labels)
    out.add("accel_utilization_ratio", means.get(source))


def memory(out: Emitter, dev: Device, shape: Shape) -> None:
    """Free, total, used: none when a module of known size claims more free than it holds."""
    frees = [dev.mem_free[t] for t in range(shape.tiles)]
    size = shape.mem_size
    if not size or all(f <= size for f in frees):
        total, free = size * shape.tiles, sum(frees)
        if total or free:
            out.add("accel_memory_free_bytes", free)
            if total >= free:
                out.add("accel_memory_total_bytes", total)
                out.add("accel_memory_used_bytes", total - free)
    # Tile 0's module carries the bandwidth counters, the others read 0.
    out.add("accel_intel_memory_read_bytes_total", (dev.mem_read + dev.mem_read_step) & U64)
    out.add("accel_intel_memory_write_bytes_total", (dev.mem_write + dev.mem_write_step) & U64)


def pcie(out: Emitter, dev: Device, shape: Shape, prev: Previous) -> None:
    """Replays, rx/tx rates (timestamps in µs), and the link's current generation and width."""
    if shape.replay:
        out.add("accel_pcie_replays_total", dev.pci_replay)
    if shape.bandwidth:
        seconds = ((dev.pci_ts + dev.pci_ts_step) & U64) / 1e6
        rx = prev.rate("rx", (dev.pci_rx + dev.pci_rx_step) & U64, seconds)
        tx = prev.rate("tx", (dev.pci_tx + dev.pci_tx_step) & U64, seconds)
        out.add("accel_pcie_rx_bytes_per_second", rx)
        out.add("accel_pcie_tx_bytes_per_second", tx)
    if 0 < dev.pci_gen <= MAX_LINK:
        out.add("accel_pcie_link_generation", dev.pci_gen)
    if 0 < dev.pci_width <= MAX_LINK:
        out.add("accel_pcie_link_width", dev.pci_width)


# -- the comparison -------------------------------------------------------------


def keyed(rows: Rows) -> dict[tuple[Any, ...], float]:
    """``{(family, position, labels...): value}`` of a reply's rows; a row twice is an error."""
    out: dict[tuple[Any, ...], float] = {}
    for metric, items in rows.items():
        width = ROW_WIDTH[metric]
        assert len(items) % width == 0, f"{metric}: {len(items)} items, rows of {width}"
        for start in range(0, len(items), width):
            row = items[start : start + width]
            k = (metric, *row[:-1])
            assert k not in out, f"row twice: {k}"
            out[k] = row[-1]
    return out


def differences(got: dict[tuple[Any, ...], float], want: dict[tuple[Any, ...], float]) -> list[str]:
    """What the backend's rows and the reference's disagree on (empty: nothing)."""
    diff = [f"extra {k} = {got[k]!r}" for k in sorted(got.keys() - want.keys(), key=repr)]
    diff += [f"missing {k} = {want[k]!r}" for k in sorted(want.keys() - got.keys(), key=repr)]
    diff += [
        f"{k}: backend {got[k]!r}, reference {want[k]!r}"
        for k in sorted(got.keys() & want.keys(), key=repr)
        # The rates' float rounding may differ in the last bits; NaN is never close.
        if not math.isclose(got[k], want[k], rel_tol=1e-12)
    ]
    return diff


def test_fast_rows_match_the_reference_over_drawn_states(
    ze_backends: Backends[LevelZeroBackend], ze_inprocess: FakeZe
) -> None:
    ze_inprocess.state.devices = len(SHAPES)
    for i, shape in enumerate(SHAPES):
        configure(ze_inprocess.device(i), shape)
    polls = [0]

    # No shrinking (see the module docstring): the differing rows name family and value.
    @settings(
        max_examples=60,
        deadline=None,
        phases=(Phase.explicit, Phase.reuse, Phase.generate),
        suppress_health_check=[HealthCheck.too_slow],
    )
    @given(st.tuples(*(draws(shape) for shape in SHAPES)))
    def check(states: tuple[Draw, ...]) -> None:
        # A backend of its own (~5 ms to start) makes each example independent of
        # the ones before, as shrinking and replaying a failure need.
        backend = started(ze_backends)
        assert len(backend.gpus) == len(SHAPES)
        previous = [Previous() for _ in SHAPES]
        for i, d in enumerate(states):
            write(ze_inprocess.device(i), d)
        # The first poll has no previous sample, the second has rates; a third
        # after the counters were moved (back, or far ahead) when that was drawn.
        for n in range(3):
            if n == 2:
                if all(d.later is None for d in states):
                    break
                for i, d in enumerate(states):
                    if d.later is not None:
                        place(ze_inprocess.device(i), d.later)
            want = keyed(expected_rows(ze_inprocess, previous))
            reply = poll(backend, slow=False)
            polls[0] += 1
            assert [d["up"] for d in reply["devices"]] == [True] * len(SHAPES)
            assert differences(keyed(reply["readings"]), want) == []

    check()
    assert polls[0] >= 2 * 60
