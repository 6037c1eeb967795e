"""The fault-rule engine every fake library shares (tests/fakes/fault_rules.h), driven
directly: a shim exports fr_apply over a table that Python's mirror writes."""

from __future__ import annotations

import ctypes
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakes import fault_rules
from tests.fakes.fault_rules import FaultRules, Faults, Rule
from tests.helpers.native import compile_shared
from tests.helpers.wait import eventually

HEADER = Path(fault_rules.__file__).with_name("fault_rules.h")
SHIM = """
#include <stddef.h>
#include "{header}"

int apply(fr_faults_t *f, const char *fn, int dev, long long arg, int may_hang) {{
    fr_count(f);
    return fr_apply(f, fn, dev, (int64_t)arg, may_hang);
}}

void layout(uint64_t *out) {{
    out[0] = sizeof(fr_rule_t);
    out[1] = offsetof(fr_rule_t, arg);
    out[2] = offsetof(fr_rule_t, fn);
    out[3] = sizeof(fr_faults_t);
    out[4] = offsetof(fr_faults_t, rules);
}}
"""


class Table(FaultRules):
    """A rule table in this process's memory, as a fake's state file holds one."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        self.state = Faults()
        self._apply = lib.apply
        self._apply.argtypes = [
            ctypes.c_void_p,
            ctypes.c_char_p,
            ctypes.c_int,
            ctypes.c_longlong,
            ctypes.c_int,
        ]

    def call(self, fn: str, device: int = -1, arg: int = -1, may_hang: bool = True) -> int:
        """One call's answer (0: it goes on)."""
        return int(
            self._apply(ctypes.addressof(self.state), fn.encode(), device, arg, int(may_hang))
        )


@pytest.fixture(scope="module")
def lib(tmp_path_factory: pytest.TempPathFactory) -> ctypes.CDLL:
    out = tmp_path_factory.mktemp("fault-rules")
    source = out / "shim.c"
    source.write_text(SHIM.format(header=HEADER))
    return ctypes.CDLL(str(compile_shared(source, "libfaultshim.so", out)))


@pytest.fixture
def table(lib: ctypes.CDLL) -> Iterator[Table]:
    t = Table(lib)
    yield t
    t.clear_rules()
    t.release_hangs()


def test_the_mirror_matches_the_header(lib: ctypes.CDLL) -> None:
    out = (ctypes.c_uint64 * 5)()
    lib.layout(out)
    assert list(out) == [
        ctypes.sizeof(Rule),
        Rule.arg.offset,
        Rule.fn.offset,
        ctypes.sizeof(Faults),
        Faults.rules.offset,
    ]


def test_a_rule_matches_its_function_device_and_argument(table: Table) -> None:
    table.rule("getPower", 7, device=2)
    table.rule("getTemp", 8, arg=3)
    assert [table.call("getPower", 2), table.call("getPower", 1), table.call("getClock", 2)] == [
        7,
        0,
        0,
    ]
    assert [table.call("getTemp", 0, arg=3), table.call("getTemp", 0, arg=4)] == [8, 0]
    table.rule("*", 9, device=1)
    assert table.call("getClock", 1) == 9
    assert table.state.calls == 6


def test_rules_apply_in_table_order_and_a_pass_through_counts(table: Table) -> None:
    counting = table.rule("getPower")  # error 0: counts, the call goes on
    table.rule("getPower", 5)
    table.rule("getPower", 6)
    assert table.call("getPower") == 5
    assert table.state.rules[counting].matched == 1


def test_after_calls_and_times_bound_a_rule(table: Table) -> None:
    slot = table.rule("getPower", 3, after_calls=2, times=2)
    assert [table.call("getPower") for _ in range(6)] == [0, 0, 3, 3, 0, 0]
    assert table.state.rules[slot].remaining == 0
    table.clear_rule(slot)
    forever = table.rule("getPower", 4)
    assert [table.call("getPower") for _ in range(3)] == [4, 4, 4]
    assert table.state.rules[forever].remaining == -1


def test_a_delay_comes_before_the_answer(table: Table) -> None:
    table.rule("getPower", 2, delay_ms=50)
    began = time.monotonic()
    assert table.call("getPower") == 2
    assert time.monotonic() - began >= 0.05  # a lower bound: the sleep happened


def hung_call(table: Table, fn: str, **kwargs: Any) -> tuple[threading.Thread, list[int]]:
    answers: list[int] = []
    caller = threading.Thread(target=lambda: answers.append(table.call(fn, **kwargs)))
    caller.start()
    eventually(lambda: table.state.hung_now == 1, what="the call hanging")
    return caller, answers


def test_a_release_ends_a_hang_and_the_rule_answers(table: Table) -> None:
    table.rule("getPower", 11, hang=True)
    caller, answers = hung_call(table, "getPower")
    assert table.hangs_entered == 1 and not answers
    table.release_hangs()
    caller.join(20)
    assert answers == [11] and table.state.hung_now == 0


def test_clearing_a_hung_rule_ends_the_hang_without_its_error(table: Table) -> None:
    slot = table.rule("getPower", 11, hang=True)
    caller, answers = hung_call(table, "getPower")
    table.clear_rule(slot)
    caller.join(20)
    assert answers == [0]


def test_a_call_that_may_not_hang_gets_the_error_at_once(table: Table) -> None:
    table.rule("field:230", 15, hang=True)
    assert table.call("field:230", may_hang=False) == 15
    assert table.hangs_entered == 0
