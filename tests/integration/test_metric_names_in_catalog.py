"""Every metric name a dashboard panel, alert or recording rule uses exists in the catalog.

Names with a colon must be recorded by the shipped recording rules; Prometheus'
own series (up, ALERTS) are the only other exception. A histogram is used
through its _bucket/_sum/_count series.
"""

from __future__ import annotations

import re

from exporter.catalog import CATALOG, Kind
from tests.helpers.deploy import REPO, all_rules, dashboards
from tests.helpers.promql import BUILTIN_SERIES, as_promql, dashboard_queries, metric_names

HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")
# Series of other exporters the rules join with, and the labels they carry there.
# kube-state-metrics: kube_node_status_capacity{node, resource, unit} (resource names
# sanitised: nvidia.com/gpu becomes nvidia_com_gpu).
FOREIGN_SERIES = {"kube_node_status_capacity": {"node", "resource", "unit"}}
# Labels Prometheus adds to every scraped series (the chart also relabels node).
TARGET_LABELS = {"job", "instance", "node"}
_SELECTOR = re.compile(r"([A-Za-z_:][\w:]*)\s*\{([^{}]*)\}")
_MATCHER = re.compile(r"(\w+)\s*(?:=~|!~|!=|=)")


def exposed_names() -> set[str]:
    """Every sample name the exporter can expose, from the catalog."""
    names = set()
    for spec in CATALOG.values():
        names.add(spec.name)
        if spec.kind is Kind.HISTOGRAM:
            names |= {spec.name + suffix for suffix in HISTOGRAM_SUFFIXES}
    return names


def recorded_names() -> set[str]:
    return {rule["record"] for rule in all_rules() if "record" in rule}


def uses() -> dict[str, set[str]]:
    """Metric name -> where it is used."""
    out: dict[str, set[str]] = {}
    for rule in all_rules():
        where = f"rule {rule.get('alert') or rule.get('record')}"
        for name in metric_names(rule["expr"]):
            out.setdefault(name, set()).add(where)
    for file_name, board in dashboards().items():
        for place, expr in dashboard_queries(board):
            for name in metric_names(as_promql(expr)):
                out.setdefault(name, set()).add(f"{file_name} {place}")
    return out


def test_rule_and_dashboard_names_are_in_the_catalog() -> None:
    known = exposed_names() | recorded_names() | BUILTIN_SERIES | set(FOREIGN_SERIES)
    used = uses()
    missing = {name: sorted(where)[:3] for name, where in sorted(used.items()) if name not in known}
    assert missing == {}, "metric names used but not in exporter.catalog.CATALOG:\n" + "\n".join(
        f"  {name}  (e.g. {', '.join(where)})" for name, where in missing.items()
    )


def all_expressions() -> list[tuple[str, str]]:
    out = [(f"rule {r.get('alert') or r.get('record')}", r["expr"]) for r in all_rules()]
    for file_name, board in dashboards().items():
        out += [
            (f"{file_name} {place}", as_promql(expr)) for place, expr in dashboard_queries(board)
        ]
    return out


def test_selector_labels_exist_on_the_selected_family() -> None:
    # A matcher on a label the family does not have selects nothing, silently.
    wrong = []
    for where, expr in all_expressions():
        for name, matchers in _SELECTOR.findall(expr):
            base = name
            for suffix in HISTOGRAM_SUFFIXES:
                if name.endswith(suffix) and name[: -len(suffix)] in CATALOG:
                    base = name[: -len(suffix)]
            spec = CATALOG.get(base)
            if name in FOREIGN_SERIES:
                allowed = FOREIGN_SERIES[name] | TARGET_LABELS
            elif spec is None:
                continue  # unknown names are the other test's finding
            else:
                allowed = set(spec.labels) | TARGET_LABELS | ({"le"} if base != name else set())
            wrong += [
                f"{where}: {name} has no label {label!r}"
                for label in _MATCHER.findall(matchers)
                if label not in allowed
            ]
    assert wrong == []


def test_colon_names_are_only_recording_rule_outputs() -> None:
    recorded = recorded_names()
    stray = sorted(name for name in uses() if ":" in name and name not in recorded)
    assert stray == []


def test_every_recording_rule_output_is_used_or_documented() -> None:
    # Recording rules exist for dashboards and alerts; an unused one is dead weight,
    # unless it is a fleet/job aggregate meant for ad-hoc queries (documented in docs/deploy.md).
    doc = (REPO / "docs" / "deploy.md").read_text()
    used = uses()
    unused = sorted(
        name
        for name in recorded_names()
        if not (used.get(name, set()) - {f"rule {name}"}) and name not in doc
    )
    assert unused == []


def test_skew_ratio_means_one_thing() -> None:
    # accel_ccl_collective_skew_ratio is longest over shortest (1 = even, grows with skew);
    # a recorded 1 - min/max (0 = even, at most 1) must not share the name.
    assert "longest over shortest" in CATALOG["accel_ccl_collective_skew_ratio"].help.lower()
    reused = sorted(
        name
        for name in recorded_names() | set(uses())
        if name.endswith("skew_ratio") and name != "accel_ccl_collective_skew_ratio"
    )
    assert reused == []


_VALUE_MATCHER = re.compile(r'(\w+)\s*(?:=~|!~|!=|=)\s*"([^"]*)"')
# A value a matcher can name literally: a word or an alternation of words.
_WORDS = re.compile(r"\w*(?:\|\w*)*")


def test_selector_values_are_in_the_label_enumeration() -> None:
    # A value outside the family's enumeration selects nothing, silently: this is how a
    # regex once hid two ECC vocabularies (type=~"uncorrected|uncorrectable").
    wrong = []
    for where, expr in all_expressions():
        for name, matchers in _SELECTOR.findall(expr):
            spec = CATALOG.get(name)
            if spec is None:
                continue
            for label, pattern in _VALUE_MATCHER.findall(matchers):
                allowed = spec.values.get(label)
                if allowed is None or not _WORDS.fullmatch(pattern) or pattern == "x":
                    continue  # not enumerated, a real regex, or a dashboard variable
                wrong += [
                    f"{where}: {name}{{{label}={value!r}}} is not one of {allowed}"
                    for value in pattern.split("|")
                    if value not in allowed
                ]
    assert wrong == []
