from __future__ import annotations

import dataclasses
import gzip

import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporter.documents import source_state
from exporter.model import OK, HistogramValue, Outcome, Reading, Snapshot
from exporter.outputs.prometheus import Exposition
from exporter.store import HistogramAccumulator, Store, validate
from tests.helpers.daemon import value


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def snap(
    source: str,
    readings,
    clock: Clock,
    ok: bool = True,
    stale_after: float = 10.0,
    reason: str = "",
) -> Snapshot:
    return Snapshot(
        source,
        tuple(readings),
        OK if ok else Outcome(False, reason, reason),
        started_at=1.0,
        completed_at=2.0,
        completed_mono=clock.now,
        duration=0.01,
        stale_after=stale_after,
    )


def test_histogram_accumulator_is_cumulative():
    h = HistogramAccumulator((1.0, 2.0))
    for v in (0.5, 1.5, 1.5, 5.0):
        h.observe(v)
    assert h.value() == HistogramValue((1.0, 2.0), (1, 3, 4), 8.5)


def test_validate_rejects_what_the_catalog_does_not_allow():
    good, bad = validate(
        [
            Reading("accel_host_load1", (), 1.0),
            Reading("accel_nope", (), 1.0),
            Reading("accel_host_cpu_ratio", (), 1.0),
            Reading("accel_host_load5", (), float("nan")),
            Reading("accel_exporter_source_poll_duration_seconds", ("x",), 1.0),
        ]
    )
    assert [r.metric for r in good] == ["accel_host_load1"]
    assert len(bad) == 4


def test_stale_snapshots_are_not_rendered_and_source_goes_down():
    clock = Clock()
    store = Store(mono=clock)
    store.put(snap("a", [Reading("accel_host_load1", (), 2.0)], clock, stale_after=5))
    text = Exposition(store, process_metrics=False, clock=clock).render(None, None)[0].decode()
    assert value(text, "accel_host_load1") == 2.0
    assert value(text, "accel_exporter_source_up", source="a") == 1
    clock.now += 6
    text = Exposition(store, process_metrics=False, clock=clock).render(None, None)[0].decode()
    assert value(text, "accel_host_load1") is None
    assert value(text, "accel_exporter_source_up", source="a") == 0
    assert value(text, "accel_exporter_source_down_reason_info", source="a", reason="stale") == 1


def test_failed_poll_counts_errors_and_keeps_failure_readings():
    clock = Clock()
    store = Store(mono=clock)
    store.put(snap("a", [Reading("accel_devices", ("x",), 0.0)], clock, ok=False, reason="timeout"))
    store.put(snap("a", [], clock, ok=False, reason="timeout"))
    store.put(snap("a", [Reading("accel_devices", ("x",), 3.0)], clock))
    text = Exposition(store, process_metrics=False, clock=clock).render(None, None)[0].decode()
    assert value(text, "accel_exporter_source_errors_total", source="a", reason="timeout") == 2
    assert value(text, "accel_exporter_source_poll_duration_seconds_count", source="a") == 3
    assert value(text, "accel_devices", vendor="x") == 3
    assert value(text, "accel_exporter_source_last_success_timestamp_seconds", source="a") == 2.0


def test_exposition_is_cached_per_view_and_negotiated():
    clock = Clock()
    store = Store(mono=clock)
    store.put(snap("a", [Reading("accel_host_load1", (), 2.0)], clock))
    expo = Exposition(store, process_metrics=False, clock=clock)
    first, headers = expo.render(None, None)
    assert headers["Content-Type"].startswith("text/plain; version=0.0.4")
    assert expo.render(None, None)[0] is first  # same bytes object: not re-rendered
    zipped, zheaders = expo.render(None, "deflate, gzip;q=0.8")
    assert zheaders["Content-Encoding"] == "gzip" and gzip.decompress(zipped) == first
    assert "Content-Encoding" not in expo.render(None, "gzip;q=0")[1]
    om, omh = expo.render("application/openmetrics-text; version=1.0.0", None)
    assert omh["Content-Type"].startswith("application/openmetrics-text")
    assert om.endswith(b"# EOF\n")
    # A malformed OpenMetrics version (found by the HTTP fuzz target; prometheus_client
    # raises TypeError on it) gets the text format, not an error.
    bad, badh = expo.render("application/openmetrics-text; version=x", None)
    assert badh["Content-Type"].startswith("text/plain; version=0.0.4") and bad == first
    store.put(snap("a", [Reading("accel_host_load1", (), 3.0)], clock))
    assert value(expo.render(None, None)[0].decode(), "accel_host_load1") == 3.0
    only, _ = expo.render(None, None, names=["accel_host_load1"])
    families = [f.name for f in text_string_to_metric_families(only.decode())]
    assert families == ["accel_host_load1"]


