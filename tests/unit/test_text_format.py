"""Our exposition writer against prometheus_client's encoders: the same bytes, every family.

The oracle is prometheus_client itself, encoding the same store through its
``Metric`` objects (``Exposition.registry``), for every format and escaping
scheme a scraper can ask for.
"""

from __future__ import annotations

import itertools

import pytest
from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.exposition import choose_encoder

from exporter.catalog import CATALOG, Kind, with_rows
from exporter.catalog.workload import pod_labels_row
from exporter.model import OK, HistogramValue, Reading, Snapshot
from exporter.outputs import text_format
from exporter.outputs.prometheus import Exposition
from exporter.outputs.prometheus_compat import StoreCollector
from exporter.store import Store

# Label values that need every escape, and some that need none.
ODD = ["plain", "back\\slash", 'quo"te', "new\nline", "ünïcødé", "", "a,b=c{d}"]
# Values whose Go formatting differs from Python's repr, and the specials.
VALUES = [0.0, 1.0, -2.5, 1e22, 123456789.0, 3.14159e-7, float("inf"), float("-inf"), float("nan")]

ACCEPTS = [
    "",
    "text/plain; version=0.0.4",
    "application/openmetrics-text",
    "application/openmetrics-text; version=1.0.0",
    "application/openmetrics-text; version=1.0.0; escaping=allow-utf-8",
    "application/openmetrics-text; version=1.0.0; escaping=underscores",
    "text/plain; version=1.0.0; escaping=allow-utf-8",
    "text/plain; version=1.0.0; escaping=underscores",
    # Not written by us (dots escape every underscore): prometheus_client's own, still.
    "application/openmetrics-text; version=1.0.0; escaping=dots",
]


def every_row(catalog) -> list[Reading]:
    """Two readings (odd labels, odd values) for every family of ``catalog``."""
    odd = itertools.cycle(ODD)
    values = itertools.cycle(VALUES)
    out = []
    for name, row in catalog.items():
        for _ in range(2):
            labels = tuple(next(odd) for _ in row.labels)
            if row.kind is Kind.HISTOGRAM:
                bounds = row.buckets or (0.5, 1.0)
                counts = tuple(range(1, len(bounds) + 2))
                value: float | HistogramValue = HistogramValue(bounds, counts, next(values))
            else:
                value = next(values)
            out.append(Reading(name, labels, value))
    return out


