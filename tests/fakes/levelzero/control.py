"""Build the fake ``libze_loader.so.1`` and drive its shared state from a test.

Typical use::

    lib = build(tmp_dir)                         # gcc -> <tmp_dir>/libze_loader.so.1
    fake = FakeZe.create(tmp_dir / "ze-state", devices=4)
    env = fake.env                                # FAKE_ZE_STATE for the daemon's worker
    fake.device(1).lost = 1                       # applies at once, inside a running daemon
    slot = fake.rule("zesEngineGetActivity", device=2, hang=True)
    fake.clear_rule(slot)                         # the hung call returns

The daemon is pointed at the library with ``sources.levelzero.library_path``
(configuration, as on a RHEL node). The ctypes classes mirror ``ze_fake_state.h``;
``layout_problems`` compares them with the compiled library.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

from tests.fakes import state_file
from tests.fakes.fault_rules import Faults
from tests.fakes.state_file import StateFile
from tests.helpers.native import compile_shared

HERE = Path(__file__).resolve().parent
LIBRARY_NAME = "libze_loader.so.1"
MAGIC = 0x5A46414B
MAX_DEV, TILES, ENGINE_TYPES, TEMP_TYPES, FREQ_DOMAINS, RAS_CATS, PORTS = (
    16, 2, 14, 9, 3, 7, 4,
)  # fmt: skip

DEVICE_LOST = 0x70000001
INSUFFICIENT_PERMISSIONS = 0x70010000
UNSUPPORTED_FEATURE = 0x78000003
UNKNOWN = 0x7FFFFFFE

# zes_engine_group_t / zes_temp_sensors_t / zes_freq_domain_t values the fake serves
ENGINES = {"compute": 1, "media": 2, "copy": 3, "render": 12}
SENSORS = {"global": 0, "gpu": 1, "memory": 2, "gpu_board": 6}
CLOCKS = {"gpu": 0, "memory": 1, "media": 2}
TICKS = 1 << 20  # engine timestamp step per call: ratios in 1/2^k are exact
GIB = 1 << 30


_I32 = ctypes.c_int32
_U64 = ctypes.c_uint64


class Device(ctypes.Structure):
    _fields_ = [
        *(
            (name, _I32)
            for name in [
                "type",
                "lost",
                "tiles",
                "vendor_id",
                "device_id",
                "pci_domain",
                "pci_bus",
                "pci_dev",
                "pci_fn",
                "pci_max_gen",
                "pci_max_width",
                "pci_gen",
                "pci_width",
                "have_bandwidth",
                "have_replay",
                "ecc_state",
            ]
        ),
        ("reset_flags", ctypes.c_uint32),
        *(
            (name, _I32)
            for name in [
                "mem_health",
                "power_domains",
                "engine_mask",
                "temp_mask",
                "freq_mask",
                "ras_sets",
                "fabric_ports",
                "pad0",
            ]
        ),
        ("uuid", ctypes.c_uint8 * 16),
        ("name", ctypes.c_char * 256),
        ("model", ctypes.c_char * 64),
        ("serial", ctypes.c_char * 64),
        ("driver", ctypes.c_char * 64),
        ("pci_max_bandwidth", ctypes.c_int64),
        *(
            (name, _U64)
            for name in [
                "pci_rx",
                "pci_tx",
                "pci_replay",
                "pci_ts",
                "pci_rx_step",
                "pci_tx_step",
                "pci_ts_step",
            ]
        ),
        ("mem_size", _U64 * TILES),
        ("mem_free", _U64 * TILES),
        *((name, _U64) for name in ["mem_read", "mem_write", "mem_bw_max", "mem_ts"]),
        ("mem_read_step", _U64),
        ("mem_write_step", _U64),
        *(
            (name, _U64)
            for name in ["energy_uj", "energy_ts_us", "energy_step_uj", "energy_ts_step_us"]
        ),
        ("engine_active", (_U64 * ENGINE_TYPES) * TILES),
        ("engine_ts", (_U64 * ENGINE_TYPES) * TILES),
        ("engine_step", (_U64 * ENGINE_TYPES) * TILES),
        ("engine_ts_step", _U64),
        ("temp", ctypes.c_double * TEMP_TYPES),
        ("freq_actual", ctypes.c_double * FREQ_DOMAINS),
        ("freq_max", ctypes.c_double * FREQ_DOMAINS),
        ("throttle", ctypes.c_uint32 * FREQ_DOMAINS),
        ("pad1", ctypes.c_uint32),
        ("ras", (_U64 * RAS_CATS) * 2),
        ("port_status", _I32 * PORTS),
        ("port_rx", _U64 * PORTS),
        ("port_tx", _U64 * PORTS),
        ("port_step", _U64),
        ("ras_memory", _U64 * 2),
        ("temp_per_tile", _I32),
        ("pad2", _I32),
        ("temp_tile1", ctypes.c_double * TEMP_TYPES),
    ]


class State(ctypes.Structure):
    _anonymous_ = ("faults",)
    _fields_ = [
        ("magic", ctypes.c_uint32),
        ("devices", ctypes.c_int32),
        ("init_rc", ctypes.c_int32),
        ("chatty", ctypes.c_int32),
        ("faults", Faults),
        ("dev", Device * MAX_DEV),
    ]


def build(out_dir: Path) -> Path:
    """Compile the fake loader into ``out_dir``; its path."""
    return compile_shared(HERE / "fake_ze.c", LIBRARY_NAME, out_dir)


def layout_problems(lib: Path) -> list[str]:
    """Where the ctypes mirror and the compiled state layout disagree (empty: they agree)."""
    return state_file.layout_problems(
        lib,
        "zf_layout",
        [
            ctypes.sizeof(State),
            ctypes.sizeof(Device),
            State.dev.offset,
            Device.uuid.offset,
            Device.engine_step.offset,
            Device.temp.offset,
            Device.ras.offset,
            Device.port_step.offset,
        ],
    )


def uuid_bytes(i: int) -> bytes:
    """The 16 uuid bytes of device ``i``."""
    return bytes([0x86, 0x80, 0x0B, 0xD5, i, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xA0, i])


def uuid(i: int) -> str:
    """Device ``i``'s uuid as the backend writes it (the 16 bytes, 8-4-4-4-12)."""
    h = uuid_bytes(i).hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def bdf(i: int) -> str:
    """Device ``i``'s PCI address."""
    return f"0000:{0x1A + 0x10 * i:02x}:00.0"


