"""Metric names in PromQL expressions, and the queries of Grafana dashboards.

The name extractor is a tokenizer, not a parser: the expressions themselves are
checked by promtool (rules directly, dashboard queries wrapped into a rule
file), so here it only has to tell metric names apart from functions,
keywords, label names and literals.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

# Builtin series Prometheus itself produces.
BUILTIN_SERIES = frozenset({"up", "ALERTS", "ALERTS_FOR_STATE"})

_KEYWORDS = frozenset(
    {
        "and",
        "or",
        "unless",
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
        "bool",
        "offset",
        "inf",
        "nan",
        "atan2",
    }
)
_AGGREGATIONS = frozenset(
    {
        "sum",
        "min",
        "max",
        "avg",
        "group",
        "stddev",
        "stdvar",
        "count",
        "count_values",
        "bottomk",
        "topk",
        "quantile",
        "limitk",
        "limit_ratio",
    }
)
_STRING = re.compile(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'|`[^`]*`')
_BRACES = re.compile(r"\{[^{}]*\}")
_BRACKETS = re.compile(r"\[[^\[\]]*\]")
_GROUPING = re.compile(
    r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)", re.IGNORECASE
)
_TOKEN = re.compile(r"(?P<num>\d[\w.]*|\.\d\w*)|(?P<id>[A-Za-z_:][\w:]*)")


def metric_names(expr: str) -> set[str]:
    """Every metric (or recorded series) name an expression selects."""
    text = _STRING.sub('""', expr)
    text = _BRACES.sub(" ", text)
    text = _BRACKETS.sub(" ", text)
    text = _GROUPING.sub(" ", text)
    names: set[str] = set()
    for match in _TOKEN.finditer(text):
        word = match.group("id")
        if word is None or word.lower() in _KEYWORDS:
            continue
        rest = text[match.end() :].lstrip()
        if rest.startswith("(") or word in _AGGREGATIONS:
            continue  # a function call or an aggregation operator
        names.add(word)
    return names


# Grafana's interval variables become a duration, every other variable a plain value.
_INTERVAL_VARS = re.compile(r"\$\{?__(rate_interval|interval|range)(_ms|_s)?\}?")
_VARIABLE = re.compile(r"\$\{[^}]+\}|\$\w+|\[\[\w+\]\]")
_LABEL_VALUES = re.compile(r"^\s*label_values\s*\((?P<body>.*)\)\s*$", re.DOTALL)
_QUERY_RESULT = re.compile(r"^\s*query_result\s*\((?P<body>.*)\)\s*$", re.DOTALL)


def as_promql(grafana_expr: str) -> str:
    """A dashboard query with its template variables replaced, so promtool can parse it."""
    text = _INTERVAL_VARS.sub("5m", grafana_expr)
    return _VARIABLE.sub("x", text)


def variable_query(query: Any) -> str | None:
    """The PromQL inside a Prometheus query variable (label_values(...), query_result(...))."""
    text = query.get("query", "") if isinstance(query, Mapping) else str(query or "")
    match = _QUERY_RESULT.match(text)
    if match:
        return match.group("body")
    match = _LABEL_VALUES.match(text)
    if match:
        body = match.group("body")
        # label_values(selector, label): the selector is everything before the last comma.
        selector, comma, _label = body.rpartition(",")
        return selector if comma else None
    return None


def _panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels", []))


def dashboard_queries(dashboard: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(where, expr) for every panel target and query variable of a dashboard."""
    out: list[tuple[str, str]] = []
    for panel in _panels(dashboard.get("panels", [])):
        for target in panel.get("targets", []):
            if target.get("expr"):
                out.append((f"panel {panel.get('title')!r} {target.get('refId')}", target["expr"]))
    for variable in dashboard.get("templating", {}).get("list", []):
        if variable.get("type") == "query":
            expr = variable_query(variable.get("query"))
            if expr:
                out.append((f"variable {variable['name']}", expr))
    return out


def all_panels(dashboard: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every panel, rows and the panels inside collapsed rows included."""
    return list(_panels(dashboard.get("panels", [])))
