"""AMD domains through the real amdsmi package and the fake: XGMI hives."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from exporter.backends.amdsmi import AmdSmiBackend
from tests.fakes.amdsmi import state
from tests.fakes.amdsmi.state import FakeAmdSmi
from tests.helpers.backend_harness import poll, started, values

Make = Callable[..., AmdSmiBackend]
HIVE_A, HIVE_B = 0x5A1E00000000A001, 0x5A1E00000000B002


def domains(reply: dict[str, Any]) -> dict[str, str]:
    """device -> peer domain of the reply's accel_device_domain_info rows."""
    got = {}
    for (metric, labels), value in values(reply).items():
        if metric == "accel_device_domain_info" and value == 1:
            assert labels[2] == "peer_domain"  # amdsmi names no baseboard
            got[labels[0]] = labels[3]
    return got


def test_two_hives_and_a_gpu_in_none(amdsmi_backends: Make, amdsmi_inprocess: FakeAmdSmi) -> None:
    state.hives(amdsmi_inprocess, [HIVE_A] * 4 + [HIVE_B] * 3 + [0])
    amdsmi_inprocess.device(6).xgmi_unsupported = 1  # a PCIe card: no XGMI at all
    b = started(amdsmi_backends)
    reply = poll(b)
    assert domains(reply) == {
        **{str(i): f"xgmi-hive:{HIVE_A:#x}" for i in range(4)},
        "4": f"xgmi-hive:{HIVE_B:#x}",
        "5": f"xgmi-hive:{HIVE_B:#x}",
    }
    assert not [k for k in values(reply) if k[0] == "accel_field_errors_total"]
    assert all(d["up"] for d in reply["devices"])
    # Read with the slow fields only.
    assert domains(poll(b, slow=False)) == {}


def test_every_partition_names_its_gpus_hive(
    amdsmi_backends: Make, amdsmi_inprocess: FakeAmdSmi
) -> None:
    state.cpx(amdsmi_inprocess, gpus=2)
    state.hives(amdsmi_inprocess, [HIVE_A] * 8 + [HIVE_B] * 8)
    b = started(amdsmi_backends)
    got = domains(poll(b))
    assert got == {str(i): f"xgmi-hive:{(HIVE_A if i < 8 else HIVE_B):#x}" for i in range(16)}
