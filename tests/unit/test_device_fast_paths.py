"""The device backends' tuned reads against plain reference implementations (issue 23).

Two backends read their busiest values by hand instead of through
``contract.Emitter``:

- NVML's field values (``nvml_device.DeviceReader._field_values``): one
  ``nvmlDeviceGetFieldValues`` request per GPU whose answers are routed by runs
  of entries (``nvml_gpu.FieldPlan``), raw union bits converted only where the
  valueType is not an unsigned integer, failed entries counted and dropped;
- HLML's fast read (``hlml.HlmlBackend._fast``), which appends rows and checks
  each value's all-ones and range inline.

Each is driven here, through the real binding and the fake library, with
device states Hypothesis draws (sentinels, zeros, huge values, NaN, failures,
NVLink layouts that change between polls), and its rows are compared with rows
computed directly from the drawn state by the rules the modules document. One
backend serves every example of a test: starting one per example is slow, and a
backend that carries its plan and energy total from poll to poll is the one the
daemon runs.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from exporter.backends import nvml_support as nv
from exporter.backends.contract import FIELD_ERRORS
from exporter.backends.nvml import NvmlBackend
from exporter.backends.nvml_device import FIELD_SPECS
from tests.fakes.nvml import control as nvml_control
from tests.fakes.nvml.control import FakeNvml, FieldValue
from tests.helpers.backend_harness import Backends, backends, poll, started, values

SETTINGS = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# -- NVML field values -------------------------------------------------------------

LINKS = 4  # NVLinks the fake GPU has; each poll draws which are active
U32, U64 = 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF
# Per-entry nvmlReturn a field can answer: absent (not counted) and failed (counted).
CODES = (nvml_control.NOT_SUPPORTED, nv.NO_PERMISSION, nvml_control.UNKNOWN, nv.TIMEOUT)

# The value of each nvmlValueType_t a driver may put in an entry, "not available"
# encodings, zero and the extremes of the member's range included.
MEMBER_VALUES: dict[int, st.SearchStrategy[Any]] = {
    nvml_control.VALUE_DOUBLE: st.one_of(
        st.floats(),
        st.sampled_from([0.0, -1.0, float(U32), math.nan, math.inf, -math.inf, 1.7e308]),
    ),
    nvml_control.VALUE_UINT: st.one_of(st.integers(0, U32), st.sampled_from([0, U32])),
    nvml_control.VALUE_ULONG: st.one_of(st.integers(0, U64), st.sampled_from([0, U32, U64])),
    nvml_control.VALUE_ULL: st.one_of(st.integers(0, U64), st.sampled_from([0, U32, U64])),
    nvml_control.VALUE_SLL: st.one_of(st.integers(-(2**63), 2**63 - 1), st.just(-1)),
    nvml_control.VALUE_SINT: st.one_of(st.integers(-(2**31), 2**31 - 1), st.just(-1)),
    nvml_control.VALUE_USHORT: st.one_of(st.integers(0, 0xFFFF), st.just(0xFFFF)),
}


@st.composite
def entry_values(draw: st.DrawFn) -> tuple[int, Any]:
    kind = draw(st.sampled_from(sorted(MEMBER_VALUES)))
    return kind, draw(MEMBER_VALUES[kind])


@dataclass
class NvmlPoll:
    """One poll's drawn state: links up, every entry's answer, failing field ids."""

    slow: bool
    active: tuple[int, ...]
    answers: dict[tuple[int, int], tuple[int, Any]]  # (field id, scope id) -> (valueType, value)
    failing: dict[int, int]  # field id -> its entries' nvmlReturn


@st.composite
def nvml_polls(draw: st.DrawFn) -> list[NvmlPoll]:
    out = []
    for n in range(draw(st.integers(1, 3))):
        answers = {}
        for fid, (_metric, extra, _scale) in FIELD_SPECS.items():
            for scope in [0] if extra else range(LINKS):
                answers[fid, scope] = draw(entry_values())
        failing = draw(
            st.dictionaries(st.sampled_from(sorted(FIELD_SPECS)), st.sampled_from(CODES))
        )
        active = tuple(link for link in range(LINKS) if draw(st.booleans()))
        # The first poll is slow: the links it learns make an example independent
        # of the one before (which Hypothesis needs to shrink a failure).
        out.append(NvmlPoll(n == 0 or draw(st.booleans()), active, answers, failing))
    return out


def member_number(kind: int, value: Any) -> float | None:
    """The number an entry holds, or None where it is NVML's "not available"."""
    if kind == nvml_control.VALUE_USHORT and value == 0xFFFF:
        return None  # all ones of the member
    if value in (U32, U64, -1) or not math.isfinite(value):
        return None
    return value  # type: ignore[no-any-return]


