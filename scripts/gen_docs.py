"""Generate docs/metrics.md and docs/configuration.md from the catalog and the config schema.

Usage: ``python scripts/gen_docs.py`` (writes) or ``--check`` (exit 1 when stale).
A test runs ``--check`` so the docs never drift from the code.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from exporter.catalog import CATALOG, amd, ccl, device, exporter_self, host, nvidia, workload  # noqa: E402
from exporter.config import leaves  # noqa: E402
from exporter.config.loader import describe_type, format_default  # noqa: E402

PIPE = "\\|"
DOMAINS = [
    ("Daemon", exporter_self),
    ("Host", host),
    ("Devices (NVIDIA and AMD)", device),
    ("NVIDIA only", nvidia),
    ("AMD only", amd),
    ("NCCL/RCCL", ccl),
    ("Workloads", workload),
]


def metrics_md() -> str:
    """The metrics reference page."""
    out = [
        "# Metrics",
        "",
        "Generated from `exporter/catalog/` by `scripts/gen_docs.py`; do not edit by hand.",
        "Device series carry only `device` and `uuid`; join on `uuid` with `accel_device_info`.",
        "",
    ]
    for title, module in DOMAINS:
        rows = module.ROWS
        if not rows:
            continue
        out += [f"## {title}", "", "| name | type | unit | labels | help |", "|---|" * 5]
        for row in rows:
            labels = ", ".join(f"`{lb}`" for lb in row.labels)
            text = row.help.replace("|", PIPE)
            unit = row.unit or ""
            out.append(f"| `{row.name}` | {row.kind.value} | {unit} | {labels} | {text} |")
        out.append("")
    out.append(f"{len(CATALOG)} families in all.")
    return "\n".join(out) + "\n"


def config_md() -> str:
    """The configuration reference page."""
    out = [
        "# Configuration",
        "",
        "Generated from `exporter/config/schema.py` by `scripts/gen_docs.py`; do not edit.",
        "",
        "Every key can be set in the YAML file (`--config.file`), by environment variable",
        "and by flag; flags win over the environment, which wins over the file. Durations",
        "are written `250ms`, `15s`, `1m`, `1h30m`. Unknown keys are errors.",
        "`accel-exporter config check FILE` validates a file; `accel-exporter config show`",
        "prints the effective configuration.",
        "",
        "| key | type | default | environment | flag |",
        "|---|" * 5,
    ]
    for leaf in leaves():
        default = format_default(leaf.default, leaf.type).replace("|", PIPE) or '""'
        kind = describe_type(leaf.type).replace("|", PIPE)
        out.append(f"| `{leaf.dotted}` | {kind} | `{default}` | `{leaf.env}` | `{leaf.flag}` |")
    return "\n".join(out) + "\n"


def main() -> int:
    """Write the pages, or with --check report the stale ones."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    stale = []
    for path, text in (
        (REPO / "docs/metrics.md", metrics_md()),
        (REPO / "docs/configuration.md", config_md()),
    ):
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(str(path.relative_to(REPO)))
        else:
            path.parent.mkdir(exist_ok=True)
            path.write_text(text)
    if stale:
        print("stale: " + ", ".join(stale) + " (run python scripts/gen_docs.py)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
