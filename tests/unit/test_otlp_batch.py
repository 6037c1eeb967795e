"""OTLP batches from store views: values, kinds, histograms, temporality, start times, churn."""

from __future__ import annotations

import itertools

import pytest
from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics
from opentelemetry.sdk.resources import Resource

from exporter.model import OK, HistogramValue, Reading, Snapshot
from exporter.outputs import otlp_batch
from exporter.outputs.otlp_batch import BatchBuilder
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


def collect(pipeline: BatchBuilder, store: Store, now_ns: int | None = None):
    request = encode_metrics(pipeline.build(store.view(), now_ns))
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
    pipeline = BatchBuilder(Resource({"service.name": "x"}), "cumulative")
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
    (scope,) = rm.scope_metrics  # one scope: the daemon's
    assert scope.scope.name == "accel-exporter"


def test_histograms_are_bridged_bucket_by_bucket():
    store = Store(mono=lambda: 1000.0)
    for duration in (0.001, 0.02, 0.02, 100.0):
        now = float(next(_clock))
        store.put(Snapshot("t", (), OK, now, now, now, duration, 1e9))
    pipeline = BatchBuilder(Resource({}), "cumulative")
    request, values, _ = collect(pipeline, store)
    bounds, buckets, total, count = values[key("accel.exporter.source.poll.duration", source="t")]
    assert bounds[:3] == (0.005, 0.01, 0.025) and len(buckets) == len(bounds) + 1
    assert (buckets[0], buckets[2], buckets[-1]) == (1, 2, 1) and sum(buckets) == 4
    assert (count, total) == (4, pytest.approx(100.041))
    point = _metric(request, "accel.exporter.source.poll.duration").histogram.data_points[0]
    assert not point.HasField("min") and not point.HasField("max")
    start = point.start_time_unix_nano
    store.put(Snapshot("t", (), OK, 2000.0, 2000.0, 2000.0, 0.02, 1e9))
    request, values, _ = collect(pipeline, store)
    assert values[key("accel.exporter.source.poll.duration", source="t")][3] == 5
    again = _metric(request, "accel.exporter.source.poll.duration").histogram.data_points[0]
    assert again.start_time_unix_nano == start  # cumulative: one start for the series


def hist(counts: tuple[int, ...], total: float) -> HistogramValue:
    return HistogramValue((1.0, 2.0), counts, total)


def test_histogram_delta_first_pass_later_series_and_reset():
    builder = BatchBuilder(Resource({}), "lowmemory")  # histograms are deltas here too

    def run(by_source, now):
        store = store_with(
            *(
                Reading("accel_exporter_source_poll_duration_seconds", (s,), v)
                for s, v in by_source.items()
            )
        )
        (metric,) = (
            m
            for m in builder.build(store.view(), now).resource_metrics[0].scope_metrics[0].metrics
            if m.name == "accel.exporter.source.poll.duration"
        )
        assert metric.data.aggregation_temporality == 1  # DELTA
        return {
            p.attributes["source"]: (tuple(p.bucket_counts), p.sum, p.count, p.start_time_unix_nano)
            for p in metric.data.data_points
        }

    first = run({"a": hist((1, 2, 3), 3.0)}, 10)
    assert first["a"][:3] == ((0, 0, 0), 0.0, 0)  # history unknown: deltas start here
    second = run({"a": hist((2, 3, 4), 4.5), "b": hist((0, 1, 1), 1.5)}, 20)
    assert second["a"] == ((1, 0, 0), 1.5, 1, 10)  # one more in the first bucket, since pass 1
    assert second["b"][:3] == ((0, 1, 0), 1.5, 1)  # born after the first pass: all of it is new
    third = run({"a": hist((2, 2, 5), 9.0)}, 30)
    assert third["a"] == ((2, 0, 3), 9.0, 5, 20)  # a bucket went down: a reset, counted since
    fourth = run({"a": hist((2, 2, 5), 9.0), "b": hist((0, 2, 2), 3.0)}, 40)
    # "b" missed a pass and is back: remembered, so only its gain is sent.
    assert fourth["b"] == ((0, 1, 0), 1.5, 1, 30)


def energy(value: float) -> Reading:
    return Reading("accel_energy_joules_total", GPU, value)


ENERGY = key("hw.energy", **GPU_ATTRS, hw__type="gpu")


