"""The known-noisy-signal registry: its data, its conditions, what it refuses."""

from __future__ import annotations

import pytest

from exporter import noisy_signals, trend
from exporter.noisy_signals import Condition, RegistryError, downgrade, holds, load, version

NAMES = ("device", "uuid", "afid", "severity")
LABELS = ("0", "GPU-a", "17", "non_fatal_corrected")


def test_versions_are_compared_by_their_numbers():
    assert version("570.86.15") == (570, 86, 15)
    assert version("26.5.0+rocm7.14") == (26, 5, 0, 7, 14)
    assert version("unknown") is None
    assert version("9.0") < version("26.5")  # not as strings


@pytest.mark.parametrize(
    ("when", "facts", "expected"),
    [
        (Condition("version_below", "driver_version", "575"), {"driver_version": "570.86"}, True),
        (Condition("version_below", "driver_version", "575"), {"driver_version": "575.0"}, False),
        (Condition("version_from", "driver_version", "575"), {"driver_version": "580.1"}, True),
        # A vendor's condition holds only on that vendor's devices.
        (
            Condition("version_from", "driver_version", "6", vendor="amd"),
            {"driver_version": "6.10", "vendor": "nvidia"},
            False,
        ),
        # A version that cannot be read downgrades nothing; neither does a missing fact.
        (Condition("version_below", "driver_version", "575"), {"driver_version": "n/a"}, False),
        (Condition("version_below", "driver_version", "575"), {}, False),
        (
            Condition("equals", "corrected_afids_decoded", "0"),
            {"corrected_afids_decoded": "0"},
            True,
        ),
        (
            Condition("equals", "corrected_afids_decoded", "0"),
            {"corrected_afids_decoded": "1"},
            False,
        ),
        (Condition("always"), {}, True),
    ],
)
def test_conditions(when, facts, expected):
    assert holds(when, facts, LABELS, NAMES, wall=0.0) is expected


def test_a_stale_record_is_one_older_than_the_condition_allows():
    when = Condition("stale_record", label="afid", older_than_s=900)
    facts = {noisy_signals.RECORD_FACT + "17": repr(1000.0)}
    assert holds(when, facts, LABELS, NAMES, wall=1000.0 + 901)
    assert not holds(when, facts, LABELS, NAMES, wall=1000.0 + 899)
    # No record time read for the AFID: not stale (the rule judges).
    assert not holds(when, {}, LABELS, NAMES, wall=1e9)


def test_the_first_entry_that_holds_decides_and_predicted_only_lowers_degraded():
    registry = load(
        """
entries:
  - {id: a, signals: [s], effect: predicted, when: {always: true}, statement: x, reference: y}
  - {id: b, signals: [s], effect: no_verdict, when: {always: true}, statement: x, reference: y}
"""
    )
    state, entry = downgrade(registry, "s", "degraded", {}, LABELS, NAMES, 0.0)
    assert (state, entry.id if entry else None) == ("predicted_failure", "a")
    # Already predicted: entry a changes nothing, which is no downgrade.
    assert downgrade(registry, "s", "predicted_failure", {}, LABELS, NAMES, 0.0) == (
        "predicted_failure",
        None,
    )
    assert downgrade(registry, "other", "degraded", {}, LABELS, NAMES, 0.0) == ("degraded", None)


@pytest.mark.parametrize(
    ("entry", "words"),
    [
        (
            "{id: a, signals: [s], effect: hide, when: {always: true}, statement: x, reference: y}",
            "effect",
        ),
        (
            "{id: a, signals: [], effect: no_verdict, when: {always: true}, statement: x, reference: y}",
            "non-empty",
        ),
        (
            "{id: a, signals: [s], effect: no_verdict, when: {sometimes: true}, statement: x, reference: y}",
            "condition",
        ),
        ("{id: a, signals: [s], effect: no_verdict, when: {always: true}, statement: x}", "keys"),
        (
            "{id: a, signals: [s], effect: no_verdict, when: {version_below: {fact: f, value: new}},"
            " statement: x, reference: y}",
            "no version",
        ),
    ],
)
def test_bad_entries_are_refused(entry, words):
    with pytest.raises(RegistryError, match=words):
        load(f"entries:\n  - {entry}\n")


def test_entry_ids_are_unique():
    one = "{id: a, signals: [s], effect: no_verdict, when: {always: true}, statement: x, reference: y}"
    with pytest.raises(RegistryError, match="unique"):
        load(f"entries:\n  - {one}\n  - {one}\n")


def test_the_shipped_registry_names_the_three_known_noisy_signals_with_their_sources():
    by_id = {e.id: e for e in noisy_signals.REGISTRY}
    assert set(by_id) == {"dcgm_4_7_nvlink_ber", "amdsmi_before_26_5_corrected_afids", "stale_cper"}
    assert "DCGM 4.7" in by_id["dcgm_4_7_nvlink_ber"].statement
    assert "26.5.0" in by_id["amdsmi_before_26_5_corrected_afids"].statement
    assert "#506" in by_id["stale_cper"].reference
    # Every entry names signals some shipped rule has.
    signals = {r.signal for r in trend.RULES}
    assert all(set(e.signals) <= signals for e in noisy_signals.REGISTRY)
