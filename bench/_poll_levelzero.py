"""levelzero backend figures: CPU per poll through the backend vs the same Sysman calls bare.

Contract shared with ``bench/_poll_nvml.py`` (driven by ``bench/poll.py``)::

    def run(devices: int, polls: int, workdir: pathlib.Path) -> dict[str, Any]

Runnable alone too: ``.venv/bin/python bench/_poll_levelzero.py [--devices 8] [--polls 200]``.
CPU is ``time.process_time`` of this process, with the real pyzes package driving
the fake libze_loader.so.1 (built with gcc in ``workdir``). The bare loop makes
the same pyzes calls (and the same RAS and fabric calls through the loaded
library) on the components the backend enumerated; the fake's call counter
checks that both sides really make the same calls.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from _common import Subject, measure, reply_parser  # noqa: E402

from exporter.backends import levelzero_binding as zb  # noqa: E402
from exporter.backends.levelzero import Gpu, LevelZeroBackend  # noqa: E402
from tests.fakes.levelzero import control  # noqa: E402


def _bare_fast(ze: Any, extra: zb.Extra, gpus: list[Gpu]) -> None:
    byref = ctypes.byref
    for g in gpus:
        for c in g.engines:
            s = ze.zes_engine_stats_t()
            ze.zesEngineGetActivity(c.handle, byref(s))
        for c in g.memory:
            m = ze.zes_mem_state_t()
            ze.zesMemoryGetState(c.handle, byref(m))
            b = ze.zes_mem_bandwidth_t()
            ze.zesMemoryGetBandwidth(c.handle, byref(b))
        for c in g.power:
            e = ze.zes_power_energy_counter_t()
            ze.zesPowerGetEnergyCounter(c.handle, byref(e))
        for c in g.sensors:
            t = ctypes.c_double()
            ze.zesTemperatureGetState(c.handle, byref(t))
        for c in g.clocks:
            f = ze.zes_freq_state_t()
            ze.zesFrequencyGetState(c.handle, byref(f))
        p = ze.zes_pci_stats_t()
        ze.zesDevicePciGetStats(g.handle, byref(p))
        st = ze.zes_pci_state_t()
        ze.zesDevicePciGetState(g.handle, byref(st))
        for c in g.ports:
            ps = zb.FabricPortState()
            extra.call("zesFabricPortGetState", c.handle, byref(ps))
            pt = zb.FabricPortThroughput()
            extra.call("zesFabricPortGetThroughput", c.handle, byref(pt))


def _bare_slow(ze: Any, extra: zb.Extra, gpus: list[Gpu]) -> None:
    _bare_fast(ze, extra, gpus)
    byref = ctypes.byref
    for g in gpus:
        for c in g.memory:
            m = ze.zes_mem_state_t()
            ze.zesMemoryGetState(c.handle, byref(m))
        s = zb.DeviceState()
        extra.call("zesDeviceGetState", g.handle, byref(s))
        for c in g.ras:
            r = zb.RasState()
            extra.call("zesRasGetState", c.handle, 0, byref(r))
        for c in g.ras:
            n = ctypes.c_uint32(0)
            extra.call("zesRasGetStateExp", c.handle, byref(n), None)
            states = (zb.RasStateExp * n.value)()
            extra.call("zesRasGetStateExp", c.handle, byref(n), states)


def prepare(devices: int, workdir: Path) -> Subject:
    """The levelzero backend with ``devices`` fake Max 1550 GPUs, ready to measure."""
    lib = control.build(workdir / "ze")
    fake = control.FakeZe.create(workdir / "ze-state.bin", devices)
    os.environ.update(fake.env)
    backend = LevelZeroBackend({"library_path": str(lib)})
    parse = reply_parser(backend.bootstrap())
    ze, extra = backend.ze, backend.extra
    assert extra is not None
    gpus = backend.gpus

    def poll(slow: bool) -> Any:
        return backend.handle("poll", {"slow": slow})

    poll(False)  # the first poll has no rates yet
    return Subject(
        calls=lambda: int(fake.state.calls),
        parse=parse,
        polls={
            "fast": (lambda: poll(False), lambda: _bare_fast(ze, extra, gpus)),
            "slow": (lambda: poll(True), lambda: _bare_slow(ze, extra, gpus)),
        },
        close=backend.close,
        config={"sources": {"host": {"enabled": False}, "levelzero": {"library_path": str(lib)}}},
        env=fake.env,
        ids=[(str(i), control.uuid(i)) for i in range(devices)],
    )


def run(devices: int, polls: int, workdir: Path) -> dict[str, Any]:
    """Measure the levelzero backend with ``devices`` fake GPUs."""
    return measure(prepare(devices, workdir), devices, polls, workdir)


def main(argv: list[str] | None = None) -> int:
    """Run standalone and print the JSON."""
    parser = argparse.ArgumentParser(description="levelzero backend poll cost")
    parser.add_argument("--devices", type=int, default=8)
    parser.add_argument("--polls", type=int, default=200)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-levelzero-") as tmp:
        report = run(args.devices, args.polls, Path(tmp))
    json.dump({"levelzero": report}, sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