@pytest.mark.parametrize("temporality", ["cumulative", "lowmemory"])
def test_cumulative_counters_carry_the_raw_value(temporality):
    store = store_with(energy(1000.0))
    pipeline = BatchBuilder(Resource({}), temporality)
    assert collect(pipeline, store)[1][ENERGY] == 1000.0
    put(store, energy(50.0))  # a driver reload: the value drops, as on /metrics
    assert collect(pipeline, store)[1][ENERGY] == 50.0


def test_delta_counters_start_at_zero_survive_resets_and_count_new_series():
    store = store_with(energy(1000.0))
    pipeline = BatchBuilder(Resource({}), "delta")
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


def test_a_series_that_misses_a_pass_keeps_its_start_and_its_delta_base():
    store = store_with(energy(1000.0))
    cumulative = BatchBuilder(Resource({}), "cumulative")
    delta = BatchBuilder(Resource({}), "delta")
    for builder in (cumulative, delta):
        collect(builder, store)
    first_start = _sum_points(collect(cumulative, store)[0], "hw.energy")[0].start_time_unix_nano
    gap = Store(mono=lambda: 1000.0)
    put(gap, Reading("accel_memory_used_bytes", GPU, 1.0))  # the GPU source missed a poll
    for builder in (cumulative, delta):
        assert ENERGY not in collect(builder, gap)[1]
    put(store, energy(1100.0))
    (point,) = _sum_points(collect(cumulative, store)[0], "hw.energy")
    assert (point.start_time_unix_nano, point.as_double) == (first_start, 1100.0)
    # Not its whole count as one delta: only what it gained over the gap.
    assert collect(delta, store)[1][ENERGY] == 100.0


def test_series_churn_is_forgotten_after_the_horizon():
    store = Store(mono=lambda: 1000.0)
    builder = BatchBuilder(Resource({}), "cumulative")
    second = 1_000_000_000
    now = 10**18
    for batch in range(10):
        pids = [str(batch * 10 + i) for i in range(10)]
        put(store, *(Reading("accel_process_memory_bytes", (*GPU, pid), 1.0) for pid in pids))
        _, values, _ = collect(builder, store, now + batch * second)
        # Vanished processes are not exported again...
        assert sum(1 for k in values if k[0] == "accel.process.memory.usage") == 10
    # ...gauges keep no state at all (what is tracked is the daemon's own counters
    # about source "t"); counters are remembered for the horizon only.
    own = len(builder)
    for pid in range(50):
        put(store, Reading("accel_ccl_ras_timeouts_total", (f"h:{pid}",), 1.0))
        collect(builder, store, now + pid * second)
    assert len(builder) == own + 50
    horizon = int(otlp_batch.FORGET_AFTER_SECONDS * second)
    put(store, Reading("accel_ccl_ras_timeouts_total", ("h:49",), 2.0))
    collect(builder, store, now + 49 * second + horizon)
    assert len(builder) == own + 1


def test_an_unknown_temporality_is_refused():
    with pytest.raises(ValueError, match="sometimes"):
        BatchBuilder(Resource({}), "sometimes")


def test_configured_labels_reach_otlp_as_attributes():
    from exporter.catalog import with_rows
    from exporter.catalog.workload import pod_labels_row

    catalog = with_rows([pod_labels_row(["team", "app.kubernetes.io/name"])])
    store = Store(mono=lambda: 1000.0, catalog=catalog)
    put(store, Reading("accel_pod_labels_info", ("ml", "train-0", "vision", ""), 1.0))
    pipeline = BatchBuilder(Resource({"service.name": "x"}), "cumulative", catalog)
    _, values, _ = collect(pipeline, store)
    attrs = {
        "namespace": "ml",
        "pod": "train-0",
        "label_team": "vision",
        "label_app_kubernetes_io_name": "",
    }
    assert values[key("accel.pod.labels.info", **attrs)] == 1.0


def _metric(request, name):
    (found,) = (
        metric
        for rm in request.resource_metrics
        for sm in rm.scope_metrics
        for metric in sm.metrics
        if metric.name == name
    )
    return found


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
    pipeline = BatchBuilder(Resource({}), temporality)
    seen = []
    for i, value in enumerate((5.0, 7.0, 3.0, 4.0)):
        put(
            store,
            Reading("accel_ccl_ras_timeouts_total", ("a:1",), value),
            Reading("accel_ccl_ras_timeouts_total", ("b:1",), float(i)),
            Reading("accel_ccl_ras_events_total", ("a:1", "PEER_DEAD"), 1.0),
        )
        request = encode_metrics(pipeline.build(store.view()))
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
