"""NVIDIA domains through the real pynvml and the fake: NVLink cliques, compute trays."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from exporter.backends.nvml import NvmlBackend
from tests.fakes.nvml.control import FakeNvml
from tests.helpers.backend_harness import Backends, backends, poll, started, values

NOT_SUPPORTED, UNKNOWN = 3, 999
CLUSTER = "abababab-abab-abab-abab-abababababab"


@pytest.fixture
def fake(nvml_shared: FakeNvml) -> Iterator[FakeNvml]:
    nvml_shared.reset(4)
    yield nvml_shared
    nvml_shared.clear_rules()
    nvml_shared.release()


@pytest.fixture
def backend() -> Iterator[Backends[NvmlBackend]]:
    with backends(NvmlBackend, events=False) as made:
        yield made


def domains(reply: dict[str, Any]) -> dict[tuple[str, str], str]:
    """(device, scope) -> domain of the reply's accel_device_domain_info rows."""
    return {
        (labels[0], labels[2]): labels[3]
        for (metric, labels), value in values(reply).items()
        if metric == "accel_device_domain_info" and value == 1
    }


def test_two_cliques_and_a_gpu_not_registered_yet(fake: FakeNvml, backend: Any) -> None:
    for i, clique in enumerate((7, 7, 9, 9)):
        fake.device(i).fabric_state, fake.device(i).fabric_clique = 3, clique
    fake.device(3).fabric_state = 2  # in_progress: the fabric manager has not named it yet
    b = started(backend)
    got = domains(poll(b))
    assert got == {
        ("0", "peer_domain"): f"nvlink-clique:{CLUSTER}:7",
        ("1", "peer_domain"): f"nvlink-clique:{CLUSTER}:7",
        ("2", "peer_domain"): f"nvlink-clique:{CLUSTER}:9",
    }
    # Registered later: named at the next slow poll, without a new worker.
    fake.device(3).fabric_state = 3
    assert domains(poll(b))[("3", "peer_domain")] == f"nvlink-clique:{CLUSTER}:9"
    # Only the slow poll reads it.
    assert domains(poll(b, slow=False)) == {}


def test_an_all_zero_cluster_or_no_fabric_names_no_clique(fake: FakeNvml, backend: Any) -> None:
    fake.device(0).fabric_state = 3
    fake.device(0).fabric_cluster = 0  # NVML: not part of a cluster
    fake.device(1).fabric_state = 0  # NOT_SUPPORTED: no NVSwitch fabric
    assert domains(poll(started(backend))) == {}


def test_the_compute_tray_is_the_baseboard_read_once(fake: FakeNvml, backend: Any) -> None:
    for i in range(4):
        dev = fake.device(i)
        # A full 16-byte serial: NVML does not NUL-terminate it.
        dev.platform_chassis = b"1821224500123456" if i < 2 else b"18212245009"
        dev.platform_slot, dev.platform_tray, dev.platform_module = 10 + i // 2, i // 2, i
    b = started(backend)
    assert domains(poll(b)) == {
        ("0", "baseboard"): "nvidia-tray:1821224500123456:slot10",
        ("1", "baseboard"): "nvidia-tray:1821224500123456:slot10",
        ("2", "baseboard"): "nvidia-tray:18212245009:slot11",
        ("3", "baseboard"): "nvidia-tray:18212245009:slot11",
    }
    # A board does not move: asked once, then served from what the first answer said.
    rule = fake.add_rule("nvmlDeviceGetPlatformInfo", UNKNOWN)
    assert domains(poll(b))[("2", "baseboard")] == "nvidia-tray:18212245009:slot11"
    assert not [k for k in values(poll(b)) if k[0] == "accel_field_errors_total"]
    fake.clear_rule(rule)


def test_a_failed_board_read_is_asked_again_one_not_supported_is_not(
    fake: FakeNvml, backend: Any
) -> None:
    fake.device(0).platform_chassis = b"CHASSIS0"
    fail = fake.add_rule("nvmlDeviceGetPlatformInfo", UNKNOWN, device=0, times=1)
    refuse = fake.add_rule("nvmlDeviceGetPlatformInfo", NOT_SUPPORTED, device=1, times=1)
    b = started(backend)
    assert domains(poll(b)) == {}
    fake.clear_rule(fail)
    fake.clear_rule(refuse)
    fake.device(1).platform_chassis = b"CHASSIS1"  # NVML said no board: not asked again
    assert domains(poll(b)) == {("0", "baseboard"): "nvidia-tray:CHASSIS0:slot0"}
