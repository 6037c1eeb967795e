"""The daemon as a subprocess: /metrics is valid exposition and the host source is up."""

from __future__ import annotations

from tests.helpers.daemon import value
from tests.helpers.promtool import check_metrics


def test_metrics_pass_promtool_and_host_is_up(daemon_factory):
    d = daemon_factory()
    d.wait_metric("accel_exporter_source_up", 1, source="host")
    text = d.metrics()
    assert value(text, "accel_host_memory_total_bytes") > 0
    check_metrics(text)
