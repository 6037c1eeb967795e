"""Rates from cumulative counters, and an energy total that survives drops and jumps."""

from __future__ import annotations

from exporter.backends.counters import MAX_PLAUSIBLE_WATTS, Delta, Energy


def test_rate_needs_two_samples_and_a_forward_clock() -> None:
    d = Delta()
    assert d.rate(100, 1.0) is None
    assert d.rate(300, 2.0) == 200.0
    assert d.rate(400, 2.0) is None  # the timestamp did not move
    assert d.rate(100, 3.0) is None  # backwards: a reset, the new baseline
    assert d.rate(150, 4.0) == 50.0


def test_rate_above_the_limit_is_dropped_and_rebased() -> None:
    d = Delta()
    d.rate(0, 0.0)
    assert d.rate(10_000, 1.0, limit=1000) is None
    assert d.rate(10_500, 2.0, limit=1000) == 500.0


def test_energy_total_is_monotonic_and_exact() -> None:
    e = Energy(per_joule=1_000_000)  # µJ
    assert e.update(22_000_000_000_000, 0.0) == (22_000_000.0, None)
    assert e.update(22_000_300_000_000, 1.0) == (22_000_300.0, 300.0)
    assert e.update(200_000_000, 2.0) == (22_000_300.0, None)  # dropped to ~200 J
    assert e.update(500_000_000, 3.0) == (22_000_600.0, 300.0)
    assert e.update(22_000_900_000_000, 4.0) == (22_000_600.0, None)  # back up in one second
    watts = MAX_PLAUSIBLE_WATTS
    assert e.update(22_000_900_000_000 + int(watts * 1_000_000), 5.0)[1] == watts


def test_energy_in_millijoules() -> None:
    e = Energy(per_joule=1000)
    e.update(123_456_789, 10.0)
    assert e.update(123_457_789, 11.0) == (123_457.789, 1.0)
