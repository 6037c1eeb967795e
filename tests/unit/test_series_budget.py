"""The series budget: declared by every unbounded catalog row, enforced by the store."""

from __future__ import annotations

import dataclasses

import pytest
from structlog.testing import capture_logs

from exporter.catalog import CATALOG
from exporter.model import OK, Reading, Snapshot
from exporter.outputs.prometheus import Exposition
from exporter.series_budget import enforce, limits
from exporter.store import Store
from tests.helpers.daemon import value

DEVICE = "accel_device_up"  # labels (device, uuid): a device-level budget


def test_every_row_with_a_label_not_enumerated_declares_its_budget():
    undeclared = [r.name for r in CATALOG.values() if r.unbounded_labels and r.max_series <= 0]
    assert undeclared == []
    # A row bounded by its enumerations alone needs none (and none declares a useless one).
    assert all(r.max_series == 0 for r in CATALOG.values() if not r.unbounded_labels)


def test_a_negative_budget_is_refused():
    with pytest.raises(ValueError, match="max_series"):
        dataclasses.replace(CATALOG[DEVICE], max_series=-1)


def rd(index: int, metric: str = DEVICE, value: float = 1.0, vendor: str = "GPU") -> Reading:
    return Reading(metric, (str(index), f"{vendor}-{index}"), value)


def test_the_first_label_sets_in_the_sources_order_are_kept():
    readings = [rd(3), rd(1), Reading("accel_host_load1", (), 1.0), rd(2), rd(1, value=2.0), rd(0)]
    kept, dropped = enforce(readings, {DEVICE: 2})
    # 3 and 1 came first; a second reading of label set 1 is the same series, kept.
    assert kept == (rd(3), rd(1), Reading("accel_host_load1", (), 1.0), rd(1, value=2.0))
    assert dropped == {DEVICE: 2}
    # Within budget, the very same sequence comes back (no copy on the hot path).
    assert enforce(readings, {DEVICE: 10})[0] is readings
    assert enforce(readings, {})[0] is readings


def test_the_limits_are_the_catalogs():
    budget = limits(CATALOG)
    assert budget[DEVICE] == CATALOG[DEVICE].max_series > 0
    assert "accel_host_load1" not in budget  # no labels: nothing to bound


def small_store(max_series: int) -> Store:
    catalog = dict(CATALOG)
    catalog[DEVICE] = dataclasses.replace(CATALOG[DEVICE], max_series=max_series)
    return Store(mono=lambda: 100.0, catalog=catalog)


def snap(source: str, readings: list[Reading]) -> Snapshot:
    return Snapshot(
        source,
        tuple(readings),
        OK,
        started_at=1.0,
        completed_at=2.0,
        completed_mono=100.0,
        duration=0.01,
        stale_after=1e6,
    )


def test_the_store_drops_per_source_and_family_counts_and_logs_a_change_once():
    store = small_store(4)
    with capture_logs() as logs:
        store.put(snap("nvml", [rd(i) for i in range(10)]))
        store.put(snap("amdsmi", [rd(i, vendor="AMD") for i in range(3)]))  # its own budget
        store.put(snap("nvml", [rd(i) for i in range(10)]))
    view = store.view()
    assert [r.labels[1] for r in view.readings(DEVICE)] == [
        *(f"GPU-{i}" for i in range(4)),
        *(f"AMD-{i}" for i in range(3)),
    ]
    text = Exposition(store, process_metrics=False).render(None, None)[0].decode()
    dropped = "accel_exporter_series_dropped_total"
    assert value(text, dropped, source="nvml", family=DEVICE) == 12  # 6 per snapshot
    assert value(text, dropped, source="amdsmi", family=DEVICE) is None
    over = [e for e in logs if e["event"] == "series over budget, dropped"]
    assert [(e["source"], e["family"], e["max_series"]) for e in over] == [("nvml", DEVICE, 4)]
    with capture_logs() as logs:
        store.put(snap("nvml", [rd(i) for i in range(2)]))
        store.put(snap("nvml", [rd(i) for i in range(2)]))
    assert [e["event"] for e in logs] == ["series within budget again"]
    text = Exposition(store, process_metrics=False).render(None, None)[0].decode()
    assert value(text, dropped, source="nvml", family=DEVICE) == 12  # a counter: kept


def test_pending_unavailable_and_published_readings_are_held_to_the_budget_too():
    store = small_store(2)
    store.pending(snap("a", [rd(i, vendor="a") for i in range(5)]))
    store.mark_unavailable(
        "b", "library_not_found", snapshot=snap("b", [rd(i, vendor="b") for i in range(5)])
    )
    store.publish("c", [rd(i, vendor="c") for i in range(5)])
    view = store.view()
    assert len(view.readings(DEVICE)) == 6
    text = Exposition(store, process_metrics=False).render(None, None)[0].decode()
    for source in "abc":
        assert value(text, "accel_exporter_series_dropped_total", source=source, family=DEVICE) == 3