def library(store: Store, accept: str, process: bool = False) -> bytes:
    """What prometheus_client writes for the same store and Accept header."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StoreCollector(store))
    if process:
        ProcessCollector(registry=registry)
    encoder, _ = choose_encoder(accept)
    return encoder(registry)


def store_of(catalog, readings) -> Store:
    store = Store(catalog=catalog)
    store.put(Snapshot("t", tuple(readings), OK, 1.0, 1.0, 1.0, 0.01, 1e9))
    return store


@pytest.mark.parametrize("accept", ACCEPTS)
def test_every_family_is_written_as_prometheus_client_writes_it(accept):
    catalog = with_rows([pod_labels_row(["team", "app.kubernetes.io/name"])])
    store = store_of(catalog, every_row(catalog))
    expo = Exposition(store, process_metrics=False)
    ours, headers = expo.render(accept, None)
    assert ours == library(store, accept)
    assert ours.count(b"# TYPE") == len(catalog)  # the whole catalog, not an empty body
    assert headers["Content-Type"] == choose_encoder(accept)[1]
    assert (text_format.negotiate(accept).fmt is None) == ("dots" in accept)


@pytest.mark.parametrize("accept", ACCEPTS[:4])
def test_lines_kept_from_the_last_render_still_match_the_library(accept):
    """Renders in a row, each series keeping, changing or losing its value (zero turning
    into minus zero, NaN staying NaN) or its labels: every body is what the library writes."""
    catalog = with_rows([pod_labels_row(["team"])])
    first = every_row(catalog)
    # A series moves one step a render: 0 to -0, a value kept, NaN kept, 1e22 to 0.
    steps = [0.0, -0.0, 7.5, 7.5, float("nan"), float("nan"), 1e22]
    for turn in range(5):
        readings = []
        for i, r in enumerate(first):
            value = r.value
            if turn and not isinstance(value, HistogramValue):
                value = steps[(turn + i) % len(steps)]
            labels = r.labels if (i + turn) % 5 else tuple(f"{v}{turn}" for v in r.labels)
            readings.append(Reading(r.metric, labels, value))
        store = store_of(catalog, readings)
        assert Exposition(store, process_metrics=False).render(accept, None)[0] == library(
            store, accept
        )


def test_histograms_with_negative_buckets_have_no_count_or_sum_as_in_the_library():
    row = next(r for r in CATALOG.values() if r.kind is Kind.HISTOGRAM)
    labels = ("x",) * len(row.labels)
    value = HistogramValue((-1.0, 1.0), (1, 2, 3), 0.5)
    store = store_of(CATALOG, [Reading(row.name, labels, value)])
    expo = Exposition(store, process_metrics=False)
    for accept in ACCEPTS[:3]:
        body, _ = expo.render(accept, None)
        assert body == library(store, accept)
        ours = [line for line in body.splitlines() if b'="x"' in line]
        assert ours and not any(b"_count" in line or b"_sum" in line for line in ours)


@pytest.mark.parametrize("accept", ACCEPTS)
def test_process_metrics_are_the_library_collectors_families(accept):
    store = store_of(CATALOG, [Reading("accel_host_load1", (), 1.5)])
    body, _ = Exposition(store, process_metrics=True).render(accept, None)
    expected = library(store, accept, process=True)

    def shape(text: bytes) -> list[bytes]:
        # The values move between the two reads (CPU, RSS); names, help and order may not.
        return [
            line if line.startswith(b"#") else line.split(b" ")[0] for line in text.splitlines()
        ]

    assert shape(body) == shape(expected)
    assert body.count(b"# TYPE process") == 6 and body.count(b"# EOF") <= 1
    assert body.index(b"# TYPE accel") < body.index(b"# TYPE process")


@pytest.mark.parametrize(
    "accept",
    ["application/openmetrics-text; version=x", "text/plain; version=1.x.0", "a/b, text/html"],
)
def test_odd_accept_headers_get_what_the_library_gives_or_the_text_format(accept):
    try:
        expected = choose_encoder(accept)[1]
    except (TypeError, ValueError):
        expected = choose_encoder("")[1]
    assert text_format.negotiate_or_text(accept).content_type == expected


def test_a_name_filter_writes_only_those_families():
    store = store_of(CATALOG, every_row(CATALOG))
    expo = Exposition(store, process_metrics=True)
    body, _ = expo.render("", None, names=["accel_host_load1", "accel_energy_joules_total"])
    names = {line.split(b" ")[2] for line in body.splitlines() if line.startswith(b"# TYPE")}
    assert names == {b"accel_host_load1", b"accel_energy_joules_total"}


def test_a_family_left_out_of_a_render_forgets_the_body_it_was_in():
    """Its lines would keep that older body alive (a device's family gone, a profile change)."""
    gauges = [r for r in CATALOG.values() if r.kind is Kind.GAUGE and r.labels][:2]
    kept, gone = ([Reading(row.name, ("x",) * len(row.labels), 1.0)] for row in gauges)
    first = text_format.Body(text_format.TEXT)
    first.families([(gauges[0], kept), (gauges[1], gone)])
    first.finish()
    assert text_format._shape(gauges[1], text_format.TEXT).last[0] is not None
    second = text_format.Body(text_format.TEXT)
    second.families([(gauges[0], kept)])
    body = second.finish()
    assert text_format._shape(gauges[1], text_format.TEXT).last[0] is None
    assert text_format._shape(gauges[0], text_format.TEXT).last[0].body is body
