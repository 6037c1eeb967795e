"""The generated documentation (metrics, configuration, the OTel mapping) matches the code."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_generated_docs_are_current():
    result = subprocess.run(
        [sys.executable, str(REPO / "scripts/gen_docs.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr


def test_the_otlp_page_lists_every_family():
    from exporter.catalog.otel import METRICS

    text = (REPO / "docs/otlp.md").read_text()
    for name, mapping in METRICS.items():
        assert f"| `{name}` | `{mapping.name}`" in text, name


def test_the_metrics_page_lists_every_enumeration():
    from exporter.catalog import CATALOG

    text = (REPO / "docs/metrics.md").read_text()
    assert "| `accel_ecc_errors_total` | `type` | `corrected`, `uncorrected`, `deferred` |" in text
    for name, row in CATALOG.items():
        for label in row.values:
            assert f"| `{name}` | `{label}` |" in text, (name, label)
