"""amdsmi backend figures: CPU per poll through the backend vs the same amdsmi calls made bare.

Contract shared with ``bench/_poll_nvml.py`` (driven by ``bench/poll.py``)::

    def run(devices: int, polls: int, workdir: pathlib.Path) -> dict[str, Any]

Runnable alone too: ``.venv/bin/python bench/_poll_amdsmi.py [--devices 8] [--polls 200]``
prints the JSON. CPU is ``time.process_time`` of this process, with the real
amdsmi package driving the fake libamd_smi.so (built with gcc in ``workdir``)
and the event thread off, so only polling is counted. The bare loop makes the
same amdsmi calls as the backend's fast (or slow) poll; the fake's call
counter checks that the two really make the same calls. ``cper`` adds the
slow poll with 0 and 1,000 pending CPER records per GPU, the polls and CPU to
drain 1,000, and a fast poll during a 10,000-record burst against a quiet one.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from _common import Subject, compare, cpu_min, measure, reply_parser  # noqa: E402

from exporter.backends.amdsmi import CPER_PER_POLL, AmdSmiBackend  # noqa: E402
from exporter.backends.amdsmi_ras import BUFFER, HEADERS_PER_CALL  # noqa: E402
from tests.fakes.amdsmi import build, state  # noqa: E402
from tests.fakes.amdsmi.expected import uuid  # noqa: E402


def _bare_fast(a: Any, handles: list[Any]) -> None:
    temps = ("EDGE", "HOTSPOT", "VRAM", "HBM_0", "HBM_1", "HBM_2", "HBM_3")
    clocks = ("GFX", "MEM", "SOC", "DF", "VCLK0", "DCLK0")
    current = a.AmdSmiTemperatureMetric.CURRENT
    for h in handles:
        a.amdsmi_get_gpu_activity(h)
        for kind in (a.AmdSmiMemoryType.VRAM, a.AmdSmiMemoryType.VIS_VRAM, a.AmdSmiMemoryType.GTT):
            a.amdsmi_get_gpu_memory_total(h, kind)
            a.amdsmi_get_gpu_memory_usage(h, kind)
        for t in temps:
            with contextlib.suppress(a.AmdSmiLibraryException):  # no edge sensor on MI300X
                a.amdsmi_get_temp_metric(h, a.AmdSmiTemperatureType[t], current)
        a.amdsmi_get_power_info(h)
        a.amdsmi_get_energy_count(h)
        for c in clocks:
            a.amdsmi_get_clock_info(h, a.AmdSmiClkType[c])
        with contextlib.suppress(a.AmdSmiLibraryException):  # fanless
            a.amdsmi_get_gpu_fan_speed(h, 0)
        a.amdsmi_get_pcie_info(h)
        a.amdsmi_get_gpu_metrics_info(h)
        a.amdsmi_get_violation_status(h)


def _bare_cper(a: Any, h: Any, budget: int = CPER_PER_POLL) -> None:
    """Read up to ``budget`` CPER records from cursor 0 and decode their AFIDs, bare."""
    w = a.amdsmi_wrapper
    cursor, left = 0, budget
    while left > 0:
        headers = min(left, HEADERS_PER_CALL)
        buf = ctypes.create_string_buffer(BUFFER)
        size = ctypes.c_uint64(BUFFER)
        hdrs = (ctypes.POINTER(w.amdsmi_cper_hdr_t) * headers)()
        count, cur = ctypes.c_uint64(headers), ctypes.c_uint64(cursor)
        status = w.amdsmi_get_gpu_cper_entries(
            h, 7, buf, ctypes.byref(size), hdrs, ctypes.byref(count), ctypes.byref(cur)
        )
        for k in range(count.value):
            hdr = hdrs[k].contents
            raw = ctypes.string_at(ctypes.addressof(hdr), hdr.record_length)
            afids, n = (ctypes.c_uint64 * 12)(), ctypes.c_uint32(12)
            w.amdsmi_get_afids_from_cper(raw, len(raw), afids, ctypes.byref(n))
        left -= count.value
        if status == 0 or cur.value == cursor:
            break
        cursor = cur.value


def _bare_fast_cper(a: Any, handles: list[Any]) -> None:
    _bare_fast(a, handles)
    for h in handles:
        _bare_cper(a, h)


def _bare_slow(a: Any, handles: list[Any]) -> None:
    _bare_fast_cper(a, handles)
    blocks = [b for b in a.AmdSmiGpuBlock if b.name not in ("INVALID", "RESERVED")]
    temps = ("EDGE", "HOTSPOT", "VRAM", "HBM_0", "HBM_1", "HBM_2", "HBM_3")
    limits = ("MAX", "CRITICAL", "EMERGENCY")
    for h in handles:
        a.amdsmi_get_gpu_total_ecc_count(h)
        enabled = a.amdsmi_get_gpu_ecc_enabled(h)
        for b in blocks:
            if enabled & int(b):
                a.amdsmi_get_gpu_ecc_count(h, b)
        a.amdsmi_get_gpu_kfd_info(h)
        a.amdsmi_get_power_cap_info(h)
        for m in limits:
            for t in temps:
                with contextlib.suppress(a.AmdSmiLibraryException):  # no edge sensor, no limit
                    a.amdsmi_get_temp_metric(
                        h, a.AmdSmiTemperatureType[t], a.AmdSmiTemperatureMetric[m]
                    )
        a.amdsmi_get_gpu_bad_page_info(h)
        a.amdsmi_get_gpu_bad_page_threshold(h)


def fill_rings(fake: state.FakeAmdSmi, devices: int, entries: int) -> None:
    """Give every GPU a CPER ring of ``entries`` records (fatal, corrected, uncorrected)."""
    for i in range(devices):
        dev = fake.device(i)
        state.cper(
            dev,
            [
                (state.SEV_FATAL, [30]),
                (state.SEV_NON_FATAL_CORRECTED, [12, 13]),
                (state.SEV_NON_FATAL_UNCORRECTED, [12]),
            ],
        )
        dev.cper_count = entries


def cper_figures(devices: int, polls: int, workdir: Path) -> dict[str, Any]:
    """Slow-poll CPU with 0 and 1,000 pending CPER records per GPU; a 10,000-record burst.

    Each measured poll starts from cursor 0 (no ledger handed back), so it reads
    the same bounded chunk every time: the cost of a poll while records are
    pending. ``drain`` hands the ledger back until the ring is read.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    subject = prepare(devices, workdir)
    fake = state.FakeAmdSmi(workdir / "amdsmi-state.bin")
    through_slow, bare_slow = subject.polls["slow"]
    through_fast = subject.polls["fast"][0]
    out: dict[str, Any] = {"cper_per_poll_per_gpu": CPER_PER_POLL}
    for pending in (0, 1000):
        fill_rings(fake, devices, pending)
        out[f"slow_{pending}_pending"] = compare(
            f"slow_{pending}", subject.calls, through_slow, bare_slow, polls, subject.parse, True
        )
    fill_rings(fake, devices, 1000)
    backend = subject.backend
    ledger: dict[str, Any] = {}
    drained, started = 0, time.process_time()
    while True:
        reply = backend.handle(
            "poll", {"slow": False, "processes": False, "events": False, "ledger": ledger}
        )
        drained += 1
        ledger = reply["ledger"]
        if all(item["cursor"] >= 1000 for item in ledger.values()):
            break
    out["drain_1000"] = {"polls": drained, "cpu_seconds": time.process_time() - started}
    fill_rings(fake, devices, 0)
    (quiet,) = cpu_min([through_fast], polls)
    fill_rings(fake, devices, 10_000)
    (burst,) = cpu_min([through_fast], polls)
    out["fast_burst_10000"] = {
        "cpu_seconds_per_poll_quiet": quiet,
        "cpu_seconds_per_poll_burst": burst,
        "ratio": burst / quiet,
        "polls_to_drain": -(-10_000 // CPER_PER_POLL),
    }
    subject.close()
    fake.close()
    return out


def prepare(devices: int, workdir: Path) -> Subject:
    """The amdsmi backend with ``devices`` fake MI300X GPUs, ready to measure."""
    root = build.build(workdir / "amdsmi")
    fake = state.create(workdir / "amdsmi-state.bin", devices)
    # amdsmi finds its library while it is imported: the environment comes first.
    os.environ.update(build.env_for(root, {}))
    os.environ.update(fake.env)
    backend = AmdSmiBackend({"events": False})
    parse = reply_parser(backend.bootstrap())
    api = backend.api
    handles = [g.handle for g in backend.gpus]

    def poll(slow: bool) -> Any:
        return backend.handle("poll", {"slow": slow, "processes": False, "events": False})

    subject = Subject(
        calls=lambda: int(fake.state.calls),
        parse=parse,
        polls={
            "fast": (lambda: poll(False), lambda: _bare_fast_cper(api, handles)),
            "slow": (lambda: poll(True), lambda: _bare_slow(api, handles)),
        },
        close=backend.close,
        config={"sources": {"host": {"enabled": False}, "amdsmi": {}}},
        env={**build.env_for(root, {}), **fake.env},
        ids=[(str(i), uuid(fake.device(i))) for i in range(devices)],
    )
    subject.backend = backend  # type: ignore[attr-defined]
    return subject


def run(devices: int, polls: int, workdir: Path) -> dict[str, Any]:
    """Measure the amdsmi backend with ``devices`` fake MI300X GPUs, then its CPER reading."""
    result = measure(prepare(devices, workdir), devices, polls, workdir)
    result["cper"] = cper_figures(devices, polls, workdir / "cper")
    return result


def main(argv: list[str] | None = None) -> int:
    """Run standalone and print the JSON."""
    parser = argparse.ArgumentParser(description="amdsmi backend poll cost")
    parser.add_argument("--devices", type=int, default=8)
    parser.add_argument("--polls", type=int, default=200)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-amdsmi-") as tmp:
        report = run(args.devices, args.polls, Path(tmp))
    json.dump({"amdsmi": report}, sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
