"""The stack-dump parser on captured faulthandler dumps, and a live dump through the real files."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from exporter.workers import stackdump

DUMPS = Path(__file__).resolve().parents[1] / "fixtures" / "stackdumps"
HANG_MAIN = 0x7F4CE5A73B80
SEGV_MAIN = 0x7F02484A4B80
SEGV_THREAD_MAIN = 0x7F7321E0AB80


def dump(name: str) -> str:
    return (DUMPS / name).read_text()


def test_a_hang_names_the_binding_call_of_the_main_thread() -> None:
    text = dump("hang.txt")
    assert stackdump.hung_call(text, HANG_MAIN) == "nvmlDeviceGetPowerUsage"
    assert stackdump.main_thread_frames(text, HANG_MAIN) == [
        "nvmlDeviceGetPowerUsage",
        "read_power",
        "<module>",
    ]
    # A signal dump is not a crash.
    assert not stackdump.fatal_on(text, HANG_MAIN)


def test_without_a_published_ident_the_thread_that_took_the_signal_is_used() -> None:
    assert stackdump.hung_call(dump("hang.txt"), 0) == "nvmlDeviceGetPowerUsage"


def test_an_ident_absent_from_the_dump_falls_back_to_the_current_thread() -> None:
    assert stackdump.hung_call(dump("hang.txt"), 0x1234) == "nvmlDeviceGetPowerUsage"


def test_a_crash_on_the_main_thread_is_fatal_there_and_names_its_call() -> None:
    text = dump("segv.txt")
    assert stackdump.fatal_on(text, SEGV_MAIN)
    assert stackdump.hung_call(text, SEGV_MAIN) == "amdsmi_get_gpu_activity"


def test_a_crash_on_another_thread_is_not_the_main_threads_device() -> None:
    text = dump("segv_thread.txt")
    assert not stackdump.fatal_on(text, SEGV_THREAD_MAIN)
    # The main thread's own frames are still found by its ident, not the crashing thread's.
    assert stackdump.hung_call(text, SEGV_THREAD_MAIN) == "nvmlDeviceGetPowerUsage"
    # Without the ident, the crashing ("Current") thread is all the dump can say.
    assert stackdump.hung_call(text, 0) == "amdsmi_event_read"
    assert stackdump.fatal_on(text, 0)


@pytest.mark.parametrize("cut", [0.3, 0.5, 0.8, 0.95])
def test_a_dump_read_while_being_written_never_blames_another_call(cut: float) -> None:
    text = dump("hang.txt")
    # faulthandler writes the other threads first: a read before the main thread's block
    # names nothing yet (the daemon reads again), never the event reader's call.
    part = text[: int(len(text) * cut)] + '  File "/opt/worker/backend.py", line 1 in nvmlDev'
    call = stackdump.hung_call(part, HANG_MAIN)
    if "Current thread" in part and "read_power" in part:
        assert call == "nvmlDeviceGetPowerUsage"
    else:
        assert call == ""
    assert stackdump.hung_call(part, 0) == call


def test_empty_and_foreign_text_give_nothing() -> None:
    assert stackdump.hung_call("", HANG_MAIN) == ""
    assert stackdump.hung_call("worker ready\nno dump here\n", 0) == ""
    assert not stackdump.fatal_on("", 0)


WORKER = textwrap.dedent(
    """
    import ctypes, sys, threading
    from exporter.workers import stackdump
    assert stackdump.attach()
    libc = ctypes.CDLL(None)
    def amdsmi_get_power_info(handle):
        # Announced from inside the call's Python frame: any dump from now on is in it.
        print(threading.main_thread().ident, flush=True)
        return libc.pause()
    amdsmi_get_power_info(0)
    """
)


def test_a_live_worker_in_a_c_call_is_named_through_the_real_dump_file() -> None:
    out = stackdump.DumpFile()
    env = {**os.environ, **out.env()}
    proc = subprocess.Popen(
        [sys.executable, "-c", WORKER],
        env=env,
        pass_fds=(out.fd,),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        ident = int(proc.stdout.readline())
        proc.send_signal(stackdump.DUMP_SIGNAL)
        call = ""
        deadline = time.monotonic() + 30
        while not call and time.monotonic() < deadline:
            time.sleep(0.02)
            call = stackdump.hung_call(out.read(), ident)
        assert call == "amdsmi_get_power_info"
    finally:
        proc.kill()
        proc.wait()
        out.close()
