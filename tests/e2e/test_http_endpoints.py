"""The listener's endpoints, limits and isolation from polling."""

from __future__ import annotations

import threading
import time
import urllib.request

import pytest


def test_endpoints(daemon_factory):
    d = daemon_factory({"sources": {"host": {"interval": "1s"}}})
    d.wait_for(lambda: d.get("/readyz").status == 200, what="ready")
    status = d.status()
    assert status["ready"] is True and status["pending"] == []
    host = status["sources"]["host"]
    assert host["state"] == "ok" and host["last_success"] and host["next_poll"]
    assert host["last_duration"] is not None and host["worker_restarts"] == 0
    assert d.get("/healthz").text == "ok\n"
    assert b"/metrics" in d.get("/").body
    assert d.get("/nope").status == 404
    req = urllib.request.Request(d.url + "/metrics", method="HEAD")
    with urllib.request.urlopen(req, timeout=5) as resp:
        assert resp.status == 200 and resp.read() == b""
    req = urllib.request.Request(d.url + "/metrics", data=b"x", method="POST")
    try:
        urllib.request.urlopen(req, timeout=5)
    except urllib.error.HTTPError as err:
        assert err.code == 405
    else:
        raise AssertionError("POST accepted")
    zipped = d.get("/metrics", headers={"Accept-Encoding": "gzip"})
    assert zipped.headers.get("Content-Encoding") == "gzip"


@pytest.mark.serial  # counts polls against wall time: no parallel neighbours
def test_many_concurrent_scrapes_do_not_delay_polling(daemon_factory):
    d = daemon_factory({"sources": {"host": {"interval": "200ms"}}, "web": {"max_requests": 64}})
    d.wait_metric("accel_exporter_source_up", 1, source="host")
    stop = threading.Event()
    served = []

    def scrape() -> None:
        while not stop.is_set():
            served.append(len(d.metrics(timeout=30)))

    threads = [threading.Thread(target=scrape) for _ in range(32)]
    before = d.status()["sources"]["host"]["polls"]
    started = time.monotonic()
    for t in threads:
        t.start()
    time.sleep(4)
    polls = d.status()["sources"]["host"]["polls"] - before
    elapsed = time.monotonic() - started
    stop.set()
    for t in threads:
        t.join()
    assert len(served) > 32
    # The schedule asks for one poll per 200 ms; under 32 scrapers at least half happen.
    assert polls >= 0.5 * elapsed / 0.2, (polls, elapsed)