def expected_fields(state: NvmlPoll, links: tuple[int, ...], uuid: str) -> dict[Any, float]:
    """Every FIELD_SPECS row, link by link, from the drawn state: the plain reference."""
    rows: dict[Any, float] = {}
    for fid, (metric, extra, (mul, per)) in FIELD_SPECS.items():
        for scope, label in [(0, extra)] if extra else [(link, str(link)) for link in links]:
            if fid in state.failing:
                continue
            number = member_number(*state.answers[fid, scope])
            if number is None:
                continue
            scaled = float(number * mul if per == 1 else number / per)
            if math.isfinite(scaled):
                rows[metric, ("0", uuid, label)] = scaled
    return rows


def expected_failures(state: NvmlPoll, links: tuple[int, ...]) -> dict[str, int]:
    """Failed entries of one poll by reason (absent ones are not failures)."""
    out: dict[str, int] = {}
    for fid, code in state.failing.items():
        entries = 1 if FIELD_SPECS[fid][1] else len(links)
        if code in nv.ABSENT or not entries:
            continue
        reason = nv.reason_of(code)
        out[reason] = out.get(reason, 0) + entries
    return out


def field_rows(got: dict[Any, float]) -> dict[Any, float]:
    """The rows of a reply that come from FIELD_SPECS (the memory temperature only)."""
    families = {metric for metric, _extra, _scale in FIELD_SPECS.values()}
    return {
        k: v
        for k, v in got.items()
        if k[0] in families and (k[0] != "accel_temperature_celsius" or k[1][2] == "memory")
    }


def errors_of(got: dict[Any, float]) -> dict[str, float]:
    return {k[1][3]: v for k, v in got.items() if k[0] == FIELD_ERRORS and k[1][2] == "nvml"}


@dataclass
class NvmlRig:
    """One started backend on the shared fake, and what the last polls left behind."""

    fake: FakeNvml
    backend: NvmlBackend
    links: tuple[int, ...] = ()


def answered(**changed: tuple[int, Any]) -> dict[tuple[int, int], tuple[int, Any]]:
    """Every entry an unsigned 0 but ``changed`` (keyed ``f<field id>_<scope id>``)."""
    out = {
        (fid, scope): (nvml_control.VALUE_ULL, 0)
        for fid, (_metric, extra, _scale) in FIELD_SPECS.items()
        for scope in ([0] if extra else range(LINKS))
    }
    for name, answer in changed.items():
        fid, scope = name[1:].split("_")
        out[int(fid), int(scope)] = answer
    return out


@pytest.fixture
def nvml_rig(nvml_shared: FakeNvml) -> Iterator[NvmlRig]:
    nvml_shared.reset(1)
    nvml_shared.device(0).nvlink_count = LINKS
    nvml_shared.device(0).nvlink_active_mask = 0
    made: Backends[NvmlBackend]
    with backends(NvmlBackend, events=False) as made:
        yield NvmlRig(nvml_shared, started(made))
    nvml_shared.set_fields(0, [])
    nvml_shared.clear_rules()


@SETTINGS
@given(polls=nvml_polls())
# Found by this test: a finite double that scaling to bytes made infinite was
# exported, and the worker's reply could not be encoded.
@example(polls=[NvmlPoll(True, (0,), answered(f139_0=(nvml_control.VALUE_DOUBLE, 1.7e305)), {})])
def test_nvml_field_values_equal_the_plain_reference(nvml_rig: NvmlRig, polls: list[NvmlPoll]):
    fake, uuid = nvml_rig.fake, nvml_rig.fake.uuid(0)
    for state in polls:
        fake.device(0).nvlink_active_mask = sum(1 << link for link in state.active)
        fake.set_fields(
            0,
            [
                FieldValue(fid, value, kind, scope)
                for (fid, scope), (kind, value) in state.answers.items()
            ],
        )
        fake.clear_rules()
        for fid, code in state.failing.items():
            fake.add_rule(f"field:{fid}", error=code, device=0)
        # The count before this poll, from the backend itself: an example that failed
        # part-way (Hypothesis goes on with the same backend) leaves no stale baseline.
        before = dict(nvml_rig.backend.gpus[0].errors)
        reply = poll(nvml_rig.backend, slow=state.slow)
        if state.slow:  # the slow read runs first and learns the links the fast one asks
            nvml_rig.links = state.active
        assert reply["devices"][0]["up"]
        got = values(reply)
        assert field_rows(got) == expected_fields(state, nvml_rig.links, uuid)
        want = dict(before)
        for reason, n in expected_failures(state, nvml_rig.links).items():
            want[reason] = want.get(reason, 0) + n
        assert errors_of(got) == want
