"""``scripts/gpu-validate OUTDIR``: validate accel-exporter on this machine's NVIDIA GPUs.

Exit status: 1 when a check disagreed, 0 otherwise (phases in error or skipped are
in the report, never counted as passed), 2 for a usage error.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from . import (
    phase_ccl,
    phase_checkpoint,
    phase_compare,
    phase_cost,
    phase_install,
    phase_load,
    phase_record,
)
from .phases import Kit, PhaseFn, run, stop
from .report import SKIPPED, Phase, context, exit_status, write
from .smi import Smi, SmiError

BUDGET_SECONDS = 450.0  # the whole run, under 8 minutes with room to stop and write


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="scripts/gpu-validate",
        description="Validate accel-exporter against this machine's NVIDIA GPUs, driver "
        "and NCCL (read-only: no GPU setting is changed). Writes report.json and "
        "summary.txt into OUTDIR.",
    )
    parser.add_argument("out", nargs="?", type=Path, help="folder for the report")
    parser.add_argument(
        "--fetch-wheels",
        type=Path,
        metavar="DIR",
        help="on a machine with network: download the wheels the GPU machine lacks "
        "(cp312 manylinux x86_64) into DIR, then exit",
    )
    parser.add_argument(
        "--wheels", type=Path, default=phase_install.WHEELS, help="carried wheels folder"
    )
    parser.add_argument(
        "--python",
        help="an interpreter that already has the project installed (skips the install)",
    )
    parser.add_argument("--nvidia-smi", default="nvidia-smi", help="the nvidia-smi to compare with")
    parser.add_argument("--budget", type=float, default=BUDGET_SECONDS, help="seconds in all")
    parser.add_argument(
        "--skip",
        default="",
        metavar="PHASES",
        help="comma-separated phases not to run (reported as skipped): install, compare, "
        "load, checkpoint, ccl, record, cost",
    )
    return parser


def phases(args: argparse.Namespace) -> list[tuple[str, PhaseFn, float]]:
    """(name, function, timeout) of every phase, in order."""

    def install(kit: Kit, phase: Phase) -> None:
        phase_install.run_phase(
            kit, phase, given=args.python is not None, wheels=args.wheels, base=sys.executable
        )

    return [
        ("install", install, 240),
        ("compare", phase_compare.run_phase, 120),
        ("load", phase_load.run_phase, 150),
        ("checkpoint", phase_checkpoint.run_phase, 90),
        ("ccl", phase_ccl.run_phase, 120),
        ("record", phase_record.run_phase, 120),
        ("cost", phase_cost.run_phase, 90),
    ]


def main(argv: list[str] | None = None) -> int:
    """Run every phase, write the report after each, stop what the kit started."""
    args = _parser().parse_args(argv)
    if args.fetch_wheels is not None:
        return phase_install.fetch_wheels(args.fetch_wheels)
    if args.out is None:
        _parser().print_usage(sys.stderr)
        return 2
    kit = Kit(
        out=args.out.resolve(),
        python=args.python or sys.executable,
        smi=Smi(args.nvidia_smi),
        deadline=time.monotonic() + args.budget,
    )
    about = context()
    try:
        about["nvidia_smi"] = args.nvidia_smi
        about["gpus"] = [
            f"{r['name'].text} {r['uuid'].text}" for r in kit.smi.query(["name", "uuid"]).rows
        ]
    except SmiError as exc:
        about["nvidia_smi_error"] = str(exc)
    done: list[Phase] = []
    skip = {p.strip() for p in args.skip.split(",") if p.strip()}
    unknown = skip - {name for name, _, _ in phases(args)}
    if unknown:
        print(f"--skip: unknown phases {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    try:
        for name, fn, timeout in phases(args):
            phase = Phase(name, SKIPPED, "--skip") if name in skip else run(kit, name, fn, timeout)
            done.append(phase)
            about["torch"] = kit.torch_said()
            write(args.out, done, about)
            print(f"{name}: {phase.status}{f' ({phase.reason})' if phase.reason else ''}")
    finally:
        for _, proc in kit.children:
            if proc.poll() is None:
                stop(proc)
    report, summary = write(args.out, done, about)
    print(summary.read_text(), end="")
    print(f"report: {report}")
    return exit_status(done, about.get("gpus", []))


if __name__ == "__main__":
    sys.exit(main())