@pytest.mark.parametrize(
    "accept",
    [None, "application/openmetrics-text; version=1.0.0", "text/plain; escaping=allow-utf-8"],
)
def test_each_body_is_what_prometheus_client_writes_with_one_eof_after_the_process_families(
    accept,
):
    """Each format's body is byte for byte prometheus_client's output for the same families
    (one OpenMetrics # EOF, at the very end, after the process families)."""
    from prometheus_client.exposition import choose_encoder

    from exporter.outputs.prometheus_compat import families

    clock = Clock()
    store = Store(mono=clock)
    hist = HistogramValue((0.1, 1.0), (1, 2, 3), 4.5)
    readings = [
        Reading("accel_host_load1", (), 2.0),
        Reading("accel_exporter_source_poll_duration_seconds", ("z",), hist),
    ]
    store.put(snap("a", readings, clock))
    body, _ = Exposition(store, process_metrics=False, clock=clock).render(accept, None)

    class Whole:
        def collect(self):
            return families(store.view(), catalog=store.catalog)

    encoder, _ = choose_encoder(accept or "")
    assert body == encoder(Whole())
    openmetrics = accept is not None and "openmetrics" in accept
    assert body.count(b"# EOF") == int(openmetrics)
    # With the process metrics after the store's families: still one # EOF, last.
    with_process, _ = Exposition(store, clock=clock).render(accept, None)
    assert with_process.startswith(body.removesuffix(b"# EOF\n"))
    assert b"\nprocess_cpu_seconds_total" in with_process
    assert with_process.count(b"# EOF") == int(openmetrics)
    assert with_process.endswith(b"# EOF\n") == openmetrics


def test_duplicate_series_across_sources_render_once():
    clock = Clock()
    store = Store(mono=clock)
    store.put(snap("a", [Reading("accel_host_load1", (), 1.0)], clock))
    store.put(snap("b", [Reading("accel_host_load1", (), 2.0)], clock))
    text = Exposition(store, process_metrics=False, clock=clock).render(None, None)[0].decode()
    assert text.count("\naccel_host_load1 ") == 1
    # Later sources win (sources are rendered in registration order).
    assert value(text, "accel_host_load1") == 2.0


def test_unavailable_source_exports_info_not_up():
    clock = Clock()
    store = Store(mono=clock)
    store.register("nvml")
    store.mark_unavailable("nvml", "library_not_found", detail="libnvidia-ml.so.1 not found")
    text = Exposition(store, process_metrics=False, clock=clock).render(None, None)[0].decode()
    assert value(text, "accel_exporter_source_up", source="nvml") is None
    assert (
        value(
            text,
            "accel_exporter_source_unavailable_info",
            source="nvml",
            reason="library_not_found",
        )
        == 1
    )
    (record,) = store.records()
    assert record.unavailable_detail == "libnvidia-ml.so.1 not found"


def test_histogram_readings_render():
    clock = Clock()
    store = Store(mono=clock)
    hist = HistogramValue((0.1, 1.0), (1, 2, 3), 4.5)
    store.put(
        snap("a", [Reading("accel_exporter_source_poll_duration_seconds", ("z",), hist)], clock)
    )
    text = Exposition(store, process_metrics=False, clock=clock).render(None, None)[0].decode()
    assert (
        value(text, "accel_exporter_source_poll_duration_seconds_bucket", source="z", le="1.0") == 2
    )
    assert (
        value(text, "accel_exporter_source_poll_duration_seconds_bucket", source="z", le="+Inf")
        == 3
    )


@pytest.mark.parametrize("bad", [HistogramValue((1.0,), (1, 2), 0.0)])
def test_histogram_value_shape(bad):
    with pytest.raises(ValueError):
        HistogramValue((1.0, 2.0), (1,), 0.0)


def test_worker_restarts_never_go_back_across_a_reload():
    clock = Clock()
    store = Store(mono=clock)
    store.put(snap("nvml", [], clock), restarts=2)
    store.put(snap("nvml", [], clock), restarts=3)
    store.put(snap("nvml", [], clock), restarts=0)  # a reload: a new runner counts from 0
    store.put(snap("nvml", [], clock), restarts=1)
    (record,) = store.records()
    assert record.restarts == 4


class CountingExposition(Exposition):
    """Counts full renders (each builds every family of the store view)."""

    renders = 0

    def _encode(self, encoder):
        self.renders += 1
        return super()._encode(encoder)


