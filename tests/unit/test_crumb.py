"""The breadcrumb page: what a worker writes, what the daemon reads, and which devices a worker serves."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import textwrap
import time

from exporter.backend_api import crumb
from exporter.workers.crumb import Page

WORKER = textwrap.dedent(
    """
    import sys, threading
    from exporter.backend_api import crumb
    print(int(crumb.attach()), threading.main_thread().ident, flush=True)
    for line in sys.stdin:
        op, _, arg = line.strip().partition(" ")
        if op == "device":
            crumb.device(int(arg))
        elif op == "identity":
            crumb.identity(arg)
        elif op == "clear":
            crumb.clear()
        print("ok", flush=True)
    """
)


class Worker:
    """A child process that attached the page through the environment, as a device worker does."""

    def __init__(self, page: Page) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", WORKER],
            env={**os.environ, **page.env()},
            pass_fds=(page.fd,),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        attached, ident = self._line().split()
        assert attached == "1"
        self.ident = int(ident)

    def _line(self) -> str:
        assert self.proc.stdout is not None
        return self.proc.stdout.readline()

    def do(self, command: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        assert self._line().strip() == "ok"

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=10)


def test_the_daemon_reads_what_the_worker_wrote_without_its_help() -> None:
    page = Page()
    worker = Worker(page)
    try:
        # Attached: the main thread is published, no device yet.
        seen = page.read()
        assert (seen.index, seen.identity, seen.main_thread) == (None, "", worker.ident)
        worker.do("device 3")
        worker.do("identity 00000000:3B:00.0")
        time.sleep(0.05)
        seen = page.read()
        assert (seen.index, seen.identity) == (3, "00000000:3B:00.0")
        assert seen.held >= 0.05
        # A new device forgets the previous one's identity and restarts the clock.
        worker.do("device 0")
        seen = page.read()
        assert (seen.index, seen.identity) == (0, "")
        assert seen.held < 5
        worker.do("clear")
        assert page.read().index is None
    finally:
        worker.close()
        page.close()
    # The page outlives the worker: a dead worker's last word is still readable.


def test_a_dead_workers_last_crumb_stays_readable_until_reset() -> None:
    page = Page()
    worker = Worker(page)
    worker.do("device 5")
    worker.do("identity GPU-5")
    worker.proc.kill()
    worker.proc.wait()
    try:
        assert (page.read().index, page.read().identity) == (5, "GPU-5")
        page.reset()
        seen = page.read()
        assert (seen.index, seen.identity, seen.main_thread, seen.held) == (None, "", 0, 0.0)
    finally:
        page.close()


def test_identity_is_cut_to_the_page_and_a_bad_length_reads_as_unknown() -> None:
    page = Page()
    try:
        long = "x" * (crumb.TEXT_BYTES + 40)
        worker = Worker(page)
        worker.do("device 1")
        worker.do("identity " + long)
        worker.close()
        assert page.read().identity == long[: crumb.TEXT_BYTES]
        # A torn or corrupt length field never reads past the page.
        for bad in (-1, crumb.TEXT_BYTES + 1, 1 << 30):
            page._map[4:8] = struct.pack("=i", bad)
            assert page.read().identity == ""
    finally:
        page.close()


def test_without_a_page_every_call_still_works() -> None:
    assert not crumb.attach({})
    assert not crumb.attach({crumb.ENV_FD: "not-a-number"})
    assert not crumb.attach({crumb.ENV_FD: "987654"})  # no such descriptor
    crumb.device(2)
    crumb.identity("GPU-x")
    crumb.clear()


def test_wanted_applies_skip_and_only() -> None:
    assert crumb.wanted({}, 4) == [0, 1, 2, 3]
    assert crumb.wanted({crumb.ISOLATION_KEY: {"skip": [1, 3]}}, 4) == [0, 2]
    assert crumb.wanted({crumb.ISOLATION_KEY: {"only": [2]}}, 4) == [2]
    # A probe of a device the library no longer enumerates serves nothing.
    assert crumb.wanted({crumb.ISOLATION_KEY: {"only": [7]}}, 4) == []
    assert crumb.wanted({crumb.ISOLATION_KEY: {"only": [2], "skip": [2]}}, 4) == []
    assert crumb.wanted({crumb.ISOLATION_KEY: None}, 2) == [0, 1]


def _resident_kib(name: str) -> int:
    """Resident KiB of this process's mappings of the memfd called ``name``."""
    total, inside = 0, False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            if line[0] in "0123456789abcdef" and "-" in line.split()[0]:
                inside = f"memfd:{name}" in line
            elif inside and line.startswith("Rss:"):
                total += int(line.split()[1])
    return total


def test_forgotten_learnt_identities_read_as_nothing_and_are_not_resident() -> None:
    page = Page()
    worker = Worker(page)
    try:
        for index in range(0, crumb.LEARNT_DEVICES, 7):
            worker.do(f"device {index}")
            worker.do(f"identity uuid=GPU-{index}")
        worker.do("clear")
        assert len(page.learnt()) == len(range(0, crumb.LEARNT_DEVICES, 7))
        # Read: every slot's page is resident in the daemon too.
        assert _resident_kib("accel-exporter-crumb") > 100
        page.forget_learnt()
        assert _resident_kib("accel-exporter-crumb") < 16
        assert page.read().main_thread == worker.ident  # the head is kept
        assert page.learnt() == {}  # (reading them makes their pages resident again)
        # A slot written again after that is read again.
        worker.do("device 5")
        worker.do("identity uuid=GPU-5")
        worker.do("clear")
        assert page.learnt() == {5: "uuid=GPU-5"}
    finally:
        worker.close()
        page.close()
