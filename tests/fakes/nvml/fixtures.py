"""Pytest fixture of the fake NVML loaded in the test process (registered in tests/conftest.py).

pynvml loads one libnvidia-ml.so.1 per process for good, and the fake maps its
state file at the first ``nvmlInit()`` of the process: every in-process NVML test
of a run must drive that one state, so the fixture lives here, once, not in a
test module (a second module's own fake would never be read).
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

import pynvml
import pytest

from tests.fakes.nvml.control import FakeNvml


@pytest.fixture(scope="session")
def nvml_shared(fake_nvml_lib: Path, tmp_path_factory: pytest.TempPathFactory) -> FakeNvml:
    """The fake this process's pynvml reads (two GPUs to start); a test resets it."""
    path = tmp_path_factory.mktemp("nvml-inproc") / "state"
    fake = FakeNvml.create(fake_nvml_lib, path, 2)
    ctypes.CDLL(str(fake_nvml_lib), mode=ctypes.RTLD_GLOBAL)
    saved = os.environ.get("FAKE_NVML_STATE")
    os.environ["FAKE_NVML_STATE"] = str(path)
    try:
        pynvml.nvmlInit()  # the fake maps its state file at the first init of the process
        pynvml.nvmlShutdown()
    finally:
        if saved is None:
            del os.environ["FAKE_NVML_STATE"]
        else:
            os.environ["FAKE_NVML_STATE"] = saved
    return fake
