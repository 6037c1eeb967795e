"""Run a function as another user, to meet the permission errors root never sees."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

NOBODY = 65534


def run_as(uid: int, fn: Callable[[], Any]) -> Any:
    """``fn()`` in a forked child that dropped to ``uid``; its (JSON-able) result.

    A fork, not a new interpreter: the interpreter lives under /root, which the
    other user could not even execute.
    """
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child never returns into pytest
        code = 1
        try:
            os.close(rfd)
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            os.write(wfd, json.dumps(fn()).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(wfd)
    with os.fdopen(rfd, "rb") as fh:
        data = fh.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "the unprivileged child failed"
    return json.loads(data)
