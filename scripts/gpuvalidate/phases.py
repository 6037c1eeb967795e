"""The kit's shared state and the phase runner: each phase under its own deadline.

A phase is a function ``(kit, phase) -> None`` that records checks and figures
on ``phase``. It raises :class:`Skip` when what it needs is not here. Whatever
else happens in it (an exception, a deadline) is recorded as ``error`` and the
next phase runs; processes a phase started are killed when it ends.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .expo import Daemon
from .report import ERROR, Phase
from .smi import Smi
from .workloads import NCCL_VERSION

# Kept free at the end of the overall budget, to stop processes and write the report.
RESERVE_SECONDS = 15.0


class Skip(Exception):
    """The phase cannot run here; the message says why."""


@dataclass
class Kit:
    """What every phase shares."""

    out: Path
    python: str
    smi: Smi
    deadline: float
    env: dict[str, str] = field(default_factory=dict)
    daemon: Daemon | None = None
    uuids: list[str] = field(default_factory=list)
    ras_port: int = 0
    children: list[tuple[str, subprocess.Popen[bytes]]] = field(default_factory=list)
    current: str = ""
    _torch: tuple[bool, str] | None = None

    @property
    def work(self) -> Path:
        """Scratch files: logs, configs, the record run."""
        path = self.out / "work"
        path.mkdir(parents=True, exist_ok=True)
        return path

    def spawn(
        self, args: Sequence[str], *, env: Mapping[str, str] | None = None, log: str = ""
    ) -> subprocess.Popen[bytes]:
        """Start a process in its own session, owned by the current phase (killed with it)."""
        out = (self.work / log).open("ab") if log else subprocess.DEVNULL
        proc = subprocess.Popen(
            list(args),
            env={**os.environ, **self.env, **(env or {})},
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT if log else subprocess.DEVNULL,
            cwd=self.work,
            start_new_session=True,
        )
        if log:
            out.close()  # type: ignore[union-attr]
        self.children.append((self.current, proc))
        return proc

    def reap(self, owner: str) -> None:
        """Kill (process group) and reap every process ``owner`` started that still runs."""
        for who, proc in self.children:
            if who == owner and proc.poll() is None:
                stop(proc)

    def torch(self) -> tuple[bool, str]:
        """Whether torch with CUDA and NCCL imports in the kit's interpreter, and what it said."""
        if self._torch is None:
            code = (
                "import torch\n"
                "assert torch.cuda.is_available(), 'torch.cuda.is_available() is False'\n"
                f"{NCCL_VERSION}\n"
                "print(f'torch {torch.__version__} cuda {torch.version.cuda} nccl {nccl_version()}"
                " on {torch.cuda.get_device_name(0)}')\n"
            )
            try:
                done = subprocess.run(
                    [self.python, "-c", code],
                    capture_output=True,
                    text=True,
                    timeout=120,
                    env={**os.environ, **self.env},
                    cwd=self.work,
                )
                lines = (done.stdout + done.stderr).strip().splitlines()
                tail = lines[-1] if lines else f"exit {done.returncode}"
                self._torch = (done.returncode == 0, tail)
            except (OSError, subprocess.TimeoutExpired) as exc:
                self._torch = (False, str(exc))
        return self._torch

    def gpus(self) -> list[str]:
        """The UUIDs nvidia-smi lists (asked once); RuntimeError when it lists none."""
        if not self.uuids:
            self.uuids = [row["uuid"].text for row in self.smi.query(["uuid"]).rows]
            if not self.uuids:
                raise RuntimeError("nvidia-smi lists no GPU")
        return self.uuids

    def torch_said(self) -> str | None:
        """What the torch probe printed (its versions line or its error), None if not run."""
        return None if self._torch is None else self._torch[1]

    def need_torch(self) -> str:
        """Torch's version line, or Skip with the reason."""
        ok, said = self.torch()
        if not ok:
            raise Skip(f"torch with CUDA is not usable here: {said}")
        return said

    def need_daemon(self) -> Daemon:
        """The running daemon, or Skip."""
        if self.daemon is None or self.daemon.proc is None or self.daemon.proc.poll() is not None:
            raise Skip("the daemon is not running (see the compare phase)")
        return self.daemon

    def left(self) -> float:
        """Seconds left in the overall budget, less the reserve."""
        return self.deadline - time.monotonic() - RESERVE_SECONDS


def stop(proc: subprocess.Popen[Any], grace: float = 5.0) -> None:
    """SIGTERM the process group, SIGKILL it after ``grace``, reap.

    Every process the kit starts leads its own session (so its children go with it);
    one that does not is signalled alone.
    """
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(sig)
        try:
            proc.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


PhaseFn = Callable[[Kit, Phase], None]


def run(kit: Kit, name: str, fn: PhaseFn, timeout: float) -> Phase:
    """Run one phase under ``timeout`` (cut to what is left of the budget)."""
    phase = Phase(name)
    budget = min(timeout, kit.left())
    if budget < 5:
        phase.status, phase.reason = ERROR, "no time left in the overall budget"
        return phase
    kit.current = name
    started = time.monotonic()

    def body() -> None:
        try:
            fn(kit, phase)
        except Skip as exc:
            phase.skip(str(exc))
        except Exception as exc:  # a phase's failure is data, never the kit's end
            phase.status, phase.reason = ERROR, f"{type(exc).__name__}: {exc}"
            with (kit.work / "errors.log").open("a") as log:
                log.write(f"--- {name}\n{traceback.format_exc()}\n")

    thread = threading.Thread(target=body, name=f"phase-{name}", daemon=True)
    thread.start()
    thread.join(budget)
    if thread.is_alive():
        # The thread cannot be stopped: what it records from now on lands in the old copy.
        phase = replace(phase, checks=list(phase.checks), figures=dict(phase.figures))
        phase.status, phase.reason = ERROR, f"timed out after {budget:.0f} s"
    kit.reap(name)
    phase.seconds = time.monotonic() - started
    phase.settle()
    return phase
