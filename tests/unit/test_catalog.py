from __future__ import annotations

import pytest

from exporter.catalog import CATALOG, Kind, MetricSpec, build


def test_every_row_obeys_the_naming_rules():
    for row in CATALOG.values():
        assert row.problems() == [], row.name
        assert row.name.startswith(("accel_", "accel_exporter_")), row.name


@pytest.mark.parametrize(
    "kwargs",
    [
        {"name": "accel_x", "kind": Kind.COUNTER, "help": "X."},
        {"name": "accel_x_total", "kind": Kind.GAUGE, "help": "X."},
        {"name": "accel_x_bytes", "kind": Kind.GAUGE, "help": "X.", "unit": "seconds"},
        {"name": "accel_x", "kind": Kind.GAUGE, "help": "no period"},
        {"name": "accel_x", "kind": Kind.HISTOGRAM, "help": "X."},
        {"name": "accel_x", "kind": Kind.INFO, "help": "X."},
        {"name": "AccelX", "kind": Kind.GAUGE, "help": "X."},
        {"name": "accel_x", "kind": Kind.GAUGE, "help": "X.", "labels": ("a", "a")},
    ],
)
def test_bad_rows_are_refused(kwargs):
    with pytest.raises(ValueError):
        MetricSpec(**kwargs)


def test_duplicates_are_refused():
    row = MetricSpec("accel_x", Kind.GAUGE, "X.")
    with pytest.raises(ValueError):
        build([row, row])


def test_configured_rows_may_only_append_labels():
    from dataclasses import replace

    from exporter.catalog import with_rows
    from exporter.catalog.workload import pod_label_name, pod_labels_row

    row = pod_labels_row(["team", "app.kubernetes.io/name", "Tier"])
    assert row.labels == (
        "namespace",
        "pod",
        "label_team",
        "label_app_kubernetes_io_name",
        "label_tier",
    )
    catalog = with_rows([row])
    assert catalog["accel_pod_labels_info"] == row
    assert CATALOG["accel_pod_labels_info"].labels == ("namespace", "pod")
    assert {k: v for k, v in catalog.items() if k != row.name} == {
        k: v for k, v in CATALOG.items() if k != row.name
    }
    base = CATALOG["accel_pod_labels_info"]
    for bad in (
        replace(base, labels=("pod", "namespace", "label_x")),
        replace(base, kind=Kind.GAUGE, name="accel_pod_labels_info"),
        MetricSpec("accel_not_a_row_info", Kind.INFO, "Not in the catalog."),
    ):
        with pytest.raises(ValueError):
            with_rows([bad])
    assert pod_label_name("example.com/gpu-pool") == "label_example_com_gpu_pool"
