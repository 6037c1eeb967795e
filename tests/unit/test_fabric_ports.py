"""Flaps from state transitions and link_downed, each down once; outages timed down to up."""

from __future__ import annotations

import pytest

from exporter.fabric.ports import PortMemory, observe


def run(memory: PortMemory, polls: list[tuple[bool, int | None, float]]) -> list[int]:
    return [observe(memory, up, downed, now).flaps for up, downed, now in polls]


def test_a_down_seen_by_both_signals_is_one_flap_and_its_outage_is_timed():
    m = PortMemory()
    flaps = run(m, [(True, 0, 100.0), (False, 1, 110.0), (False, 1, 120.0), (True, 1, 135.0)])
    assert flaps == [0, 1, 0, 0]
    assert (m.flaps, m.outage_closed, m.last_outage, m.down_since) == (1, 25.0, 25.0, None)


def test_three_flaps_and_the_outage_under_way_is_in_the_total():
    m = PortMemory()
    run(m, [(True, 0, 0.0)])
    t = 0.0
    for i in range(3):
        run(m, [(False, i + 1, t + 10), (True, i + 1, t + 14)])
        t += 20
    assert (m.flaps, m.outage_closed, m.last_outage) == (3, 12.0, 4.0)
    run(m, [(False, 4, 100.0)])
    assert m.outage_seconds(107.5) == 12.0 + 7.5


def test_a_flap_between_two_polls_is_seen_by_the_counter_alone():
    m = PortMemory()
    # Down and up three times between two polls: the state never saw it.
    assert run(m, [(True, 5, 0.0), (True, 8, 10.0)]) == [0, 3]
    assert m.outage_closed == 0.0  # its length is unknown: not timed


def test_an_administrative_down_is_seen_by_the_state_alone():
    m = PortMemory()
    assert run(m, [(True, 2, 0.0), (False, 2, 10.0), (False, 2, 20.0), (True, 2, 30.0)]) == [
        0,
        1,
        0,
        0,
    ]
    assert m.last_outage == 20.0


def test_a_down_plus_a_fast_flap_in_one_interval_counts_both():
    m = PortMemory()
    assert run(m, [(True, 0, 0.0), (False, 2, 10.0)]) == [0, 2]


def test_the_counter_showing_a_down_one_poll_late_is_not_counted_again():
    m = PortMemory()
    # The state read DOWN before the counter was updated (two reads, one race).
    assert run(m, [(True, 0, 0.0), (False, 0, 10.0), (False, 1, 20.0), (True, 1, 30.0)]) == [
        0,
        1,
        0,
        0,
    ]
    assert m.flaps == 1


def test_the_state_showing_a_down_one_poll_late_is_not_counted_again():
    m = PortMemory()
    # The counter grew while the state still read ACTIVE; the next poll sees it DOWN.
    assert run(m, [(True, 0, 0.0), (True, 1, 10.0), (False, 1, 20.0), (True, 1, 30.0)]) == [
        0,
        1,
        0,
        0,
    ]
    assert m.flaps == 1
    assert m.last_outage == 10.0  # the outage is still timed


def test_a_credit_lasts_one_poll_only():
    m = PortMemory()
    run(m, [(True, 0, 0.0), (False, 0, 10.0), (True, 0, 20.0)])
    # Later the counter grows by one with the state up on both sides: a new fast flap.
    assert run(m, [(True, 1, 30.0)]) == [1]
    assert m.flaps == 2


def test_a_counter_that_goes_backwards_is_a_new_baseline():
    m = PortMemory()
    assert run(m, [(True, 40, 0.0), (True, 0, 10.0), (True, 2, 20.0)]) == [0, 0, 2]
    assert m.link_downed == 2


def test_a_port_never_seen_up_has_neither_flap_nor_outage():
    m = PortMemory()
    assert run(m, [(False, 0, 0.0), (False, 0, 10.0), (True, 0, 20.0)]) == [0, 0, 0]
    assert (m.flaps, m.outage_closed, m.last_outage) == (0, 0.0, None)


def test_a_port_without_link_downed_counts_state_flaps():
    m = PortMemory()
    assert run(m, [(True, None, 0.0), (False, None, 1.0), (True, None, 2.0)]) == [0, 1, 0]


def test_memory_round_trips_and_refuses_what_is_not_one():
    m = PortMemory()
    run(m, [(True, 3, 0.0), (False, 4, 10.0)])
    assert PortMemory.from_wire(m.to_wire()) == m
    for bad in (
        [],
        {"flaps": "3"},
        {"flaps": -1},
        {"up": 1},
        {"down_since": "yesterday"},
        {"link_downed": True},
    ):
        with pytest.raises(ValueError):
            PortMemory.from_wire(bad)


def test_a_new_boot_keeps_the_counts_and_drops_the_baselines():
    m = PortMemory()
    run(m, [(True, 9, 0.0), (False, 10, 10.0)])
    m.new_boot()
    assert (m.flaps, m.link_downed, m.up, m.down_since) == (1, None, None, None)
    # After the reboot the counter restarted at 0: no flap from it.
    assert run(m, [(True, 0, 100.0)]) == [0]