def test_changes_between_scrapes_cost_one_render_ahead_of_the_next_scrape():
    clock = Clock()
    store = Store(mono=clock)
    expo = CountingExposition(store, process_metrics=False, clock=clock)

    def change(v: float) -> None:
        # What the pre-render thread does on every store change: render what is due.
        store.put(snap("host", [Reading("accel_host_load1", (), v)], clock, stale_after=1e6))
        expo.prerender_due(wait=False)

    def scrape() -> str:
        return expo.render(None, None)[0].decode()

    change(0.0)
    assert value(scrape(), "accel_host_load1") == 0.0 and expo.renders == 1
    clock.now += 15.0
    scrape()  # the second scrape: the scrape interval is now known (15 s)
    assert expo.renders == 1  # nothing changed: the cached body
    for second in range(1, 15):  # the host source changes the store every second
        clock.now += 1.0
        change(float(second))
    # One render, ahead of the next scrape (due one second before it), with the data
    # of that moment; none on the scrape path.
    assert expo.renders == 2
    clock.now += 1.0
    assert value(scrape(), "accel_host_load1") == 14.0
    assert expo.renders == 2
    # A scraper that is not there any more: nothing is rendered for it but once.
    for second in range(15, 60):
        clock.now += 1.0
        change(float(second))
    assert expo.renders == 3


def test_a_fast_scraper_always_gets_the_newest_data():
    clock = Clock()
    store = Store(mono=clock)
    expo = CountingExposition(store, process_metrics=False, clock=clock)
    for n in range(5):
        store.put(snap("host", [Reading("accel_host_load1", (), float(n))], clock))
        expo.prerender_due(wait=False)
        clock.now += 0.1
        assert value(expo.render(None, None)[0].decode(), "accel_host_load1") == float(n)


def test_pending_poll_keeps_what_the_source_still_knows_after_a_first_result():
    clock = Clock()
    store = Store(mono=clock)
    starting = Outcome(False, "starting", "the worker is still starting", pending=True)
    down = [Reading("accel_devices", ("x",), 2.0)]
    # Before any result and knowing nothing: the source stays "not polled yet".
    store.pending(dataclasses.replace(snap("a", [], clock), outcome=starting), restarts=0)
    text = Exposition(store, process_metrics=False, clock=clock).render(None, None)[0].decode()
    assert value(text, "accel_exporter_source_up", source="a") is None
    # Knowing something already (devices a first bootstrap identified): shown, not a result.
    store.pending(dataclasses.replace(snap("a", down, clock), outcome=starting), restarts=0)
    text = Exposition(store, process_metrics=False, clock=clock).render(None, None)[0].decode()
    assert value(text, "accel_devices", vendor="x") == 2
    assert value(text, "accel_exporter_source_down_reason_info", source="a", reason="starting") == 1
    assert value(text, "accel_exporter_source_poll_duration_seconds_count", source="a") == 0
    # Shown, but no answer: readiness and the source's state still wait for its first poll.
    (record,) = store.records()
    assert not record.answered
    assert source_state(record, clock()) == ("pending", "")
    store.put(snap("a", down, clock, ok=False, reason="crashed", stale_after=5))
    for _ in range(
        4
    ):  # a worker slow to start, well past stale_after: still shown, counted nowhere
        clock.now += 3
        pending = dataclasses.replace(snap("a", down, clock), outcome=starting)
        store.pending(pending, restarts=1)
    text = Exposition(store, process_metrics=False, clock=clock).render(None, None)[0].decode()
    assert value(text, "accel_devices", vendor="x") == 2
    assert value(text, "accel_exporter_source_down_reason_info", source="a", reason="starting") == 1
    assert store.records()[0].answered
    assert value(text, "accel_exporter_source_errors_total", source="a", reason="crashed") == 1
    assert value(text, "accel_exporter_source_poll_duration_seconds_count", source="a") == 1
    assert value(text, "accel_exporter_worker_restarts_total", source="a") == 1


class _Guarded(dict):
    """The scrape formats, failing any access made without the exposition's lock held."""

    def __init__(self, expo: Exposition) -> None:
        super().__init__()
        self.expo = expo

    def _check(self) -> None:
        lock = getattr(self.expo, "_wanted_lock", None)
        assert lock is not None and lock.locked(), "_wanted touched without its lock"

    def get(self, *a):
        self._check()
        return super().get(*a)

    def __setitem__(self, k, v):
        self._check()
        super().__setitem__(k, v)

    def __delitem__(self, k):
        self._check()
        super().__delitem__(k)

    def items(self):
        self._check()
        return super().items()

    def values(self):
        self._check()
        return super().values()


def test_the_scrape_formats_are_shared_with_the_render_thread_only_under_a_lock():
    # HTTP threads add formats, the pre-render thread reads and drops them, a reload
    # resets them: all three under one lock (review-4 L3; free-threaded CPython).
    clock = Clock()
    store = Store(mono=clock)
    expo = Exposition(store, process_metrics=False, clock=clock)
    expo._wanted = _Guarded(expo)
    store.put(snap("host", [Reading("accel_host_load1", (), 1.0)], clock, stale_after=1e6))
    expo.render(None, None)
    expo.render(None, "gzip")
    clock.now += 15.0
    expo.render(None, None)
    expo.prerender_due(wait=False)
    expo.set_stamp(None)
    clock.now += 1000.0
    expo.prerender_due(wait=False)  # nobody scraped for long: both formats dropped
    assert dict.__len__(expo._wanted) == 0
