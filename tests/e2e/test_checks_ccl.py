"""The ccl-job check against the real daemon polling fake RAS servers."""

from __future__ import annotations

import pytest
import structlog

from exporter.cli import main
from tests.helpers.daemon import samples
from tests.helpers.fake_ras import ThreadedFakeRas, free_port
from tests.helpers.ras_reports import make_job


@pytest.fixture(autouse=True)
def _restore_logging():
    yield
    structlog.reset_defaults()


def states(d) -> dict[str, str]:
    return {
        dict(labels)["address"]: dict(labels)["state"]
        for (name, labels), v in samples(d.metrics()).items()
        if name == "accel_ccl_job_state" and v == 1
    }


def test_ccl_job_check(daemon_factory, capsys):
    healthy = make_job(2, 4, version="2.28.9")
    broken = make_job(2, 4, version="2.28.9")
    broken.set_fate("10.0.0.2", 10006, "missing")
    idle = f"127.0.0.1:{free_port()}"
    with ThreadedFakeRas("2.29", healthy) as good, ThreadedFakeRas("2.28.9", broken) as bad:
        addresses = [good.address, bad.address, idle]
        d = daemon_factory(
            {
                "sources": {
                    "ccl_ras": {
                        "addresses": addresses,
                        "interval": "300ms",
                        # Generous: a report that is late on a loaded machine must not
                        # read "unreachable" in the middle of the checks.
                        "timeout": "20s",
                        "follower_interval": "600ms",
                        "local_addresses": ["10.0.0.1"],
                        # The fake jobs' operation counts never move: with the default
                        # (3 polls) both would read "stalled" after about a second,
                        # racing the checks below. Stall detection has its own tests.
                        "stall_polls": 1_000_000,
                    },
                    "ccl_inspector": {"enabled": False},
                }
            }
        )
        expected = {good.address: "healthy", bad.address: "degraded", idle: "no_job"}
        # Waits for the states themselves (a first poll may still be under way).
        d.wait_for(lambda: states(d) == expected, what="every address judged", timeout=60)

        def check(*args: str) -> tuple[int, str]:
            status = main(["check", "ccl-job", *args, "--url", d.url])
            return status, capsys.readouterr().out.strip()

        status, out = check("--address", good.address)
        assert status == 0 and f"{good.address} healthy" in out, out
        status, out = check("--address", idle)
        assert status == 0 and "no_job" in out, out
        status, out = check("--address", bad.address)
        assert status == 2 and "missing processes" in out, out
        status, out = check()  # all addresses: the worst wins
        assert status == 2 and out.count("; ") == 2, out
        status, out = check("--address", "10.9.9.9:28028")
        assert status == 3 and "no NCCL/RCCL job state" in out, out
