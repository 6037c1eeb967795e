"""Property tests: on any input the parsers return a model or raise their own error, nothing else."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exporter.ccl.ras_events import MonitorDecoder, MonitorEvent
from exporter.ccl.ras_model import RasParseError, RasReport
from exporter.ccl.ras_parse import parse_json, parse_report, parse_text
from exporter.ccl.ras_state import classify, degradations, fingerprint
from tests.helpers.ras_reports import json_report, make_job, text_report

_JOB = make_job(2, 4)
_JOB.set_fate("10.0.0.2", 10005, "missing")
_JOB.comms[0].ranks[1].counts[0] += 4
SEEDS = [
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
    # Whatever was parsed can be judged without raising either.
    classify(report, stalled=False)
    degradations(report)
    fingerprint(report)
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
def test_mutated_real_reports(text):
    _outcome(parse_text, text)
    _outcome(parse_json, text)
    _outcome(parse_report, text.encode())


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
