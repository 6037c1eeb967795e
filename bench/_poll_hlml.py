"""hlml backend figures: CPU per poll through the backend vs the same pyhlml calls made bare.

Contract shared with ``bench/_poll_nvml.py`` (driven by ``bench/poll.py``)::

    def run(devices: int, polls: int, workdir: pathlib.Path) -> dict[str, Any]

Runnable alone too: ``.venv/bin/python bench/_poll_hlml.py [--devices 8] [--polls 200]``.
CPU is ``time.process_time`` of this process, with the real habana-pyhlml package
driving the fake libhlml.so (built with gcc in ``workdir``). The bare loop makes
the same pyhlml calls as the backend's fast (or slow) poll: on fast polls the
backend skips the sensors that answered NOT_SUPPORTED before, and asks them
again on slow polls, so the bare loops do the same. The fake's call counter
checks that both sides make the same calls.
"""

from __future__ import annotations

import argparse
import contextlib
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

from exporter.backends.hlml import Aip, HlmlBackend  # noqa: E402
from tests.fakes.hlml import control  # noqa: E402


def _bare_fast(api: Any, aips: list[Aip], sensors: tuple[int, ...]) -> None:
    for a in aips:
        h = a.handle
        api.hlmlDeviceGetUtilizationRates(h)
        api.hlmlDeviceGetMemoryInfo(h)
        api.hlmlDeviceGetPowerUsage(h)
        api.hlmlDeviceGetPowerManagementLimit(h)
        api.hlmlDeviceGetTotalEnergyConsumption(h)
        for s in sensors:
            with contextlib.suppress(api.HLMLError):
                api.hlmlDeviceGetTemperature(h, s)
        api.hlmlDeviceGetClockInfo(h, 0)
        api.hlmlDeviceGetCurrentClocksThrottleReasons(h)
        api.hlmlDeviceGetViolationStatus(h, 0)
        api.hlmlDeviceGetViolationStatus(h, 1)
        api.hlmlDeviceGetPCIEReplayCounter(h)
        api.hlmlDeviceGetCurrPCIELinkGeneration(h)
        api.hlmlDeviceGetCurrPCIELinkWidth(h)
        for port, _label in a.ports:
            api.hlmlDeviceNicGetLink(h, port)


def _bare_slow(api: Any, aips: list[Aip]) -> None:
    _bare_fast(api, aips, tuple(range(6)))
    for a in aips:
        h = a.handle
        api.hlmlDeviceGetMaxClockInfo(h, 0)
        for kind in (0, 1):
            for counter in (0, 1):
                api.hlmlDeviceGetTotalECCErrors(h, kind, counter)
        api.hlmlDeviceGetReplacedRowsCount(h, 0)
        api.hlmlDeviceGetReplacedRowsCount(h, 1)
        api.hlmlDeviceGetReplacedRowsPendingStatus(h)
        for port, _label in a.ports:
            api.hlmlDeviceNicGetStatistics(h, port)


def prepare(devices: int, workdir: Path) -> Subject:
    """The hlml backend with ``devices`` fake Gaudi 2 devices, ready to measure."""
    lib = control.build(workdir / "hlml")
    fake = control.FakeHlml.create(workdir / "hlml-state.bin", devices)
    os.environ.update(fake.env)
    backend = HlmlBackend({"library_path": str(lib)})
    parse = reply_parser(backend.bootstrap())
    api, aips = backend.api, backend.aips
    served = tuple(sorted(control.SERVED_SENSORS))

    def poll(slow: bool) -> Any:
        return backend.handle("poll", {"slow": slow})

    def fast() -> Any:
        return poll(False)

    def slow() -> Any:
        reply = poll(True)
        poll(False)  # learn the unsupported sensors again, as after every slow poll
        return reply

    def bare_slow() -> None:
        _bare_slow(api, aips)
        _bare_fast(api, aips, served)

    fast()
    return Subject(
        calls=lambda: int(fake.state.calls),
        parse=parse,
        polls={
            "fast": (fast, lambda: _bare_fast(api, aips, served)),
            "slow": (slow, bare_slow),
        },
        close=backend.close,
        config={"sources": {"host": {"enabled": False}, "hlml": {"library_path": str(lib)}}},
        env=fake.env,
        ids=[(str(i), control.uuid(i)) for i in range(devices)],
    )


def run(devices: int, polls: int, workdir: Path) -> dict[str, Any]:
    """Measure the hlml backend with ``devices`` fake Gaudi devices."""
    return measure(prepare(devices, workdir), devices, polls, workdir)


def main(argv: list[str] | None = None) -> int:
    """Run standalone and print the JSON."""
    parser = argparse.ArgumentParser(description="hlml backend poll cost")
    parser.add_argument("--devices", type=int, default=8)
    parser.add_argument("--polls", type=int, default=200)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-hlml-") as tmp:
        report = run(args.devices, args.polls, Path(tmp))
    json.dump({"hlml": report}, sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
