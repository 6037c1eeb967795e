"""The Level Zero backend's poll: the fast and slow readings of one GPU.

:class:`Readings` is the reading half of
:class:`~exporter.backends.levelzero.LevelZeroBackend` (which adds bootstrap and
the request loop): the same object, split by concern so that each file stays
readable. It uses what the bootstrap made: the loaded binding (``ze``), the
extension table (``extra``), the reused output structs and the readings the
library lacks.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

from exporter.backend_api.wire import Rows, put
from exporter.backends import levelzero_binding as zb
from exporter.backends.contract import MAX_CELSIUS, MAX_MHZ, MHZ, Failing, count
from exporter.backends.levelzero_tables import (
    CODES,
    ECC_TYPES,
    PORT_UP,
    RAS_CATEGORIES,
    RAS_FAMILIES,
    RESET_REASONS,
    THROTTLE_REASONS,
    UTILIZATION_FROM,
    Gpu,
    Structs,
)
from exporter.family_names import (
    ACCEL_CLOCK_HERTZ,
    ACCEL_CLOCK_MAX_HERTZ,
    ACCEL_CLOCK_THROTTLE_ACTIVE,
    ACCEL_ECC_ERRORS_TOTAL,
    ACCEL_ENERGY_JOULES_TOTAL,
    ACCEL_INTEL_ENGINE_UTILIZATION_RATIO,
    ACCEL_INTEL_FABRIC_PORT_UP,
    ACCEL_INTEL_FABRIC_RX_BYTES_TOTAL,
    ACCEL_INTEL_FABRIC_TX_BYTES_TOTAL,
    ACCEL_INTEL_MEMORY_HEALTH,
    ACCEL_INTEL_MEMORY_READ_BYTES_TOTAL,
    ACCEL_INTEL_MEMORY_WRITE_BYTES_TOTAL,
    ACCEL_INTEL_READING_DENIED_INFO,
    ACCEL_INTEL_RESET_REASON_INFO,
    ACCEL_INTEL_RESET_REQUIRED,
    ACCEL_MEMORY_FREE_BYTES,
    ACCEL_MEMORY_TOTAL_BYTES,
    ACCEL_MEMORY_USED_BYTES,
    ACCEL_PCIE_LINK_GENERATION,
    ACCEL_PCIE_LINK_MAX_GENERATION,
    ACCEL_PCIE_LINK_MAX_WIDTH,
    ACCEL_PCIE_LINK_WIDTH,
    ACCEL_PCIE_REPLAYS_TOTAL,
    ACCEL_PCIE_RX_BYTES_PER_SECOND,
    ACCEL_PCIE_TX_BYTES_PER_SECOND,
    ACCEL_POWER_WATTS,
    ACCEL_TEMPERATURE_CELSIUS,
    ACCEL_UTILIZATION_RATIO,
)


class Readings:
    """The readings of one GPU a poll takes (see the module docstring)."""

    ze: Any
    extra: zb.Extra | None
    _structs: Structs
    _lacking: set[str]
    _failing: Failing

    def _ok(self, gpu: Gpu, reading: str, fn: Callable[..., int], handle: Any, out: Any) -> bool:
        return self._read(gpu, reading, fn, handle, ctypes.byref(out))

    def _ok_extra(self, gpu: Gpu, reading: str, name: str, handle: Any, out: Any) -> bool:
        assert self.extra is not None
        rc = self.extra.call(name, handle, ctypes.byref(out))
        if rc:
            self._bad(gpu, reading, rc)
        return not rc

    def _read(self, gpu: Gpu, reading: str, fn: Callable[..., int], *args: Any) -> bool:
        """One reading call; False (and noted, see _bad) when it yields nothing."""
        rc = int(fn(*args))
        if rc:
            self._bad(gpu, reading, rc)
        return not rc

    def _bad(self, gpu: Gpu, reading: str, rc: int) -> None:
        """A reading call did not succeed: DeviceGone, denied, absent, or a counted failure.

        A denied reading is exported (accel_intel_reading_denied_info) and logged
        once; a failure is counted and logged once; an absent one is neither.
        """
        if rc == zb.INSUFFICIENT_PERMISSIONS:
            gpu.denied.add(reading)
            self._failing.note(gpu, reading, CODES.reason(rc))
            return
        reason = CODES.failed(rc, reading)
        if reason:
            count(gpu.errors, reason)
            self._failing.note(gpu, reading, reason)

    def _fast(self, gpu: Gpu, pos: int, rows: Rows) -> None:
        ze, s = self.ze, self._structs
        self._engines(gpu, pos, rows)
        total = free = reads = writes = 0
        have_bw, sane = False, True
        bandwidth_lacking = "memory_bandwidth" in self._lacking
        state, bw = s.mem_state, s.mem_bandwidth
        for c in gpu.memory:
            state.stype = ze.ZES_STRUCTURE_TYPE_MEM_STATE
            rc = ze.zesMemoryGetState(c.handle, s.mem_state_ref)
            if rc:
                self._bad(gpu, "memory", rc)
            else:
                total += c.size
                free += state.free
                # More free than the module holds is garbage: no memory figures this poll.
                sane = sane and (not c.size or state.free <= c.size)
            if bandwidth_lacking:
                continue
            rc = ze.zesMemoryGetBandwidth(c.handle, s.mem_bandwidth_ref)
            if rc:
                self._bad(gpu, "memory_bandwidth", rc)
            else:
                reads += bw.readCounter
                writes += bw.writeCounter
                have_bw = True
        if gpu.memory and sane and (total or free):
            rows[ACCEL_MEMORY_FREE_BYTES] += (pos, free)
            if total >= free:
                rows[ACCEL_MEMORY_TOTAL_BYTES] += (pos, total)
                rows[ACCEL_MEMORY_USED_BYTES] += (pos, total - free)
        if have_bw:
            rows[ACCEL_INTEL_MEMORY_READ_BYTES_TOTAL] += (pos, reads)
            rows[ACCEL_INTEL_MEMORY_WRITE_BYTES_TOTAL] += (pos, writes)
        for c in gpu.power:
            rc = ze.zesPowerGetEnergyCounter(c.handle, s.energy_ref)
            if rc:
                self._bad(gpu, "power", rc)
                continue
            joules, watts = gpu.energy.update(s.energy.energy, s.energy.timestamp / 1e6)
            rows[ACCEL_ENERGY_JOULES_TOTAL] += (pos, joules)
            if watts is not None:
                rows[ACCEL_POWER_WATTS] += (pos, watts)
        self._temperatures(gpu, pos, rows)
        self._clocks(gpu, pos, rows)
        self._pci(gpu, pos, rows)
        if gpu.ports:
            self._ports(gpu, pos, rows)
        for reading in sorted(gpu.denied):
            rows[ACCEL_INTEL_READING_DENIED_INFO] += (pos, reading, 1)

    def _engines(self, gpu: Gpu, pos: int, rows: Rows) -> None:
        activity, stats, ref = (
            self.ze.zesEngineGetActivity,
            self._structs.engine,
            self._structs.engine_ref,
        )
        busy: dict[str, list[float]] = {}
        for c in gpu.engines:
            rc = activity(c.handle, ref)
            if rc:
                self._bad(gpu, "engines", rc)
                continue
            ratio = c.delta.rate(stats.activeTime, stats.timestamp)
            if ratio is not None and ratio <= 1.0:
                if c.label in busy:
                    busy[c.label].append(ratio)
                else:
                    busy[c.label] = [ratio]
        if not busy:
            return
        target = rows[ACCEL_INTEL_ENGINE_UTILIZATION_RATIO]
        means = {}
        for label, ratios in busy.items():
            # A tile without a ratio this poll (a counter reset) would skew the mean.
            if len(ratios) == gpu.tiles_of[label]:
                means[label] = mean = sum(ratios) / len(ratios)
                target += (pos, label, mean)
        # The group the device has (not merely the one that answered this poll).
        for label in UTILIZATION_FROM:
            if label in gpu.tiles_of:
                if label in means:
                    rows[ACCEL_UTILIZATION_RATIO] += (pos, means[label])
                break

    def _temperatures(self, gpu: Gpu, pos: int, rows: Rows) -> None:
        read, value, ref = (
            self.ze.zesTemperatureGetState,
            self._structs.double,
            self._structs.double_ref,
        )
        seen: dict[str, float] = {}
        for c in gpu.sensors:
            rc = read(c.handle, ref)
            if rc:
                self._bad(gpu, "temperature", rc)
                continue
            v = value.value
            # -1 is the spec's "unknown"; a sensor reading below freezing on a GPU is too.
            if not 0.0 <= v <= MAX_CELSIUS:  # NaN fails both comparisons
                continue
            # Several sensors of one type (one per tile): the extreme is what matters.
            if c.label in seen:
                v = min(v, seen[c.label]) if c.label.endswith("_min") else max(v, seen[c.label])
            seen[c.label] = v
        if seen:
            target = rows[ACCEL_TEMPERATURE_CELSIUS]
            for label, v in seen.items():
                target += (pos, label, v)

    def _clocks(self, gpu: Gpu, pos: int, rows: Rows) -> None:
        ze = self.ze
        state, ref = self._structs.freq, self._structs.freq_ref
        reasons = 0
        throttle_known = False
        for c in gpu.clocks:
            state.stype = ze.ZES_STRUCTURE_TYPE_FREQ_STATE
            rc = ze.zesFrequencyGetState(c.handle, ref)
            if rc:
                self._bad(gpu, "clocks", rc)
                continue
            if 0.0 <= state.actual <= MAX_MHZ:
                rows[ACCEL_CLOCK_HERTZ] += (pos, c.label, state.actual * MHZ)
            if c.kind == 0:  # the GPU domain's throttling is the device's
                reasons |= state.throttleReasons
                throttle_known = True
        if throttle_known:
            target = rows[ACCEL_CLOCK_THROTTLE_ACTIVE]
            for bit, name in THROTTLE_REASONS:
                target += (pos, name, 1 if reasons & bit else 0)

    def _pci(self, gpu: Gpu, pos: int, rows: Rows) -> None:
        if "pcie" in self._lacking:
            return
        ze, s = self.ze, self._structs
        stats = s.pci_stats
        if gpu.have_bandwidth or gpu.have_replay:
            rc = ze.zesDevicePciGetStats(gpu.handle, s.pci_stats_ref)
            if rc:
                self._bad(gpu, "pcie", rc)
            else:
                if gpu.have_replay:
                    rows[ACCEL_PCIE_REPLAYS_TOTAL] += (pos, stats.replayCounter)
                if gpu.have_bandwidth:
                    seconds = stats.timestamp / 1e6
                    rx = gpu.pci_rx.rate(stats.rxCounter, seconds)
                    tx = gpu.pci_tx.rate(stats.txCounter, seconds)
                    if rx is not None:
                        rows[ACCEL_PCIE_RX_BYTES_PER_SECOND] += (pos, rx)
                    if tx is not None:
                        rows[ACCEL_PCIE_TX_BYTES_PER_SECOND] += (pos, tx)
        state = s.pci_state
        state.stype = ze.ZES_STRUCTURE_TYPE_PCI_STATE
        rc = ze.zesDevicePciGetState(gpu.handle, s.pci_state_ref)
        if rc:
            self._bad(gpu, "pcie", rc)
            return
        speed = state.speed
        if 0 < speed.gen <= 64:
            rows[ACCEL_PCIE_LINK_GENERATION] += (pos, speed.gen)
        if 0 < speed.width <= 64:
            rows[ACCEL_PCIE_LINK_WIDTH] += (pos, speed.width)

    def _ports(self, gpu: Gpu, pos: int, rows: Rows) -> None:
        assert self.extra is not None
        get_state = self.extra.function("zesFabricPortGetState")
        get_throughput = self.extra.function("zesFabricPortGetThroughput")
        s = self._structs
        state, through = s.port_state, s.port_throughput
        for c in gpu.ports:
            if get_state is not None:
                state.stype = zb.STYPE_FABRIC_PORT_STATE
                rc = get_state(c.handle, s.port_state_ref)
                if rc:
                    self._bad(gpu, "fabric", rc)
                else:
                    up = 1 if state.status in PORT_UP else 0
                    rows[ACCEL_INTEL_FABRIC_PORT_UP] += (pos, c.label, up)
            if get_throughput is not None:
                rc = get_throughput(c.handle, s.port_throughput_ref)
                if rc:
                    self._bad(gpu, "fabric", rc)
                else:
                    rows[ACCEL_INTEL_FABRIC_RX_BYTES_TOTAL] += (pos, c.label, through.rxCounter)
                    rows[ACCEL_INTEL_FABRIC_TX_BYTES_TOTAL] += (pos, c.label, through.txCounter)

    def _slow(self, gpu: Gpu, pos: int, rows: Rows) -> None:
        assert self.extra is not None
        me = (pos,)
        for c in gpu.clocks:
            if c.size:
                put(rows, ACCEL_CLOCK_MAX_HERTZ, (pos, c.label), c.size)
        gen, width = gpu.pci_max
        if 0 < gen <= 64:
            put(rows, ACCEL_PCIE_LINK_MAX_GENERATION, me, gen)
        if 0 < width <= 64:
            put(rows, ACCEL_PCIE_LINK_MAX_WIDTH, me, width)
        ze = self.ze
        health = 0
        state = ze.zes_mem_state_t()
        for c in gpu.memory:
            state.stype = ze.ZES_STRUCTURE_TYPE_MEM_STATE
            read = self._read(gpu, "memory", ze.zesMemoryGetState, c.handle, ctypes.byref(state))
            if read and 0 < state.health <= 4:
                health = max(health, int(state.health))
        if health:
            put(rows, ACCEL_INTEL_MEMORY_HEALTH, me, health)
        dev_state = zb.DeviceState(stype=zb.STYPE_DEVICE_STATE)
        if self._ok_extra(gpu, "device_state", "zesDeviceGetState", gpu.handle, dev_state):
            put(rows, ACCEL_INTEL_RESET_REQUIRED, me, 1 if dev_state.reset else 0)
            for bit, reason in RESET_REASONS:
                if dev_state.reset & bit:
                    put(rows, ACCEL_INTEL_RESET_REASON_INFO, (pos, reason), 1)
        totals: list[list[int]] = [[0] * len(RAS_CATEGORIES), [0] * len(RAS_CATEGORIES)]
        seen = [False, False]
        ras = zb.RasState()
        for c in gpu.ras:
            ras.stype = zb.STYPE_RAS_STATE
            # clear=0 always: clearing resets the counters for every reader, and needs root.
            rc = self.extra.call("zesRasGetState", c.handle, 0, ctypes.byref(ras))
            if rc:
                self._bad(gpu, "ras", rc)
                continue
            seen[c.kind] = True
            for i in range(len(RAS_CATEGORIES)):
                totals[c.kind][i] += int(ras.category[i])
        for kind, family in enumerate(RAS_FAMILIES):
            if seen[kind]:
                for name, count in zip(RAS_CATEGORIES, totals[kind], strict=True):
                    put(rows, family, (pos, name), count)
        self._ecc(gpu, pos, rows)

    def _ecc(self, gpu: Gpu, pos: int, rows: Rows) -> None:
        """Memory (ECC) errors: the MEMORY_ERRORS category of zesRasGetStateExp."""
        assert self.extra is not None
        totals = [0, 0]
        seen = [False, False]
        for c in gpu.ras:
            n = ctypes.c_uint32(0)
            rc = self.extra.call("zesRasGetStateExp", c.handle, ctypes.byref(n), None)
            if not rc:
                states = (zb.RasStateExp * min(n.value, 64))()
                n.value = len(states)
                rc = self.extra.call("zesRasGetStateExp", c.handle, ctypes.byref(n), states)
            if rc:
                self._bad(gpu, "ras", rc)
                continue
            for state in states[: n.value]:
                if state.category == zb.RAS_CATEGORY_EXP_MEMORY:
                    totals[c.kind] += int(state.errorCounter)
                    seen[c.kind] = True
        for kind, type_name in enumerate(ECC_TYPES):
            if seen[kind]:
                put(rows, ACCEL_ECC_ERRORS_TOTAL, (pos, type_name, ""), totals[kind])
