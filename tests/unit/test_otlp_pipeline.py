"""The SDK pipeline over store views: values, kinds, histograms, temporality, churn."""

from __future__ import annotations

import itertools

import pytest
from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics
from opentelemetry.sdk.resources import Resource

from exporter.catalog.otel import INSTRUMENTS
from exporter.model import OK, HistogramValue, Reading, Snapshot
from exporter.outputs import otlp_pipeline
from exporter.outputs.otlp_pipeline import Pipeline
from exporter.store import Store
from tests.helpers.otlp_compare import points

GPU = ("0", "GPU-1")
_clock = itertools.count(1000)


def put(store: Store, *readings: Reading, source: str = "t") -> None:
    now = float(next(_clock))
    store.put(Snapshot(source, tuple(readings), OK, now, now, now, 0.01, 1e9))


def store_with(*readings: Reading) -> Store:
    store = Store(mono=lambda: 1000.0)
    put(store, *readings)
    return store


def collect(pipeline: Pipeline, store: Store):
    request = encode_metrics(pipeline.collect(store.view(), timeout=5))
    return request, *points(request)


def key(name: str, **attrs: str):
    return name, tuple(sorted((k.replace("__", "."), v) for k, v in attrs.items()))


GPU_ATTRS = {"device": "0", "hw__id": "GPU-1"}


def test_values_kinds_and_resource():
    store = store_with(
        Reading("accel_utilization_ratio", GPU, 0.5),
        Reading("accel_decoder_utilization_ratio", GPU, 0.25),
        Reading("accel_memory_used_bytes", GPU, 1e9),
        Reading("accel_energy_joules_total", GPU, 1000.0),
    )
    pipeline = Pipeline(Resource({"service.name": "x"}), "cumulative")
    request, values, shapes = collect(pipeline, store)
    assert values[key("hw.gpu.utilization", **GPU_ATTRS, hw__gpu__task="general")] == 0.5
    assert values[key("hw.gpu.utilization", **GPU_ATTRS, hw__gpu__task="decoder")] == 0.25
    assert values[key("hw.gpu.memory.usage", **GPU_ATTRS)] == 1e9
    assert values[key("hw.energy", **GPU_ATTRS, hw__type="gpu")] == 1000.0
    assert shapes["hw.gpu.utilization"][0] == "gauge"
    assert shapes["hw.gpu.memory.usage"][:3] == ("sum", "By", False)
    assert shapes["hw.energy"][:3] == ("sum", "J", True)
    assert shapes["accel.exporter.source.poll.duration"][0] == "histogram"
    (rm,) = request.resource_metrics
    assert [kv.key for kv in rm.resource.attributes] == ["service.name"]
    (scope,) = rm.scope_metrics  # bridged histograms share the SDK's scope
    assert scope.scope.name == "accel-exporter"


def test_histograms_are_bridged_bucket_by_bucket():
    store = Store(mono=lambda: 1000.0)
    for duration in (0.001, 0.02, 0.02, 100.0):
        now = float(next(_clock))
        store.put(Snapshot("t", (), OK, now, now, now, duration, 1e9))
    pipeline = Pipeline(Resource({}), "cumulative")
    request, values, _ = collect(pipeline, store)
    bounds, buckets, total, count = values[key("accel.exporter.source.poll.duration", source="t")]
    assert bounds[:3] == (0.005, 0.01, 0.025) and len(buckets) == len(bounds) + 1
    assert (buckets[0], buckets[2], buckets[-1]) == (1, 2, 1) and sum(buckets) == 4
    assert (count, total) == (4, pytest.approx(100.041))
    point = request.resource_metrics[0].scope_metrics[0].metrics[-1].histogram.data_points[0]
    assert not point.HasField("min") and not point.HasField("max")
    start = point.start_time_unix_nano
    store.put(Snapshot("t", (), OK, 2000.0, 2000.0, 2000.0, 0.02, 1e9))
    request, values, _ = collect(pipeline, store)
    assert values[key("accel.exporter.source.poll.duration", source="t")][3] == 5
    again = request.resource_metrics[0].scope_metrics[0].metrics[-1].histogram.data_points[0]
    assert again.start_time_unix_nano == start  # cumulative: one start for the series


