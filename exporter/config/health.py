"""The ``health`` section: how the health verdict weighs device events."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from exporter import action_file
from exporter.actions import Advice
from exporter.config.fields import Duration, FilePath, setting


@dataclass(frozen=True)
class ActionEntry:
    """One code's action, written out: the action, how far it reaches, what next, why."""

    action: str = setting("", "the action (none, restart_app, ..., replace_device; docs/health.md)")
    scope: str = setting(
        "device", "how far it reaches: device, partition, peer_domain, baseboard or node"
    )
    escalation: str = setting(
        "", "the next action when this one does not clear it ('': none named)"
    )
    escalation_scope: str = setting("", "how far the escalation reaches ('': as far as scope)")
    detail: str = setting("", "what exactly to do, in words (e.g. reseat the GPU tray)")


# An override: the action word alone, or the entry written out.
ActionOverride = str | ActionEntry


@dataclass(frozen=True)
class HealthConfig:
    """How the health verdict weighs device events (docs/health.md)."""

    event_window: Duration = setting(
        3600.0, "how long an XID or AFID counts, from the event's own time"
    )
    xid_actions: dict[str, ActionOverride] = setting(
        factory=dict, help="XID -> action or {action, scope, escalation, detail}, over NVIDIA's"
    )
    afid_actions: dict[str, ActionOverride] = setting(
        factory=dict, help="AFID -> action or {action, scope, escalation, detail}, over AMD's"
    )
    afid_table: FilePath = setting(
        "", "a site's AMD-supplied AFID -> action file (YAML), over the inferred one"
    )
    state_dir: str = setting("", "where the health memory (XIDs, AFIDs, resets) survives restarts")
    trend_rules: FilePath = setting(
        "", "a YAML file of error-rate trend rules replacing the shipped ones"
    )

    def check(self) -> list[tuple[str, str]]:
        """A positive window; override keys that are codes, words of the vocabulary.

        A site table file is read and checked here too: at start-up a bad one is a
        config error naming the key, its file and line; on a reload the reload is
        refused, so the daemon goes on with the last good table.
        """
        out: list[tuple[str, str]] = []
        if self.event_window <= 0:
            out.append(("event_window", "must be more than 0"))
        for key, table in (("xid_actions", self.xid_actions), ("afid_actions", self.afid_actions)):
            for code, entry in table.items():
                if not code.isdigit():
                    out.append((f"{key}.{code}", "is not a code (a whole number)"))
                if isinstance(entry, str):
                    out.extend(
                        (f"{key}.{code}", problem)
                        for _name, problem in action_file.entry_problems(entry)
                    )
                    continue
                words = (entry.action, entry.scope, entry.escalation, entry.escalation_scope)
                out.extend(
                    (f"{key}.{code}.{name}", problem)
                    for name, problem in action_file.entry_problems(*words)
                )
        if self.afid_table:
            try:
                action_file.load(self.afid_table)
            except action_file.ActionFileError as exc:
                out.append(("afid_table", str(exc)))
        if self.trend_rules:
            out.extend(("trend_rules", problem) for problem in _trend_problems(self.trend_rules))
        return out

    def xid_advice(self) -> dict[str, Advice]:
        """``xid_actions`` as advice by code (provenance ``config``)."""
        return _advice(self.xid_actions, "health.xid_actions")

    def afid_advice(self) -> dict[str, Advice]:
        """``afid_actions`` as advice by code (provenance ``config``)."""
        return _advice(self.afid_actions, "health.afid_actions")


def _trend_problems(path: str) -> list[str]:
    """What is wrong with a trend rules file ([]: it loads); read here, the judge reads it again."""
    from exporter import trend  # the rules need the catalog: only when a file is named

    try:
        trend.load_rules(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, yaml.YAMLError) as exc:
        return [f"{path}: {exc}"]
    return []


def _advice(table: dict[str, ActionOverride], key: str) -> dict[str, Advice]:
    return {
        str(int(code)): action_file.advice_of(entry, "config", key)
        for code, entry in table.items()
        if code.isdigit()
    }
