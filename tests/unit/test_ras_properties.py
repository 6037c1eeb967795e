"""Property tests: on any input the parsers return a model or raise their own error, nothing else.

Whatever they return must also go all the way to valid readings: judged,
turned into job, communicator and rank series, and accepted by the store.
"""

from __future__ import annotations

import re
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exporter.ccl import ras_readings
from exporter.ccl.ras_events import MonitorDecoder, MonitorEvent
from exporter.ccl.ras_model import RasParseError, RasReport
from exporter.ccl.ras_parse import parse_json, parse_report, parse_text
from exporter.ccl.ras_state import classify, degradations, fingerprint
from exporter.store import validate
from tests.helpers.ras_reports import json_report, make_job, text_report

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "rcclras"

_JOB = make_job(2, 4)
_JOB.set_fate("10.0.0.2", 10005, "missing")
_JOB.comms[0].ranks[1].counts[0] += 4
# Real captures (tests/fixtures/rcclras) and reports generated to the documented formats.
REAL = [
    (FIXTURES / name).read_text()
    for name in ("rccl_v2283_text_healthy.txt", "rccl_v2283_text_degraded.txt")
]
SEEDS = [
    *REAL,
    text_report(_JOB),
    text_report(_JOB, style="2.24"),
    json_report(_JOB),
    json_report(_JOB, missing_comma_bug=True),
]
FAST = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _outcome(parser, data) -> RasReport | None:
    try:
        report = parser(data)
    except RasParseError:
        return None
    assert isinstance(report, RasReport)
    # Whatever was parsed can be judged and exported without raising either.
    state, reasons = classify(report, stalled=False)
    degradations(report)
    fingerprint(report)
    readings = ras_readings.state_readings("a:1", state, reasons)
    readings += ras_readings.job_readings("a:1", report)
    readings += ras_readings.rank_readings("a:1", report, lambda ref: True)
    _, bad = validate(readings)
    assert not bad, bad
    return report


@FAST
@given(st.binary(max_size=4096))
def test_arbitrary_bytes(data):
    _outcome(parse_report, data)


@FAST
@given(st.text(max_size=2048))
def test_arbitrary_text_to_both_parsers(text):
    _outcome(parse_text, text)
    _outcome(parse_json, text)


@st.composite
def mutated(draw):
    seed = draw(st.sampled_from(SEEDS))
    ops = draw(
        st.lists(
            st.tuples(
                st.integers(0, len(seed)),
                st.integers(0, 40),
                st.text(
                    alphabet=st.sampled_from('0123456789-,:"{}[] \nabcRankGPU#()'), max_size=12
                ),
            ),
            max_size=6,
        )
    )
    for start, length, insert in ops:
        start = min(start, len(seed))
        seed = seed[:start] + insert + seed[start + length :]
    return seed


@FAST
@given(mutated())
def test_mutated_captured_and_generated_reports(text):
    _outcome(parse_text, text)
    _outcome(parse_json, text)
    _outcome(parse_report, text.encode())


_NUMBER = re.compile(r"\d+")


@st.composite
def renumbered(draw):
    """A seed with some of its numbers replaced by any integer, 64-bit or far beyond."""
    seed = draw(st.sampled_from(SEEDS))
    spans = [m.span() for m in _NUMBER.finditer(seed)]
    chosen = draw(st.lists(st.sampled_from(spans), min_size=1, max_size=4, unique=True))
    for start, end in sorted(chosen, reverse=True):
        value = draw(
            st.one_of(
                st.integers(-(1 << 64), 1 << 65),
                st.integers(10**18, 10**400),
                st.sampled_from([(1 << 64) - 1, 1 << 64, -(1 << 63), -(1 << 63) - 1]),
            )
        )
        seed = seed[:start] + str(value) + seed[end:]
    return seed


@FAST
@given(renumbered())
def test_any_number_anywhere(text):
    _outcome(parse_report, text)


@FAST
@given(st.lists(st.binary(max_size=512), max_size=20))
def test_monitor_decoder_never_raises(chunks):
    decoder = MonitorDecoder()
    for chunk in chunks:
        for event in decoder.feed(chunk):
            assert isinstance(event, MonitorEvent) and event.event


def test_pathological_inputs():
    for text in ("[" * 100_000, "{" + '"a":' * 50_000, "9" * 10_000):
        assert _outcome(parse_json, text) is None
    cut = text_report(_JOB).replace("from 1 job process", "from " + "9" * 5000 + " job process")
    assert _outcome(parse_text, cut) is None
