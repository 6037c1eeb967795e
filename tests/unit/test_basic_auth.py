"""Basic auth: one bcrypt run at a time, verdicts remembered both ways, reasons without names."""

from __future__ import annotations

import base64
import threading
import time

import bcrypt

from exporter.config.web import BasicAuthConfig
from exporter.outputs.auth import BasicAuth, Verdict


def header(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


HASHED = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=12)).decode()


def test_verdicts():
    auth = BasicAuth(BasicAuthConfig(users={"prom": HASHED}))
    assert auth.verify(None) is Verdict.MISSING
    assert auth.verify("Bearer x") is Verdict.MALFORMED
    assert auth.verify("Basic !!!") is Verdict.MALFORMED
    assert auth.verify("Basic " + base64.b64encode(b"nocolon").decode()) is Verdict.MALFORMED
    assert auth.verify(header("prom", "wrong")) is Verdict.REJECTED
    assert auth.verify(header("nobody", "s3cret")) is Verdict.REJECTED
    assert auth.verify(header("prom", "s3cret")) is Verdict.OK
    assert auth.check(header("prom", "s3cret")) is True


def test_one_bcrypt_at_a_time_and_remembered_verdicts_skip_the_queue():
    auth = BasicAuth(BasicAuthConfig(users={"prom": HASHED}), wait=0.0, max_waiting=1)
    # Remember one good and one bad credential first.
    assert auth.verify(header("prom", "s3cret")) is Verdict.OK
    assert auth.verify(header("prom", "bad")) is Verdict.REJECTED
    started = threading.Event()
    verdicts: list[Verdict] = []

    def slow_check() -> None:
        started.set()
        verdicts.append(auth.verify(header("prom", "other-wrong")))

    # While one bcrypt run (cost 12, a quarter second) holds the turn...
    with auth._turn:  # the turn is held as a check would hold it
        t = threading.Thread(target=slow_check)
        t.start()
        started.wait(5)
        t.join(5)
        # ... a new credential cannot start its own run: busy, not queued.
        assert verdicts == [Verdict.BUSY]
        assert auth.verify(header("prom", "third-wrong")) is Verdict.BUSY
        # Remembered verdicts need no turn.
        assert auth.verify(header("prom", "s3cret")) is Verdict.OK
        assert auth.verify(header("prom", "bad")) is Verdict.REJECTED
    assert auth.verify(header("prom", "third-wrong")) is Verdict.REJECTED


def test_non_ascii_header_is_malformed_not_an_error():
    # Found by the HTTP fuzz target: header bytes arrive as latin-1 text, and
    # base64 refuses non-ASCII text with a plain ValueError.
    auth = BasicAuth(BasicAuthConfig(users={"prom": HASHED}))
    assert auth.verify("Basic \x80") is Verdict.MALFORMED
    assert auth.verify("Basic " + base64.b64encode(b"\xff:\xfe").decode()) is Verdict.MALFORMED


def test_waiting_checks_are_bounded_in_number():
    auth = BasicAuth(BasicAuthConfig(users={"prom": HASHED}), wait=30.0, max_waiting=2)
    verdicts: list[Verdict] = []
    with auth._turn:  # one check holds the turn
        waiters = [
            threading.Thread(
                target=lambda i=i: verdicts.append(auth.verify(header("prom", f"w{i}")))
            )
            for i in range(2)
        ]
        for t in waiters:
            t.start()
        deadline = time.monotonic() + 10
        while auth._waiting < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        # Two wait for their turn; a third is answered busy at once.
        assert auth.verify(header("prom", "third")) is Verdict.BUSY
    for t in waiters:
        t.join(30)
    assert verdicts == [Verdict.REJECTED, Verdict.REJECTED]
