"""A bounded fuzz run of every parser of outside input (bench/fuzz.py runs 100,000+ each).

Each target may only reject its input with its own error type; anything else
(a KeyError, a TypeError, a RecursionError, a 500 from the listener) fails
the test, and Hypothesis prints the shrunk input and the seed to replay it.
"""

from __future__ import annotations

import pytest

from tests.helpers.fuzz import run, targets

# Fixed, so a failure in CI is replayed exactly; bench/fuzz.py takes others.
SEED = 20
INPUTS = {"http_request": 150, "config": 300}


@pytest.mark.parametrize(
    "name",
    [
        "ras_text",
        "ras_json",
        "inspector_line",
        "diag_file",
        "worker_reply",
        "config",
        "http_request",
    ],
)
def test_fuzz_target_raises_only_its_own_errors(name, tmp_path):
    with targets(tmp_path)[name]() as target:
        result = run(target, INPUTS.get(name, 600), SEED)
    assert result.inputs >= INPUTS.get(name, 600) * 0.9, result
    # The seeds reach the parser's accepting paths, not only its first check.
    assert result.outcomes.get("accepted", 0) > 0, result
