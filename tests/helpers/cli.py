"""Run ``accel-exporter`` subcommands as a user would: a subprocess of the real CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
# After the checkout on the PYTHONPATH of every daemon and command the tests start:
# there ``import rich`` fails, as in the container image (Containerfile: the runtime
# extras only). The dev extras bring rich in (tpu-info, twine) and structlog imports it
# whenever it can, for console tracebacks that the tests' json logs never render: 0.13 s
# of CPU in each daemon, command and worker process, about 0.4 s per daemon start, some
# minutes of CPU over the suite on a 2-core CI machine.
WITHOUT_RICH = Path(__file__).resolve().with_name("without_rich")


def cli_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """This environment without ACCEL_EXPORTER_* variables, plus ``env``."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("ACCEL_EXPORTER_")}
    full_env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(WITHOUT_RICH)])
    full_env.update(env or {})
    return full_env


def cli_command(*args: str) -> list[str]:
    """The argv of ``accel-exporter ARGS`` run from this checkout."""
    return [sys.executable, "-m", "exporter", *args]


def run_cli(
    *args: str, env: Mapping[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """``python -m exporter ARGS`` with a clean ACCEL_EXPORTER_* environment plus ``env``."""
    return subprocess.run(
        cli_command(*args),
        env=cli_env(env),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=str(REPO),
    )


def record(
    out: Path,
    *cmd: str,
    env: Mapping[str, str] | None = None,
    args: Sequence[str] = (),
) -> subprocess.CompletedProcess[str]:
    """``accel-exporter record [ARGS] --out OUT -- CMD``."""
    return run_cli("record", *args, "--out", str(out), "--", *cmd, env=env)


def run_log(out: Path) -> list[dict[str, Any]]:
    """The lines of ``OUT/run.jsonl``."""
    return [json.loads(line) for line in (out / "run.jsonl").read_text().splitlines()]
