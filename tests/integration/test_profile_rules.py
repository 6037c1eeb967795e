"""The shipped alert and recording rules work on the ``minimal`` profile, and every
dashboard panel on the profile docs/profiles.md says it needs.

Reads the rule and dashboard files, takes the catalog families each expression
uses (a histogram through its _bucket/_sum/_count series), and checks them
against the profile's families.
"""

from __future__ import annotations

import re

from exporter.catalog import CATALOG, Kind
from exporter.catalog.profiles import PROFILES, members
from tests.helpers.deploy import REPO, all_rules, dashboards
from tests.helpers.promql import as_promql, dashboard_queries, metric_names

HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")
# docs/profiles.md: | `dashboard.json` | panel title | profile |
_ROW = re.compile(r"^\| `([\w.-]+\.json)` \| (.+?) \| `(\w+)` \|")


def family(name: str) -> str | None:
    if name in CATALOG:
        return name
    for suffix in HISTOGRAM_SUFFIXES:
        base = name[: -len(suffix)]
        if name.endswith(suffix) and base in CATALOG and CATALOG[base].kind is Kind.HISTOGRAM:
            return base
    return None


def families(expr: str) -> set[str]:
    return {f for f in map(family, metric_names(expr)) if f is not None}


def needed(used: set[str]) -> str:
    """The smallest profile that has every family of ``used``."""
    return next(p for p in PROFILES if used <= members(p))


def documented() -> dict[tuple[str, str], str]:
    text = (REPO / "docs" / "profiles.md").read_text()
    return {(m[1], m[2]): m[3] for m in map(_ROW.match, text.splitlines()) if m}


def test_every_alert_and_recording_rule_works_on_minimal() -> None:
    minimal = members("minimal")
    missing = {
        rule.get("alert") or rule.get("record"): sorted(families(rule["expr"]) - minimal)
        for rule in all_rules()
    }
    assert {name: left for name, left in missing.items() if left} == {}
    assert len(missing) > 30  # the rules were read


def test_every_panel_works_on_the_profile_the_docs_name() -> None:
    panels: dict[tuple[str, str], set[str]] = {}
    for file_name, board in dashboards().items():
        for place, expr in dashboard_queries(board):
            if place.startswith("panel "):
                title = place[len("panel ") :].rsplit(" ", 1)[0].strip("'\"")
                panels.setdefault((file_name, title), set()).update(families(as_promql(expr)))
    assert len(panels) > 30  # the dashboards were read
    wanted = {key: needed(used) for key, used in panels.items() if needed(used) != "minimal"}
    assert documented() == wanted
