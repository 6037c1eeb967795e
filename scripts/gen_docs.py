"""Generate the metric, config, OTLP, migration and trend docs, the chart's schema, the names.

docs/metrics.md, docs/configuration.md and the chart's config schema whole; the
generated tables of docs/otlp.md, docs/migrating.md and docs/health.md (Trends); and
exporter/family_names.py, every family's name as a constant (scripts/gen_names.py).

Usage: ``python scripts/gen_docs.py`` (writes) or ``--check`` (exit 1 when stale).
A test runs ``--check`` so the docs never drift from the code.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from exporter import catalog, noisy_signals, trend, vendors  # noqa: E402
from exporter.catalog import (  # noqa: E402
    CATALOG,
    ccl,
    device,
    diag,
    exporter_self,
    fabric,
    host,
    totals,
    workload,
)
from exporter.catalog.otel import METRICS as OTEL  # noqa: E402
from exporter.catalog.otel import SEMCONV_VERSION  # noqa: E402
from exporter.commands.flags import DERIVED, key_help, leaf_class, sections  # noqa: E402
from exporter.config import leaves  # noqa: E402
from exporter.config.json_schema import config_schema  # noqa: E402
from exporter.config.keys import describe_type, format_default  # noqa: E402
from scripts import compat_table, gen_names  # noqa: E402

PIPE = "\\|"
# The section of each catalog domain, in catalog order; a vendor's is named by its title.
TITLES = {
    exporter_self: "Daemon",
    host: "Host",
    device: "Devices (every vendor)",
    totals: "Per-device totals of per-link families (derived while rendering)",
    ccl: "NCCL/RCCL",
    diag: "Diagnostic runs",
    workload: "Workloads",
    fabric: "Fabric: RDMA NICs and PCIe links (docs/fabric.md)",
}
TITLES.update(
    (sys.modules[f"exporter.catalog.{v.catalog}"], f"{v.title} only") for v in vendors.VENDORS
)
DOMAINS = [(TITLES[module], module) for module in catalog.DOMAINS]


def metrics_md() -> str:
    """The metrics reference page."""
    out = [
        "# Metrics",
        "",
        "Generated from `exporter/catalog/` by `scripts/gen_docs.py`; do not edit by hand.",
        "Device series carry only `device` and `uuid`; join on `uuid` with `accel_device_info`.",
        "*max series* is the family's series budget per source (`exporter/catalog/budget.py`):",
        "label sets past it are dropped and counted in `accel_exporter_series_dropped_total`.",
        "",
    ]
    for title, module in DOMAINS:
        rows = module.ROWS
        if not rows:
            continue
        out += [
            f"## {title}",
            "",
            "| name | type | unit | labels | max series | help |",
            "|" + "---|" * 6,
        ]
        for row in rows:
            labels = ", ".join(f"`{lb}`" for lb in row.labels)
            text = row.help.replace("|", PIPE)
            unit = row.unit or ""
            most = str(row.max_series) if row.max_series else ""
            out.append(f"| `{row.name}` | {row.kind.value} | {unit} | {labels} | {most} | {text} |")
        out.append("")
    out.append(f"{len(CATALOG)} families in all.")
    out += ["", *label_values_md()]
    return "\n".join(out) + "\n"


def label_values_md() -> list[str]:
    """The enumerated labels of every family and the values each may take."""
    out = [
        "## Label values",
        "",
        "These labels take only the values listed (`exporter/catalog/vocabulary.py`), with one",
        "vocabulary across vendors: where vendors report the same quantity the word is the same",
        '(`type="uncorrected"` on every vendor\'s ECC counter). A reading with another value is',
        "dropped and logged once per family, label and value; the test suite fails on it.",
        "Other labels (indices, names, reasons that follow a library's error codes) are free text.",
        "",
        "| family | label | values |",
        "|" + "---|" * 3,
    ]
    for row in CATALOG.values():
        for label, allowed in row.values.items():
            words = ", ".join(f"`{value}`" if value else '`""`' for value in allowed)
            out.append(f"| `{row.name}` | `{label}` | {words} |")
    return out


def config_md() -> str:
    """The configuration reference page."""
    out = [
        "# Configuration",
        "",
        "Generated from the sections in `exporter/config/` by `scripts/gen_docs.py`; do not edit.",
        "",
        "Every key can be set in the YAML file (`--config.file`), by environment variable",
        "and by flag; flags win over the environment, which wins over the file. Durations",
        "are written `250ms`, `15s`, `1m`, `1h30m`. Unknown keys are errors.",
        "`accel-exporter config check FILE` validates a file (`-`: standard input);",
        "`accel-exporter config show` prints the effective configuration in a form",
        "`config check` accepts. The descriptions are those of `accel-exporter --help-all`.",
        "Flags spell sections and sources as the file does (`--sources.ccl_ras.interval`),",
        "the key itself in kebab case. " + DERIVED,
        "Renamed keys still read, with a warning: `enrich` is now `workload`.",
        "",
    ]
    for section, summary in sections():
        out += [f"## `{section}`", "", summary[:1].upper() + summary[1:] + ".", ""]
        out += ["| key | description | type | default | environment / flag |", "|" + "---|" * 5]
        for leaf in leaves():
            if ".".join(leaf.path[:-1]) != section:
                continue
            default = format_default(leaf.default, leaf.type).replace("|", PIPE) or '""'
            kind = describe_type(leaf.type).replace("|", PIPE)
            text = key_help(leaf_class(leaf), leaf.path[-1]).replace("|", PIPE)
            out.append(
                f"| `{leaf.path[-1]}` | {text} | {kind} | `{default}` "
                f"| `{leaf.env}`<br>`{leaf.flag}` |"
            )
        out.append("")
    return "\n".join(out)


OTEL_BEGIN = "<!-- BEGIN GENERATED by scripts/gen_docs.py from exporter/catalog/otel.py -->"
OTEL_END = "<!-- END GENERATED -->"


def otel_table() -> str:
    """The Prometheus -> OpenTelemetry mapping of every catalog family."""
    out = [
        f"{len(OTEL)} families. *semconv*: the name, instrument, unit and required attributes",
        f"follow the OpenTelemetry semantic conventions ({SEMCONV_VERSION}, `hw.*`, Development).",
        "",
        "| Prometheus family | OTel name | instrument | unit | attributes | fixed attributes |",
        "|" + "---|" * 6,
    ]
    for m in OTEL.values():
        keys = ", ".join(
            f"`{key}`" if key == label else f"`{key}` (label `{label}`)"
            for label, key in zip(m.row.labels, m.keys, strict=True)
        )
        fixed = ", ".join(f"`{key}={value}`" for key, value in m.constants)
        name = f"`{m.name}`" + (" *semconv*" if m.semconv else "")
        out.append(
            f"| `{m.row.name}` | {name} | {m.instrument.value} | `{m.unit}` | {keys} | {fixed} |"
        )
    return "\n".join(out) + "\n"


def _region(page: str, current: str, begin_marker: str, body: str) -> str:
    """``current`` with the region after ``begin_marker`` (up to OTEL_END) replaced."""
    head, begin, rest = current.partition(begin_marker)
    _, end, tail = rest.partition(OTEL_END)
    if not begin or not end:
        raise SystemExit(f"{page} lacks the markers {begin_marker!r} ... {OTEL_END!r}")
    return f"{head}{begin_marker}\n{body}{OTEL_END}{tail}"


def otlp_md(current: str) -> str:
    """docs/otlp.md with its generated region replaced (the rest is written by hand)."""
    return _region("docs/otlp.md", current, OTEL_BEGIN, otel_table())


MIGRATING_BEGIN = "<!-- BEGIN GENERATED by scripts/gen_docs.py from scripts/compat_table.py -->"


def migrating_md(current: str) -> str:
    """docs/migrating.md with its field table generated from the compat table."""
    return _region("docs/migrating.md", current, MIGRATING_BEGIN, compat_table.markdown())


TRENDS_BEGIN = (
    "<!-- BEGIN GENERATED by scripts/gen_docs.py from exporter/trend_rules.yaml"
    " and exporter/noisy_signals.yaml -->"
)


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", PIPE)


def trends_tables() -> str:
    """The shipped trend rules and the noisy-signal registry, as two tables."""
    out = [
        "| reason | state | rate of | about | threshold | windows (raise / clear) | source |",
        "|" + "---|" * 7,
    ]
    for r in trend.RULES:
        match = ", ".join(f"{k}={' or '.join(v)}" for k, v in r.match)
        family = f"`{r.family}`" + (f" ({match})" if match else "")
        per_min = r.threshold_per_s * 60
        limit = f"{per_min:g}/min" if per_min < 60 else f"{r.threshold_per_s:g}/s"
        if r.scale == "pcie_link":
            limit = "more than DCGM's allowed rate at the current link (see source)"
        windows = f"{r.raise_windows} / {r.clear_windows} of {r.length_s:g} s"
        out.append(
            f"| `{r.reason}` | {r.state} | {family} | {', '.join(r.subject)} | {limit} |"
            f" {windows} | {_cell(r.source)} |"
        )
    out += [
        "",
        "| entry (`reason` label) | signals | when | effect | what the vendor found"
        " | reference | why this condition |",
        "|" + "---|" * 7,
    ]
    for e in noisy_signals.REGISTRY:
        out.append(
            f"| `{e.id}` | {', '.join(f'`{s}`' for s in e.signals)} | {_cell(e.when.describe())} |"
            f" {e.effect} | {_cell(e.statement)} | {_cell(e.reference)} | {_cell(e.why)} |"
        )
    return "\n".join(out) + "\n"


def health_md(current: str) -> str:
    """docs/health.md with its trend tables generated from the rules and the registry."""
    return _region("docs/health.md", current, TRENDS_BEGIN, trends_tables())


VALUES_SCHEMA = REPO / "helm/accel-exporter/values.schema.json"


def values_schema_json(current: str) -> str:
    """The chart's values.schema.json with its ``config`` property generated from the daemon's."""
    doc = json.loads(current)
    doc["properties"]["config"] = {
        **config_schema(),
        "description": "The daemon's config file (accel-exporter config show); checked "
        "against the daemon's own schema (generated by scripts/gen_docs.py).",
    }
    return json.dumps(doc, indent=2) + "\n"


def main() -> int:
    """Write the pages, or with --check report the stale ones."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    stale = []
    otlp = REPO / "docs/otlp.md"
    migrating = REPO / "docs/migrating.md"
    health = REPO / "docs/health.md"
    for path, text in (
        (REPO / "docs/metrics.md", metrics_md()),
        (REPO / "docs/configuration.md", config_md()),
        (otlp, otlp_md(otlp.read_text())),
        (migrating, migrating_md(migrating.read_text())),
        (health, health_md(health.read_text())),
        (VALUES_SCHEMA, values_schema_json(VALUES_SCHEMA.read_text())),
        (REPO / gen_names.PATH, gen_names.family_names_py(DOMAINS)),
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
