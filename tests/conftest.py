"""Shared fixtures: a daemon factory that always stops what it started."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog

from tests.helpers.daemon import Daemon
from tests.helpers.native import BUILDS_ENV, built_once, compile_shared

FAKES = Path(__file__).resolve().parent / "fakes"

# Strict label values for the whole suite, in-process and in every daemon it starts
# (they inherit the environment): a reading whose label value is outside its catalog
# enumeration raises instead of being dropped (exporter/store.py).
os.environ["ACCEL_STRICT_LABEL_VALUES"] = "1"

_BUILDS = pytest.StashKey[str]()

pytest_plugins = [
    "tests.fakes.amdsmi.fixtures",
    "tests.fakes.levelzero.fixtures",
    "tests.fakes.hlml.fixtures",
    "tests.fakes.nvml.fixtures",
]


def pytest_configure(config: pytest.Config) -> None:
    """One directory of fake library builds for the whole run (tests.helpers.native):
    made here, in the process that starts the xdist workers, so that they inherit it."""
    if hasattr(config, "workerinput") or os.environ.get(BUILDS_ENV):
        return
    made = tempfile.mkdtemp(prefix="accel-fake-builds-")
    os.environ[BUILDS_ENV] = made
    config.stash[_BUILDS] = made


def pytest_unconfigure(config: pytest.Config) -> None:
    """The run's builds go with it."""
    made = config.stash.get(_BUILDS, None)
    if made is not None:
        shutil.rmtree(made, ignore_errors=True)
        os.environ.pop(BUILDS_ENV, None)


# Unmarked tests that each take 20-50 s on the 2-core CI machine (--durations, issue 39):
# started first with the ones marked slow. A name here that no longer exists costs nothing.
LONG_FIRST = frozenset(
    {
        "test_nvlink_error_rates_degrade_or_predict_never_fail_and_crc_is_downgraded",
        "test_a_hung_cpx_gpu_is_isolated_whole_in_one_deadline",
        "test_a_hung_gpu_with_mig_instances_is_isolated_whole",
        "test_a_device_that_hangs_while_identified_is_named_by_what_was_learnt",
    }
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The tests marked ``slow`` (a minute-long outage, soaks) and LONG_FIRST each at the
    head of one worker's share, the rest in collection order.

    scripts/test runs ``--dist worksteal``: each worker first gets one contiguous share of
    the collection (sizes as xdist's WorkStealingScheduling deals them), and an idle worker
    later steals the tail of a busy one's queue, never the test it runs. A long test at
    the head of a share starts at once and overlaps the rest; several long tests in one
    share would run one after another. Elsewhere (no xdist, another --dist) the long ones
    merely come first. The order depends on the collection and the worker count only, so
    every worker computes the same one (xdist checks that).
    """

    def long(item: pytest.Item) -> bool:
        name = getattr(item, "originalname", item.name)
        return item.get_closest_marker("slow") is not None or name in LONG_FIRST

    first = [item for item in items if long(item)]
    rest = [item for item in items if not long(item)]
    workers = int(getattr(config, "workerinput", {}).get("workercount", 1))
    shares: list[list[pytest.Item]] = [first[i::workers] for i in range(workers)]
    left, total = len(items), len(items)
    taken = 0
    for i, share in enumerate(shares):
        size = left // (workers - i)  # as xdist deals the pending tests out
        fill = max(0, size - len(share))
        share.extend(rest[taken : taken + fill])
        taken += fill
        left -= size
    shares[-1].extend(rest[taken:])
    ordered = [item for share in shares for item in share]
    assert len(ordered) == total
    items[:] = ordered


@pytest.fixture(autouse=True)
def _logging_left_as_found() -> Iterator[None]:
    """structlog's global configuration as each test found it.

    A test that runs a command in-process (``exporter.cli.main``) configures logging for
    the whole worker process, e.g. at level warning: later tests in the same worker would
    lose their info lines (capture_logs replaces the processors, not the level filter).
    """
    saved = structlog.get_config()
    yield
    structlog.configure(**saved)


@pytest.fixture
def daemon_factory(tmp_path: Path) -> Iterator[Any]:
    """``daemon_factory(config=..., env=..., extra_sources=...)`` -> a started Daemon."""
    started: list[Daemon] = []

    def make(config: dict[str, Any] | None = None, **kwargs: Any) -> Daemon:
        d = Daemon(tmp_path, config, **kwargs)
        started.append(d)
        return d.start()

    yield make
    for d in started:
        d.__exit__()


@pytest.fixture(scope="session")
def fake_nvml_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fake libnvidia-ml.so.1, compiled once per test run (tests/fakes/nvml)."""
    from tests.fakes.nvml.control import build

    return built_once("nvml", build, tmp_path_factory.mktemp("fake-nvml"))


@pytest.fixture
def fake_nvml(fake_nvml_lib: Path, tmp_path: Path) -> Iterator[Any]:
    """``fake_nvml(devices=N)`` -> a FakeNvml with its own state file; faults are
    cleared and hung calls released at teardown so nothing stays blocked."""
    from tests.fakes.nvml.control import FakeNvml

    made: list[FakeNvml] = []

    def make(devices: int = 1) -> FakeNvml:
        fake = FakeNvml.create(fake_nvml_lib, tmp_path / f"nvml-state-{len(made)}", devices)
        made.append(fake)
        return fake

    yield make
    for fake in made:
        fake.clear_rules()
        fake.release()


@pytest.fixture(scope="session")
def fake_libcuda_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding the fake ``libcuda.so.1`` (point LD_LIBRARY_PATH at it)."""

    def build(out: Path) -> Path:
        return compile_shared(FAKES / "cuda" / "fake_cuda.c", "libcuda.so.1", out)

    return built_once("cuda", build, tmp_path_factory.mktemp("fake-cuda")).parent