def hist(counts: tuple[int, ...], total: float) -> HistogramValue:
    return HistogramValue((1.0, 2.0), counts, total)


def test_histogram_delta_first_pass_later_series_and_reset():
    bridge = otlp_pipeline.HistogramBridge(
        INSTRUMENTS["accel.exporter.source.poll.duration"][0], delta=True
    )

    class FakeView:
        def __init__(self, by_source):
            self.by_source = by_source

        def readings(self, metric):
            return [Reading(metric, (s,), v) for s, v in self.by_source.items()]

    seen = set()

    def run(view, now, since, first):
        metric = bridge.collect(view, now, since, first, seen.add)
        return {
            p.attributes["source"]: (tuple(p.bucket_counts), p.sum, p.count, p.start_time_unix_nano)
            for p in metric.data.data_points
        }

    first = run(FakeView({"a": hist((1, 2, 3), 3.0)}), 10, 5, True)
    assert first["a"][:3] == ((0, 0, 0), 0.0, 0)  # history unknown: deltas start here
    second = run(FakeView({"a": hist((2, 3, 4), 4.5), "b": hist((0, 1, 1), 1.5)}), 20, 10, False)
    assert second["a"] == ((1, 0, 0), 1.5, 1, 10)  # one more in the first bucket
    assert second["b"][:3] == ((0, 1, 0), 1.5, 1)  # born after the first pass: all of it is new
    third = run(FakeView({"a": hist((2, 2, 5), 9.0)}), 30, 20, False)
    assert third["a"][:3] == ((2, 0, 3), 9.0, 5)  # a bucket went down: a reset, counted since
    assert len(seen) == 2


def energy(value: float) -> Reading:
    return Reading("accel_energy_joules_total", GPU, value)


ENERGY = key("hw.energy", **GPU_ATTRS, hw__type="gpu")


@pytest.mark.parametrize("temporality", ["cumulative", "lowmemory"])
def test_cumulative_counters_carry_the_raw_value(temporality):
    store = store_with(energy(1000.0))
    pipeline = Pipeline(Resource({}), temporality)
    assert collect(pipeline, store)[1][ENERGY] == 1000.0
    put(store, energy(50.0))  # a driver reload: the value drops, as on /metrics
    assert collect(pipeline, store)[1][ENERGY] == 50.0


def test_delta_counters_start_at_zero_survive_resets_and_count_new_series():
    store = store_with(energy(1000.0))
    pipeline = Pipeline(Resource({}), "delta")
    _, values, shapes = collect(pipeline, store)
    assert values[ENERGY] == 0.0 and shapes["hw.energy"][3] == 1  # DELTA
    put(store, energy(1250.0))
    assert collect(pipeline, store)[1][ENERGY] == 250.0
    put(store, energy(40.0))  # reset: 40 J since, not -1210
    assert collect(pipeline, store)[1][ENERGY] == 40.0
    put(store, energy(100.0), Reading("accel_pcie_replays_total", GPU, 7.0))
    _, values, _ = collect(pipeline, store)
    assert values[ENERGY] == 60.0
    assert values[key("accel.pcie.replays", **GPU_ATTRS)] == 7.0  # new since the last pass
    # Up-down counters stay cumulative under delta, as the spec says.
    put(store, Reading("accel_memory_used_bytes", GPU, 5.0))
    assert collect(pipeline, store)[2]["hw.gpu.memory.usage"][3] == 2