def populate(dev: Device, i: int) -> None:
    """Deterministic values of a Max 1550 (two tiles when ``i`` is even)."""
    dev.type = 1
    dev.tiles = 2 if i % 2 == 0 else 0
    dev.vendor_id, dev.device_id = 0x8086, 0x0BD5
    dev.uuid[:] = list(uuid_bytes(i))
    dev.name = b"Intel(R) Data Center GPU Max 1550"
    dev.model = b"Intel(R) Data Center GPU Max 1550"
    dev.serial = f"LQWF{i:04d}".encode()
    dev.driver = b"1.3.29735"
    dev.pci_domain, dev.pci_bus, dev.pci_dev, dev.pci_fn = 0, 0x1A + 0x10 * i, 0, 0
    dev.pci_max_gen, dev.pci_max_width, dev.pci_max_bandwidth = 5, 16, 64_000_000_000
    dev.pci_gen, dev.pci_width = 4, 16
    dev.have_bandwidth = dev.have_replay = 1
    dev.pci_replay = 3 + i
    dev.pci_rx_step, dev.pci_tx_step, dev.pci_ts_step = 2_000_000, 1_000_000, 1_000_000
    dev.ecc_state = 1
    dev.mem_health = 1
    tiles = 2 if dev.tiles else 1
    for t in range(tiles):
        dev.mem_size[t] = 64 * GIB
        dev.mem_free[t] = (60 - i) * GIB - t * GIB
    dev.mem_read_step, dev.mem_write_step, dev.mem_bw_max = 1 << 20, 1 << 19, 3_276_800_000_000
    dev.power_domains = 1
    dev.energy_uj = 22_000_000_000 + i * 1_000_000_000
    dev.energy_step_uj = 300_000_000 + i * 10_000_000  # per 1 s of counter time: 300 + 10 i W
    dev.energy_ts_step_us = 1_000_000
    dev.engine_mask = sum(1 << v for v in ENGINES.values())
    dev.engine_ts_step = TICKS
    for t in range(tiles):
        for name, kind in ENGINES.items():
            base = {"compute": TICKS // 2, "render": TICKS // 4, "media": TICKS // 8, "copy": 0}
            dev.engine_step[t][kind] = base[name] + t * (TICKS // 4) + i * (TICKS // 64)
    dev.temp_mask = sum(1 << v for v in SENSORS.values())
    for name, kind in SENSORS.items():
        dev.temp[kind] = {"global": 46.5, "gpu": 45.5, "memory": 50.0, "gpu_board": 35.0}[name] + i
    dev.freq_mask = sum(1 << v for v in CLOCKS.values())
    for name, kind in CLOCKS.items():
        dev.freq_actual[kind] = {"gpu": 1600.0, "memory": 3200.0, "media": 800.0}[name]
        dev.freq_max[kind] = {"gpu": 1600.0, "memory": 3200.0, "media": 1200.0}[name]
    dev.ras_sets = 2
    dev.ras[0][3] = 1 + i  # correctable compute errors
    dev.ras[0][5] = 2  # correctable cache errors
    dev.ras[1][1] = i  # uncorrectable programming errors
    dev.ras_memory[0], dev.ras_memory[1] = 7 + i, 0  # memory (ECC) errors
    dev.fabric_ports = 2
    dev.port_status[0] = 1  # healthy
    dev.port_status[1] = 3 if i == 1 else 1  # failed on device 1
    dev.port_step = 4096


class FakeZe(StateFile):
    """The shared state file of one fake Level Zero node."""

    STATE = State
    MAGIC = MAGIC
    ENV = "FAKE_ZE_STATE"

    @classmethod
    def create(cls, path: Path, devices: int = 4) -> FakeZe:
        """A state file with ``devices`` GPUs, each with its :func:`populate` values."""
        fake = cls.new(path, devices)
        for i in range(devices):
            populate(fake.state.dev[i], i)
        return fake
