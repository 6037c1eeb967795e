"""Each vendor's fake node through the daemon, profile by profile, switched by SIGHUP.

Per profile: the samples stay within the node's budget (docs/profiles.md), the
daemon's own accel_exporter_series adds up to what it served, no series carries
more than 15 labels, and no family outside the profile appears. Switching the
profile by SIGHUP drops the families it leaves out from the very next scrape,
and every counter it keeps goes on from where it was.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporter.catalog import CATALOG
from exporter.catalog.profiles import members
from exporter.config.workload import MAX_SERIES_LABELS
from tests.helpers.daemon import Daemon, samples
from tests.helpers.nodes import node
from tests.helpers.series import measure, settled

# The budgets of docs/profiles.md: the for the 8-GPU H100-class node,
# ceilings a little above what the other fakes serve today for the rest.
BUDGETS: dict[str, dict[str, int]] = {
    "nvidia": {"minimal": 300, "default": 1000, "full": 2300},
    "amd": {"minimal": 300, "default": 1000, "full": 1450},
    "amd_cpx": {"minimal": 2000, "default": 7000, "full": 10500},
    "intel": {"minimal": 300, "default": 720, "full": 760},
    "gaudi": {"minimal": 250, "default": 500, "full": 1600},
    "tpu": {"minimal": 130, "default": 270, "full": 270},
    "neuron": {"minimal": 180, "default": 500, "full": 500},  # health since issue 35
}
# The daemon's process families (prometheus_client's names), in every profile.
PROCESS_FAMILIES = {
    "process_virtual_memory_bytes",
    "process_resident_memory_bytes",
    "process_start_time_seconds",
    "process_cpu_seconds",
    "process_open_fds",
    "process_max_fds",
}


def counters(text: str) -> dict[Any, float]:
    return {
        key: v
        for key, v in samples(text).items()
        if key[0] in CATALOG and CATALOG[key[0]].kind.value == "counter"
    }


def reload_to(d: Daemon, config: dict[str, Any]) -> str:
    """Rewrite the config, SIGHUP, and scrape right after the reload is reported."""
    before = sum(1 for e in d.events if e.get("event") == "config reloaded")
    d.config_file.write_text(json.dumps(config))
    d.signal(signal.SIGHUP)
    d.wait_for(
        lambda: sum(1 for e in d.events if e.get("event") == "config reloaded") > before,
        timeout=60,
        what="reload",
    )
    return d.metrics()


def polled_since(d: Daemon, source: str, since: float) -> bool:
    return bool((d.status()["sources"][source].get("last_success") or 0) > since)


def only(text: str, profile: str) -> None:
    """Nothing outside the profile's families (and the process families)."""
    names = {f.name for f in text_string_to_metric_families(text)} - PROCESS_FAMILIES
    allowed = {CATALOG[name].family_name for name in members(profile)}
    assert names <= allowed, sorted(names - allowed)


def check(text: str, profile: str, budget: int) -> dict[str, Any]:
    figures = measure(text)
    assert figures["samples"] <= budget, (profile, figures)
    assert sum(figures["series_by_source"].values()) == figures["samples"], figures
    assert figures["max_labels"] <= MAX_SERIES_LABELS
    only(text, profile)
    return figures


@pytest.mark.parametrize("kind", sorted(BUDGETS))
def test_each_profile_within_budget_and_switched_by_sighup(
    kind: str, daemon_factory: Any, tmp_path: Path
) -> None:
    with node(kind, tmp_path / kind) as fake:
        d = daemon_factory(config=fake.with_profile("full"), env=fake.env)
        d.wait_metric("accel_devices", fake.devices, timeout=90, vendor=fake.vendor)
        d.wait_metric("accel_exporter_source_up", 1, timeout=90, source=fake.source)
        full = settled(d.metrics)
        figures = {"full": check(full, "full", BUDGETS[kind]["full"])}
        previous = full
        for profile in ("minimal", "default"):
            reloaded = time.time()
            only(reload_to(d, fake.with_profile(profile)), profile)  # the very next scrape
            # A reload restarts the device source's worker (down for a few seconds):
            # its figures are those once it has polled again.
            d.wait_for(
                lambda since=reloaded: polled_since(d, fake.source, since),
                timeout=90,
                what=f"{fake.source} polled after the reload",
            )
            text = settled(d.metrics)
            figures[profile] = check(text, profile, BUDGETS[kind][profile])
            before, after = counters(previous), counters(text)
            kept = before.keys() & after.keys()
            assert kept, profile
            went_back = {key: (before[key], after[key]) for key in kept if after[key] < before[key]}
            assert went_back == {}
            previous = text
        assert figures["minimal"]["samples"] < figures["default"]["samples"]
        assert figures["default"]["samples"] <= figures["full"]["samples"]


@pytest.mark.parametrize("kind", ["nvidia", "amd"])
def test_compat_and_workload_labels_stay_within_the_label_limit(
    kind: str, daemon_factory: Any, tmp_path: Path
) -> None:
    """Every family of every profile, with both compat exporters, AMD's cluster_name and
    workload_labels on (the widest configuration): no series over the limit, and
    accel_exporter_series still adds up to the body. The widest attributed case (a pod
    and a Slurm job at once) is tests/unit/test_compat.py's."""
    wide = {"compat": ["dcgm", "amd"], "cluster_name": "prod-a", "workload_labels": True}
    with node(kind, tmp_path / kind) as fake:
        d = daemon_factory(config=fake.with_profile("full", **wide), env=fake.env)
        d.wait_metric("accel_devices", fake.devices, timeout=90, vendor=fake.vendor)
        d.wait_metric("accel_exporter_source_up", 1, timeout=90, source=fake.source)
        compat_prefix = "DCGM_" if kind == "nvidia" else "gpu_"
        for profile in ("full", "minimal", "default"):
            if profile != "full":
                reloaded = time.time()
                reload_to(d, fake.with_profile(profile, **wide))
                d.wait_for(
                    lambda since=reloaded: polled_since(d, fake.source, since),
                    timeout=90,
                    what=f"{fake.source} polled after the reload",
                )
            text = settled(d.metrics)
            figures = measure(text)
            assert figures["max_labels"] <= MAX_SERIES_LABELS, (profile, figures["widest_family"])
            names = {f.name for f in text_string_to_metric_families(text)}
            assert any(n.startswith(compat_prefix) for n in names), profile
            # The self-count adds up with compat on: each peer's series under its own source.
            by_source = figures["series_by_source"]
            assert sum(by_source.values()) == figures["samples"], (profile, by_source)
            peer = "compat_dcgm" if kind == "nvidia" else "compat_amd"
            compat_samples = sum(
                len(f.samples)
                for f in text_string_to_metric_families(text)
                if f.name.startswith(("DCGM_", "gpu_", "pcie_"))
            )
            assert by_source[peer] == compat_samples, profile