def test_callbacks_outside_a_pass_see_nothing():
    store = store_with(energy(1.0))
    pipeline = Pipeline(Resource({}), "cumulative")
    stray = pipeline._reader.take(1000)  # a collection no pass asked for
    assert stray is None or not any(
        m.data.data_points
        for rm in stray.resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
    )
    _, values, _ = collect(pipeline, store)
    assert values[ENERGY] == 1.0


def test_series_churn_wears_the_pipeline_out(monkeypatch):
    monkeypatch.setattr(otlp_pipeline, "STALE_SERIES_BUDGET", 50)
    store = Store(mono=lambda: 1000.0)
    pipeline = Pipeline(Resource({}), "cumulative")
    for batch in range(10):
        pids = [str(batch * 10 + i) for i in range(10)]
        put(store, *(Reading("accel_process_memory_bytes", (*GPU, pid), 1.0) for pid in pids))
        _, values, _ = collect(pipeline, store)
        # Vanished processes are not exported again...
        assert sum(1 for k in values if k[0] == "accel.process.memory.usage") == 10
    # ...but the SDK remembers them, so the owner is told to start afresh.
    assert pipeline.worn_out
    fresh = Pipeline(Resource({}), "cumulative")
    collect(fresh, store)
    assert not fresh.worn_out


def test_configured_labels_reach_otlp_as_attributes():
    from exporter.catalog import with_rows
    from exporter.catalog.workload import pod_labels_row

    catalog = with_rows([pod_labels_row(["team", "app.kubernetes.io/name"])])
    store = Store(mono=lambda: 1000.0, catalog=catalog)
    put(store, Reading("accel_pod_labels_info", ("ml", "train-0", "vision", ""), 1.0))
    pipeline = Pipeline(Resource({"service.name": "x"}), "cumulative", catalog)
    _, values, _ = collect(pipeline, store)
    attrs = {
        "namespace": "ml",
        "pod": "train-0",
        "label_team": "vision",
        "label_app_kubernetes_io_name": "",
    }
    assert values[key("accel.pod.labels.info", **attrs)] == 1.0


def _sum_points(request, name):
    return [
        point
        for rm in request.resource_metrics
        for sm in rm.scope_metrics
        for metric in sm.metrics
        if metric.name == name
        for point in metric.sum.data_points
    ]


@pytest.mark.parametrize("temporality", ["cumulative", "lowmemory"])
def test_a_cumulative_counter_that_goes_down_starts_a_new_series(temporality):
    # A job restart resets the RAS timeout count: 5, 7, then 3, 4. The OTLP data model
    # wants a monotonic cumulative sum to restart with a new start time.
    store = Store(mono=lambda: 1000.0)
    pipeline = Pipeline(Resource({}), temporality)
    seen = []
    for i, value in enumerate((5.0, 7.0, 3.0, 4.0)):
        put(
            store,
            Reading("accel_ccl_ras_timeouts_total", ("a:1",), value),
            Reading("accel_ccl_ras_timeouts_total", ("b:1",), float(i)),
            Reading("accel_ccl_ras_events_total", ("a:1", "PEER_DEAD"), 1.0),
        )
        request = encode_metrics(pipeline.collect(store.view(), timeout=5))
        points = {
            p.attributes[0].value.string_value: p
            for p in _sum_points(request, "accel.ccl.ras.timeouts")
        }
        (steady,) = _sum_points(request, "accel.ccl.ras.events")
        seen.append((points, steady))
    starts = [p["a:1"].start_time_unix_nano for p, _ in seen]
    times = [p["a:1"].time_unix_nano for p, _ in seen]
    assert starts[0] == starts[1] < times[0]
    # The reset: the new series starts where the previous point was, and keeps that start.
    assert starts[2] == starts[3] == times[1]
    assert [p["a:1"].as_double for p, _ in seen] == [5.0, 7.0, 3.0, 4.0]
    # The other series of the family, and of other families, keep their start.
    assert len({p["b:1"].start_time_unix_nano for p, _ in seen}) == 1
    assert len({s.start_time_unix_nano for _, s in seen}) == 1
