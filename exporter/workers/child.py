"""The worker process loop, started as ``python -m exporter.workers``.

It owns one backend (which loads a vendor library) and answers framed requests
on stdin/stdout one at a time. Before anything else it moves the protocol
channel off fd 1 and points fd 1 at stderr, because vendor libraries print to
stdout and would corrupt the frames. It asks the kernel to kill it when the
daemon dies, so no worker outlives its parent, and exits at end of input.
"""

from __future__ import annotations

import ctypes
import importlib
import os
import signal
import sys
import traceback
from typing import Any

from exporter import log
from exporter.backend_api import crumb
from exporter.backend_api.backend import Backend, BackendError, BackendUnavailable
from exporter.workers import stackdump
from exporter.workers.protocol import ProtocolError, encode, read_frame_fd, write_fd, write_frame_fd

__all__ = ["main", "protocol_out", "serve", "write_frame_fd"]

PR_SET_PDEATHSIG = 1

# The fd frames are written to; set by main(). A test backend may write raw bytes here.
protocol_out: int = -1


def _die_with_parent() -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass  # not Linux: the stdin EOF check still ends the worker


def load_backend(spec: str, config: dict[str, Any]) -> Backend:
    """Import ``module:Class`` and construct it with ``config``."""
    module_name, _, class_name = spec.partition(":")
    module = importlib.import_module(module_name)
    cls = getattr(module, class_name)
    backend: Backend = cls(config)
    return backend


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:2000]


def reply_frame(reply: dict[str, Any]) -> bytes:
    """The frame of one reply; a fault frame when the reply cannot be encoded.

    A backend that returns a value JSON cannot carry (NaN, infinity, an object)
    or a reply over the frame limit must cost that one call, not the worker:
    dying here would take every device of the backend down with it.
    """
    try:
        return encode(reply)
    except Exception as exc:
        log.get(source="worker").error("reply not encodable", detail=_describe(exc))
        return encode(
            {
                "type": "fault",
                "id": reply.get("id"),
                "reason": "bad_reply",
                "detail": f"the backend's reply cannot be sent: {_describe(exc)}",
            }
        )


def serve(inp: int, out: int) -> int:
    """Run the request loop until end of input; returns the exit status."""
    init = read_frame_fd(inp)
    if init is None:
        return 0
    if init.get("type") != "init" or not isinstance(init.get("backend"), str):
        write_frame_fd(
            out,
            {
                "type": "error",
                "kind": "error",
                "reason": "protocol_error",
                "detail": "first frame must be init",
            },
        )
        return 2
    level = init.get("log_level")
    if isinstance(level, str):
        # The daemon's level, from its init frame (never from the environment).
        log.configure(level, "json", sys.stderr)
    config = init.get("config") or {}
    try:
        backend = load_backend(init["backend"], config)
        inventory = backend.bootstrap()
    except BackendUnavailable as exc:
        write_frame_fd(
            out,
            {"type": "error", "kind": "unavailable", "reason": exc.reason, "detail": exc.detail},
        )
        return 0
    except BackendError as exc:
        write_frame_fd(
            out, {"type": "error", "kind": "error", "reason": exc.reason, "detail": exc.detail}
        )
        return 0
    except Exception as exc:
        traceback.print_exc(file=sys.stderr)
        write_frame_fd(
            out,
            {
                "type": "error",
                "kind": "error",
                "reason": "bootstrap_exception",
                "detail": _describe(exc),
            },
        )
        return 0
    write_frame_fd(out, {"type": "ready", "inventory": inventory, "pid": os.getpid()})
    try:
        while True:
            request = read_frame_fd(inp)
            if request is None:
                return 0
            call_id = request.get("id")
            if request.get("type") != "call" or not isinstance(call_id, int):
                raise ProtocolError("expected a call frame")
            try:
                result = backend.handle(str(request.get("op")), request.get("args") or {})
                reply: dict[str, Any] = {"type": "result", "id": call_id, "result": result}
            except BackendError as exc:
                reply = {"type": "fault", "id": call_id, "reason": exc.reason, "detail": exc.detail}
            except Exception as exc:
                traceback.print_exc(file=sys.stderr)
                reply = {
                    "type": "fault",
                    "id": call_id,
                    "reason": "exception",
                    "detail": _describe(exc),
                }
            # A request that raised mid-device must not leave that device named for
            # whatever hangs next outside any device.
            crumb.clear()
            write_fd(out, reply_frame(reply))
    finally:
        try:
            backend.close()
        except Exception:
            traceback.print_exc(file=sys.stderr)


def main() -> int:
    """Entry point of the worker process."""
    global protocol_out
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the daemon decides when workers stop
    protocol_out = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    # Where the daemon looks when a call hangs or the library crashes: the device
    # being touched (crumb) and every thread's stack (faulthandler).
    crumb.attach()
    stackdump.attach()
    # JSON lines on stderr: the parent re-logs them with its own context. At info
    # until the init frame names the daemon's level (serve).
    log.configure("info", "json", sys.stderr)
    try:
        return serve(0, protocol_out)
    except ProtocolError as exc:
        print(f"worker protocol error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0
