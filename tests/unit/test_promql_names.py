"""The metric-name extractor the catalog checks rely on."""

from __future__ import annotations

import pytest

from tests.helpers.promql import as_promql, dashboard_queries, metric_names, variable_query


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ('up{job="accel-exporter"} == 0', {"up"}),
        ('absent(up{job="a"})', {"up"}),
        ("sum by (job, instance) (accel_devices)", {"accel_devices"}),
        ("sum(accel_power_watts) by (instance)", {"accel_power_watts"}),
        (
            "histogram_quantile(0.95, sum by (source, le) "
            '(rate(accel_exporter_source_poll_duration_seconds_bucket{job="x"}[5m])))',
            {"accel_exporter_source_poll_duration_seconds_bucket"},
        ),
        (
            "quantile by (comm, collective) (0.5, accel_ccl_rank_bus_bandwidth_bytes_per_second)",
            {"accel_ccl_rank_bus_bandwidth_bytes_per_second"},
        ),
        (
            "accel_device_job_info * on (job, instance, uuid) group_left accel_utilization_ratio",
            {"accel_device_job_info", "accel_utilization_ratio"},
        ),
        (
            "(accel_device_up == 0) * on (job, instance, device, uuid) group_left (reason) "
            "accel_device_down_reason_info or on (job) vector(0)",
            {"accel_device_up", "accel_device_down_reason_info"},
        ),
        (
            "instance:accel_memory_used_bytes:sum / instance:accel_memory_total_bytes:sum",
            {"instance:accel_memory_used_bytes:sum", "instance:accel_memory_total_bytes:sum"},
        ),
        (
            'accel_xid_last_timestamp_seconds{xid=~"48|79"} > time() - 3600',
            {"accel_xid_last_timestamp_seconds"},
        ),
        (
            "rate(accel_energy_joules_total[5m] offset 1h) * 1e3 > bool 100",
            {"accel_energy_joules_total"},
        ),
        ("max_over_time(accel_devices[1d]) unless accel_devices", {"accel_devices"}),
        ('count(ALERTS{alertstate="firing", alertname=~"Accel.*"}) or vector(0)', {"ALERTS"}),
        ('label_replace(accel_device_info, "x", "$1", "uuid", "(.*)")', {"accel_device_info"}),
        ("topk(3, accel_temperature_celsius)", {"accel_temperature_celsius"}),
    ],
)
def test_metric_names(expr: str, names: set[str]) -> None:
    assert metric_names(expr) == names


def test_grafana_variables_become_parsable_promql() -> None:
    expr = 'rate(accel_energy_joules_total{job="$job", uuid=~"${gpu:regex}"}[$__rate_interval])'
    assert as_promql(expr) == 'rate(accel_energy_joules_total{job="x", uuid=~"x"}[5m])'


def test_variable_queries() -> None:
    assert variable_query({"query": 'label_values(accel_device_info{job="$job"}, uuid)'}) == (
        'accel_device_info{job="$job"}'
    )
    assert variable_query("query_result(sum by (job) (up))") == "sum by (job) (up)"
    # label_values(label) has no selector: nothing to check.
    assert variable_query("label_values(instance)") is None


def test_dashboard_queries_walk_rows_and_variables() -> None:
    board = {
        "panels": [
            {
                "type": "row",
                "title": "r",
                "panels": [
                    {"title": "inner", "targets": [{"refId": "A", "expr": "accel_power_watts"}]},
                ],
            },
            {"title": "top", "targets": [{"refId": "B", "expr": "up"}, {"refId": "C"}]},
        ],
        "templating": {
            "list": [
                {"type": "datasource", "name": "datasource", "query": "prometheus"},
                {"type": "query", "name": "node", "query": {"query": "label_values(up, instance)"}},
            ]
        },
    }
    assert dashboard_queries(board) == [
        ("panel 'inner' A", "accel_power_watts"),
        ("panel 'top' B", "up"),
        ("variable node", "up"),
    ]
