"""The chart's and kustomize's copies of the rules and dashboards never drift from deploy/."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

from tests.helpers.deploy import REPO

SYNC = REPO / "deploy" / "sync.py"


def load_sync(root: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        f"sync_{abs(hash(root))}", root / "deploy" / "sync.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_committed_copies_are_up_to_date() -> None:
    result = subprocess.run(
        [sys.executable, str(SYNC), "--check"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_copies_are_byte_identical_to_their_sources() -> None:
    sync = load_sync(REPO)
    outputs = dict(sync.outputs())
    for source in (
        *sorted((REPO / "deploy" / "grafana").glob("*.json")),
        REPO / "deploy" / "prometheus" / "alerts.yaml",
        REPO / "deploy" / "prometheus" / "recording.yaml",
    ):
        copies = [path for path, data in outputs.items() if path.name == source.name]
        assert copies, source
        for path in copies:
            assert path.read_bytes() == source.read_bytes(), path


def test_check_detects_drift_and_sync_repairs_it(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    shutil.copytree(REPO / "deploy", root / "deploy", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "helm", root / "helm")
    sync = load_sync(root)
    assert sync.stale_files() == []
    # An edited dashboard, an edited rule, a copy edited by hand, a leftover file.
    board = root / "deploy" / "grafana" / "ccl-jobs.json"
    board.write_text(board.read_text().replace("NCCL and RCCL jobs", "NCCL/RCCL jobs"))
    rules = root / "deploy" / "prometheus" / "alerts.yaml"
    rules.write_text(rules.read_text().replace("for: 5m", "for: 6m", 1))
    copy = root / "helm" / "accel-exporter" / "files" / "dashboards" / "node-gpu-detail.json"
    copy.write_text(copy.read_text() + " ")
    leftover = root / "helm" / "accel-exporter" / "files" / "dashboards" / "old.json"
    leftover.write_text("{}")
    stale = {p.relative_to(root).as_posix() for p in sync.stale_files()}
    assert stale == {
        "helm/accel-exporter/files/dashboards/ccl-jobs.json",
        "helm/accel-exporter/files/dashboards/node-gpu-detail.json",
        "helm/accel-exporter/files/dashboards/old.json",
        "helm/accel-exporter/files/prometheus/alerts.yaml",
        "deploy/kustomize/components/grafana-dashboards/dashboards/ccl-jobs.json",
        "deploy/kustomize/components/prometheus-operator/prometheusrule.yaml",
    }
    assert sync.main(["--check"]) == 1
    assert sync.main([]) == 0
    assert sync.stale_files() == []
    assert not leftover.exists()
