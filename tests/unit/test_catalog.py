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
