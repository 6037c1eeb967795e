"""Build the fake ``libhlml.so`` and drive its shared state from a test.

Typical use::

    lib = build(tmp_dir)                          # gcc -> <tmp_dir>/libhlml.so
    fake = FakeHlml.create(tmp_dir / "hlml-state", devices=8)
    env = fake.env                                 # FAKE_HLML_STATE for the daemon's worker
    fake.device(3).lost = 1                        # applies at once, inside a running daemon
    slot = fake.rule("hlml_device_get_power_usage", device=2, hang=True)
    fake.clear_rule(slot)

The daemon is pointed at the library with ``sources.hlml.library_path``. The
ctypes classes mirror ``hlml_fake_state.h``; ``layout_problems`` compares them
with the compiled library.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

from tests.fakes import state_file
from tests.fakes.fault_rules import Faults
from tests.fakes.state_file import StateFile
from tests.helpers.native import compile_shared

HERE = Path(__file__).resolve().parent
LIBRARY_NAME = "libhlml.so"
MAGIC = 0x48464B31
MAX_DEV, SENSORS, NIC_STATS = 16, 6, 4
NIC_STAT_NAMES = ("rx_bytes", "tx_bytes", "rx_crc_errors", "link_down_events")
PORTS = 24

NOT_SUPPORTED = 3
DRIVER_NOT_LOADED = 9
AIP_IS_LOST = 15
GIB = 1 << 30
# hlml_temperature_sensors_t values the fake serves, with the backend's labels
SERVED_SENSORS = {0: "gpu", 1: "board", 3: "hbm"}


_U32 = ctypes.c_uint32
_U64 = ctypes.c_uint64


class Device(ctypes.Structure):
    _fields_ = [
        ("lost", ctypes.c_int32),
        ("sensor_mask", ctypes.c_int32),
        *((name, _U32) for name in ["util_aip", "util_memory", "power_mw", "power_limit_mw"]),
        ("temp", _U32 * SENSORS),
        *(
            (name, _U32)
            for name in ["clock_mhz", "clock_max_mhz", "pcie_gen", "pcie_width", "pcie_replay"]
        ),
        ("replaced_rows", _U32 * 2),
        ("rows_pending", _U32),
        ("pci_bus", _U32),
        *((name, _U64) for name in ["mem_total", "mem_used", "mem_free", "energy_mj"]),
        ("ecc", (ctypes.c_int64 * 2) * 2),
        ("throttle", _U64),
        ("violation_ns", _U64 * 2),
        ("port_mask", _U64 * 2),
        ("port_up", _U64 * 2),
        ("nic_stat", _U64 * NIC_STATS),
        ("name", ctypes.c_char * 32),
        ("serial", ctypes.c_char * 32),
        ("uuid", ctypes.c_char * 64),
        ("bus_id", ctypes.c_char * 32),
    ]


class State(ctypes.Structure):
    _anonymous_ = ("faults",)
    _fields_ = [
        ("magic", ctypes.c_uint32),
        ("devices", ctypes.c_int32),
        ("init_rc", ctypes.c_int32),
        ("chatty", ctypes.c_int32),
        ("faults", Faults),
        ("driver_version", ctypes.c_char * 64),
        ("dev", Device * MAX_DEV),
    ]


def build(out_dir: Path) -> Path:
    """Compile the fake library into ``out_dir``; its path."""
    return compile_shared(HERE / "fake_hlml.c", LIBRARY_NAME, out_dir)


def layout_problems(lib: Path) -> list[str]:
    """Where the ctypes mirror and the compiled state layout disagree (empty: they agree)."""
    return state_file.layout_problems(
        lib,
        "hf_layout",
        [
            ctypes.sizeof(State),
            ctypes.sizeof(Device),
            State.dev.offset,
            Device.mem_total.offset,
            Device.ecc.offset,
            Device.nic_stat.offset,
            Device.name.offset,
            84,  # hlml_pci_info_t in 1.24
        ],
    )


def uuid(i: int) -> str:
    """Device ``i``'s uuid string."""
    return f"01P0-HL2080A0-15-TNL0{i:02d}-13-07-00"


def bdf(i: int) -> str:
    """Device ``i``'s PCI address."""
    return f"0000:{0x19 + 0x10 * i:02x}:00.0"


def populate(dev: Device, i: int) -> None:
    """Deterministic values of a Gaudi 2 (HL-225) in an eight-device HLS box."""
    dev.name = b"HL-225"
    dev.serial = f"AM{i:08d}".encode()
    dev.uuid = uuid(i).encode()
    dev.bus_id = bdf(i).encode()
    dev.pci_bus = 0x19 + 0x10 * i
    dev.util_aip, dev.util_memory = 40 + 5 * i, 20 + i
    dev.power_mw, dev.power_limit_mw = 250_123 + 1000 * i, 600_000
    dev.sensor_mask = sum(1 << s for s in SERVED_SENSORS)
    dev.temp[0], dev.temp[1], dev.temp[3] = 48 + i, 35 + i, 52 + i
    dev.clock_mhz, dev.clock_max_mhz = 1800, 2100
    dev.pcie_gen, dev.pcie_width, dev.pcie_replay = 4, 16, 2 + i
    dev.replaced_rows[0], dev.replaced_rows[1] = 1, 0
    dev.rows_pending = 1 if i == 3 else 0
    dev.mem_total = 96 * GIB
    dev.mem_used = (10 + i) * GIB
    dev.mem_free = dev.mem_total - dev.mem_used
    dev.energy_mj = 123_456_789 + 1000 * i
    dev.ecc[0][0], dev.ecc[0][1] = 5 + i, 50 + i
    dev.ecc[1][0], dev.ecc[1][1] = 0, 1
    dev.throttle = 2 if i == 2 else 0  # thermal on device 2
    dev.violation_ns[0], dev.violation_ns[1] = 1_500_000_000, 250_000_000 * i
    dev.port_mask[0] = (1 << PORTS) - 1
    dev.port_up[0] = ((1 << PORTS) - 1) & ~(1 << 5 if i == 4 else 0)
    dev.nic_stat[:] = [1_000_000, 2_000_000, 3, 1]


class FakeHlml(StateFile):
    """The shared state file of one fake Gaudi node."""

    STATE = State
    MAGIC = MAGIC
    ENV = "FAKE_HLML_STATE"

    @classmethod
    def create(cls, path: Path, devices: int = 8) -> FakeHlml:
        """A state file with ``devices`` Gaudi devices, each with its :func:`populate` values."""
        fake = cls.new(path, devices)
        fake.state.driver_version = b"1.24.2-a7d6ed4"
        for i in range(devices):
            populate(fake.state.dev[i], i)
        return fake
