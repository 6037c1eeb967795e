"""exporter.log keeps structlog off rich: plain tracebacks, rich still importable after."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

PROBE = textwrap.dedent(
    """
    import io, json, sys
    from exporter import log
    loaded = "rich" in sys.modules
    out = io.StringIO()
    log.configure("info", "console", stream=out)
    try:
        token = "s3cret-value"
        raise ValueError("boom")
    except ValueError:
        log.get().exception("failed")
    import rich  # hidden while structlog loaded, not after
    print(json.dumps({"loaded": loaded, "after": rich.__name__, "text": out.getvalue()}))
    """
)


def test_structlog_loads_without_rich_and_tracebacks_are_plain() -> None:
    pytest.importorskip("rich")  # the dev install has it (tpu-info); what a TPU node has
    proc = subprocess.run(
        [sys.executable, "-c", PROBE],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
        check=True,
    )
    seen = json.loads(proc.stdout.splitlines()[-1])
    assert seen["loaded"] is False and seen["after"] == "rich"
    text = seen["text"]
    assert "Traceback (most recent call last)" in text and "ValueError: boom" in text
    assert "s3cret-value" not in text  # rich's tracebacks print the frames' locals
