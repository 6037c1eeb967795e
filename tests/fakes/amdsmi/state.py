"""Drive the fake libamd_smi.so: its shared state file, mirrored from fake_state.h.

A test creates a state file with :func:`create`, points ``FAKE_AMDSMI_STATE``
at it, and changes devices and faults through :class:`FakeAmdSmi` while the
code under test (in this process or a daemon subprocess) is running.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.fakes.fault_rules import FaultRules, Faults

MAGIC = 0x46414D44
VERSION = 4
MAX_DEVICES = 64
MAX_EVENTS = 64
MAX_PROCS = 8
NUM_TEMPS = 7
NUM_CLOCKS = 10
NUM_MEM = 3
NUM_BLOCKS = 19
MAX_CPER_KINDS = 8
# What the fake's amdsmi_get_lib_version says by default: the first release that decodes
# the AFIDs of corrected CPER records (AMD SMI 26.5.0's changelog).
LIB_VERSION = (26, 5, 0)
NUM_XCP = 8
NUM_XCC = 8
NUM_XCP_ACC = 4

# CPER severities (amdsmi_cper_sev_t) and the flaws a canned record can carry.
SEV_NON_FATAL_UNCORRECTED = 0
SEV_FATAL = 1
SEV_NON_FATAL_CORRECTED = 2
CPER_OK = 0
CPER_BAD_LENGTH = 1
CPER_UNKNOWN_SECTION = 2
CPER_SHORT_SECTION = 3

# amdsmi status codes (amdsmi_wrapper.amdsmi_status_t) used by tests.
SUCCESS = 0
INVAL = 1
NOT_SUPPORTED = 2
IO = 12
FILE_ERROR = 14
INIT_ERROR = 18
BUSY = 30
NOT_FOUND = 31
DRIVER_NOT_LOADED = 34
NO_PERM = 10

# Event types (amdsmi_evt_notification_type_t).
EVT_VMFAULT = 1
EVT_THERMAL_THROTTLE = 2
EVT_GPU_PRE_RESET = 3
EVT_GPU_POST_RESET = 4
EVT_PROCESS_START = 12

U16_NA = 0xFFFF
U64_NA = 0xFFFFFFFFFFFFFFFF
U32_NA = 0xFFFFFFFF


class CperKind(ctypes.Structure):
    _pack_ = 1
    _fields_ = [
        ("severity", ctypes.c_uint32),
        ("flaw", ctypes.c_uint32),
        ("afid_count", ctypes.c_uint32),
        ("afids", ctypes.c_uint64 * 4),
    ]


class Device(ctypes.Structure):
    _pack_ = 1
    _fields_ = [
        ("market_name", ctypes.c_char * 64),
        ("asic_serial", ctypes.c_char * 32),
        ("board_serial", ctypes.c_char * 32),
        ("vbios_version", ctypes.c_char * 64),
        ("vbios_part", ctypes.c_char * 64),
        ("uuid", ctypes.c_char * 40),
        ("driver_version", ctypes.c_char * 32),
        ("compute_partition", ctypes.c_char * 16),
        ("memory_partition", ctypes.c_char * 16),
        ("bdf", ctypes.c_uint64),
        ("lost_status", ctypes.c_uint32),
        ("partition_id", ctypes.c_uint32),
        ("gfx_activity", ctypes.c_uint32),
        ("umc_activity", ctypes.c_uint32),
        ("mm_activity", ctypes.c_uint32),
        ("temp_unsupported", ctypes.c_uint32),
        ("clk_unsupported", ctypes.c_uint32),
        ("fan_supported", ctypes.c_uint32),
        ("mem_total", ctypes.c_uint64 * NUM_MEM),
        ("mem_used", ctypes.c_uint64 * NUM_MEM),
        ("temp", ctypes.c_int64 * NUM_TEMPS),
        ("socket_power", ctypes.c_uint64),
        ("current_socket_power", ctypes.c_uint32),
        ("average_socket_power", ctypes.c_uint32),
        ("power_limit", ctypes.c_uint32),
        ("power_cap_uw", ctypes.c_uint64),
        ("energy_acc", ctypes.c_uint64),
        ("energy_step", ctypes.c_uint64),
        ("energy_resolution", ctypes.c_float),
        ("clk", ctypes.c_uint32 * NUM_CLOCKS),
        ("clk_min", ctypes.c_uint32 * NUM_CLOCKS),
        ("clk_max", ctypes.c_uint32 * NUM_CLOCKS),
        ("fan_speed", ctypes.c_int64),
        ("fan_max", ctypes.c_int64),
        ("pcie_width", ctypes.c_uint32),
        ("pcie_speed", ctypes.c_uint32),
        ("pcie_bandwidth", ctypes.c_uint32),
        ("pcie_max_width", ctypes.c_uint32),
        ("pcie_max_speed", ctypes.c_uint32),
        ("pcie_replay", ctypes.c_uint64),
        ("pcie_recovery", ctypes.c_uint64),
        ("pcie_nak_sent", ctypes.c_uint64),
        ("pcie_nak_received", ctypes.c_uint64),
        ("ecc_total", ctypes.c_uint64 * 3),
        ("ecc_enabled", ctypes.c_uint64),
        ("ecc_block", (ctypes.c_uint64 * 3) * NUM_BLOCKS),
        ("vcn_activity", ctypes.c_uint16 * 4),
        ("jpeg_activity", ctypes.c_uint16 * 32),
        ("xgmi_read_kb", ctypes.c_uint64 * 8),
        ("xgmi_write_kb", ctypes.c_uint64 * 8),
        ("xgmi_link_status", ctypes.c_uint16 * 8),
        ("accumulation_counter", ctypes.c_uint64),
        ("residency", ctypes.c_uint64 * 5),
        ("num_partition", ctypes.c_uint16),
        ("violation_active", ctypes.c_uint8 * 6),
        ("proc_count", ctypes.c_uint32),
        ("proc_pid", ctypes.c_uint32 * MAX_PROCS),
        ("proc_cu", ctypes.c_uint32 * MAX_PROCS),
        ("proc_vram", ctypes.c_uint64 * MAX_PROCS),
        ("proc_gtt", ctypes.c_uint64 * MAX_PROCS),
        ("proc_name", (ctypes.c_char * 32) * MAX_PROCS),
        ("pcie_interface_version", ctypes.c_uint32),
        ("cper_unsupported", ctypes.c_uint32),
        ("cper_count", ctypes.c_uint32),
        ("cper_kinds_n", ctypes.c_uint32),
        ("cper_kinds", CperKind * MAX_CPER_KINDS),
        ("cper_time0", ctypes.c_uint64),
        ("bad_page_unsupported", ctypes.c_uint32),
        ("bad_pages", ctypes.c_uint32 * 3),
        ("bad_page_threshold", ctypes.c_uint32),
        ("power_cap_default_uw", ctypes.c_uint64),
        ("power_cap_min_uw", ctypes.c_uint64),
        ("power_cap_max_uw", ctypes.c_uint64),
        ("temp_limit", (ctypes.c_int64 * 3) * NUM_TEMPS),
        ("pcie_replay_roll_over", ctypes.c_uint64),
        ("pcie_other_end_recovery", ctypes.c_uint64),
        ("xcp_set", ctypes.c_uint32),
        ("xcp_busy", (ctypes.c_uint32 * NUM_XCC) * NUM_XCP),
        ("xcp_acc", ((ctypes.c_uint64 * NUM_XCC) * NUM_XCP) * NUM_XCP_ACC),
        ("xgmi_hive_id", ctypes.c_uint64),
        ("xgmi_node_id", ctypes.c_uint64),
        ("xgmi_unsupported", ctypes.c_uint32),
    ]


class Event(ctypes.Structure):
    _pack_ = 1
    _fields_ = [
        ("device", ctypes.c_uint32),
        ("event", ctypes.c_uint32),
        ("message", ctypes.c_char * 64),
    ]


class State(ctypes.Structure):
    _pack_ = 1
    _anonymous_ = ("faults",)
    _fields_ = [
        ("magic", ctypes.c_uint32),
        ("version", ctypes.c_uint32),
        ("init_status", ctypes.c_uint32),
        ("device_count", ctypes.c_uint32),
        ("faults", Faults),
        ("event_head", ctypes.c_uint32),
        ("event_tail", ctypes.c_uint32),
        ("events", Event * MAX_EVENTS),
        ("devices", Device * MAX_DEVICES),
        # What amdsmi_get_lib_version reports: (major, minor, release); 0s: 26.5.0.
        ("lib_version", ctypes.c_uint32 * 3),
    ]


# Bus numbers of the eight OAM slots of a typical MI300X baseboard.
MI300X_BUSES = (0x0C, 0x22, 0x38, 0x5C, 0x9F, 0xAF, 0xBF, 0xDF)
GIB = 1024**3
MIB = 1024**2


def bdf(bus: int, device: int = 0, function: int = 0, domain: int = 0) -> int:
    """``amdsmi_bdf_t.as_uint`` (function:3, device:5, bus:8, domain:48)."""
    return function | (device << 3) | (bus << 8) | (domain << 16)


def mi300x(dev: Device, i: int) -> None:
    """Fill ``dev`` as the i-th GPU of an MI300X node (values vary by index)."""
    ctypes.memset(ctypes.addressof(dev), 0, ctypes.sizeof(dev))
    dev.market_name = b"AMD Instinct MI300X"
    dev.asic_serial = f"{0x5A1E_0000_0000_0000 + i:016X}".encode()
    dev.board_serial = f"692251001{i:03d}".encode()
    dev.vbios_version = b"022.040.003.043.000001"
    dev.vbios_part = b"113-M3000100-102"
    dev.uuid = f"{i:02x}ff74a1-0000-1000-80a5-5a1e0000000{i:x}".encode()
    dev.driver_version = b"6.8.5"
    dev.compute_partition = b"SPX"
    dev.memory_partition = b"NPS1"
    dev.bdf = bdf(MI300X_BUSES[i] if i < len(MI300X_BUSES) else 0xE0 + i)
    dev.partition_id = 0
    dev.gfx_activity = 37 + i
    dev.umc_activity = 12 + i
    dev.mm_activity = U16_NA  # MI300X reports no mm_activity: "N/A"
    dev.temp_unsupported = 1 << 0  # no edge sensor on MI300X
    dev.clk_unsupported = (1 << 2) | (1 << 5) | (1 << 7) | (1 << 9)  # DCEF, PCIE, VCLK1, DCLK1
    dev.fan_supported = 0
    dev.mem_total[:] = [196592 * MIB, 196592 * MIB, 1031 * GIB]
    dev.mem_used[:] = [(i + 1) * GIB + 283 * MIB, (i + 1) * GIB + 283 * MIB, 15 * MIB + i]
    dev.temp[:] = [0, 45 + i, 38 + i, 36 + i, 37 + i, 38 + i, 39 + i]
    dev.socket_power = 162 + i
    dev.current_socket_power = 162 + i
    dev.average_socket_power = U16_NA
    dev.power_limit = 750
    dev.power_cap_uw = 750_000_000
    dev.energy_acc = 1_234_567_890 + i * 1000
    dev.energy_step = 0
    dev.energy_resolution = 15.259
    clocks = {  # type: (current, min, max) MHz
        0: (2100, 500, 2100),  # GFX
        1: (1800, 1200, 2100),  # DF
        3: (1000, 28, 1143),  # SOC
        4: (1300, 900, 1300),  # MEM
        6: (914, 914, 1333),  # VCLK0
        8: (711, 711, 1143),  # DCLK0
    }
    for t, (cur, lo, hi) in clocks.items():
        dev.clk[t], dev.clk_min[t], dev.clk_max[t] = cur, lo, hi
    dev.pcie_width, dev.pcie_speed, dev.pcie_bandwidth = 16, 32000, 4000 + i
    dev.pcie_max_width, dev.pcie_max_speed, dev.pcie_interface_version = 16, 32000, 5
    dev.pcie_replay, dev.pcie_recovery = i, 2
    dev.pcie_nak_sent, dev.pcie_nak_received = 1, 0
    dev.ecc_enabled = 0b1000_1111  # UMC, SDMA, GFX, MMHUB, XGMI_WAFL
    dev.ecc_total[:] = [10 + i, 0, 1]
    dev.ecc_block[0][:] = [10 + i, 0, 1]  # UMC carries them all
    dev.vcn_activity[:] = [3, 0, 0, 0]
    dev.jpeg_activity[:] = [5] + [0] * 23 + [U16_NA] * 8
    for k in range(8):
        dev.xgmi_read_kb[k] = 1_000_000 * (i + 1) + k
        dev.xgmi_write_kb[k] = 2_000_000 * (i + 1) + k
        dev.xgmi_link_status[k] = 1
    dev.xgmi_read_kb[7] = dev.xgmi_write_kb[7] = U64_NA  # no eighth peer
    dev.xgmi_link_status[7] = U16_NA
    dev.accumulation_counter = 500_000 + i
    dev.residency[:] = [0, 1200 + i, 0, 0, 0]
    dev.num_partition = 1
    dev.violation_active[:] = [0, 1, 0, 0, 0, 0]
    dev.bad_page_threshold = 128
    dev.power_cap_default_uw, dev.power_cap_min_uw, dev.power_cap_max_uw = (
        750_000_000,
        200_000_000,
        750_000_000,
    )
    for sensor, limits in ((1, (100, 110, 115)), (2, (95, 105, 0))):  # hotspot, vram
        dev.temp_limit[sensor][:] = limits
    dev.pcie_replay_roll_over, dev.pcie_other_end_recovery = 0, 3
    dev.cper_time0 = 1_764_000_000  # 2025-11-24T16:00:00Z
    set_xcps(dev, [[20 + i + k for k in range(NUM_XCC)]])  # SPX: one XCP of eight XCCs
    if i == 0:
        dev.proc_count = 2
        for k, (pid, vram, gtt, cu, name) in enumerate(
            [(4242, 8 * GIB, 2 * MIB, 152, b"python3"), (4343, 512 * MIB, 0, 8, b"rccl-tests")]
        ):
            dev.proc_pid[k], dev.proc_vram[k], dev.proc_gtt[k] = pid, vram, gtt
            dev.proc_cu[k] = cu
            dev.proc_name[k].value = name


def set_xcps(dev: Device, busy: list[list[int]]) -> None:
    """xcp_stats: ``busy[x][c]`` is XCC c of XCP x (percent); what is not given is N/A.

    The accumulators of a present XCC are derived from its busy value, so a
    test can compute them: ppt = 10*busy, thm = busy, low_util = 100 - busy,
    total = 11*busy.
    """
    dev.xcp_set = 1
    for x in range(NUM_XCP):
        for c in range(NUM_XCC):
            v = busy[x][c] if x < len(busy) and c < len(busy[x]) else None
            dev.xcp_busy[x][c] = U32_NA if v is None else v
            accs = (U64_NA,) * 4 if v is None else (10 * v, v, 100 - v, 11 * v)
            for a, acc in enumerate(accs):
                dev.xcp_acc[a][x][c] = acc


def cpx_partition(dev: Device, g: int, p: int) -> None:
    """Make ``dev`` partition p of MI300X number g in CPX mode, as bare-metal amdsmi shows it.

    It reads the whole GPU's gpu_metrics (as amdsmi does), whose XCP x has one XCC,
    busy ``5*g + x`` percent (never the GPU's whole gfx_activity), and
    ``num_partition`` 8. Only the first partition reports the partition modes;
    the others answer NOT_SUPPORTED, as on an MI300X.
    """
    mi300x(dev, g)
    dev.uuid = f"{g:02x}ff74a1-0000-1000-80a5-5a1e000000{p:02x}".encode()
    dev.bdf = bdf(MI300X_BUSES[g], function=p)  # amdsmi numbers partitions by function
    dev.compute_partition = b"CPX" if p == 0 else b""
    dev.memory_partition = b"NPS1" if p == 0 else b""
    dev.partition_id = p
    dev.num_partition = NUM_XCP
    set_xcps(dev, [[5 * g + x] for x in range(NUM_XCP)])


def cpx(fake: FakeAmdSmi, gpus: int = 8) -> None:
    """Make the fake a node of ``gpus`` MI300X in CPX mode: eight partitions each.

    Partition p of GPU g is library device 8g+p (:func:`cpx_partition`).
    """
    fake.state.device_count = gpus * NUM_XCP
    for g in range(gpus):
        for p in range(NUM_XCP):
            cpx_partition(fake.device(g * NUM_XCP + p), g, p)


def cper(
    dev: Device, kinds: list[tuple[int, list[int]] | tuple[int, list[int], int]], count: int = 0
) -> None:
    """Set a device's CPER record kinds, (severity, afids[, flaw]) each, and ``count`` entries."""
    dev.cper_kinds_n = len(kinds)
    for k, kind in enumerate(kinds):
        slot = dev.cper_kinds[k]
        slot.severity, afids = kind[0], kind[1]
        slot.flaw = kind[2] if len(kind) > 2 else CPER_OK  # type: ignore[misc]
        slot.afid_count = len(afids)
        for j, afid in enumerate(afids):
            slot.afids[j] = afid
    dev.cper_count = count


def create(path: Path, devices: int = 8) -> FakeAmdSmi:
    """Write a fresh state file with ``devices`` MI300X-like GPUs and open it."""
    if not 0 <= devices <= MAX_DEVICES:
        raise ValueError(f"the fake serves 0..{MAX_DEVICES} devices")
    state = State()
    state.magic, state.version, state.device_count = MAGIC, VERSION, devices
    state.lib_version[:] = LIB_VERSION
    for i in range(devices):
        mi300x(state.devices[i], i)
    path.write_bytes(bytes(state))
    return FakeAmdSmi(path)


class FakeAmdSmi(FaultRules):
    """The shared state, mapped; changes are seen at once by every process using the fake."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        fd = os.open(self.path, os.O_RDWR)
        try:
            self._map = mmap.mmap(fd, ctypes.sizeof(State))
        finally:
            os.close(fd)
        self.state = State.from_buffer(self._map)

    def close(self) -> None:
        """Unmap (the file stays for processes still using it)."""
        del self.state
        self._map.close()

    @property
    def env(self) -> dict[str, str]:
        """The variable that makes the fake use this state."""
        return {"FAKE_AMDSMI_STATE": str(self.path)}

    def device(self, i: int) -> Device:
        """Device ``i`` (live view)."""
        return self.state.devices[i]

    def push_event(self, device: int, event: int, message: str = "") -> None:
        """Queue one event notification."""
        head = self.state.event_head
        slot = self.state.events[head % MAX_EVENTS]
        slot.device, slot.event, slot.message = device, event, message.encode()[:63]
        self.state.event_head = head + 1

    def wait(self, predicate: Callable[[], object], timeout: float = 20.0) -> None:
        """Poll ``predicate`` until it is true (e.g. a call got hung)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return
            time.sleep(0.02)
        raise AssertionError("fake state never reached the expected condition")


@contextmanager
def opened(path: Path, devices: int = 8) -> Iterator[FakeAmdSmi]:
    """:func:`create` as a context manager that releases hangs on exit."""
    fake = create(path, devices)
    try:
        yield fake
    finally:
        fake.clear_rules()
        fake.release_hangs()
        fake.close()


def hives(fake: FakeAmdSmi, hive_ids: list[int]) -> None:
    """Put device i in XGMI hive ``hive_ids[i]`` (0: in none), node id its place in it."""
    seen: dict[int, int] = {}
    for i, hive in enumerate(hive_ids):
        dev = fake.device(i)
        dev.xgmi_hive_id, dev.xgmi_node_id = hive, seen.get(hive, 0)
        seen[hive] = seen.get(hive, 0) + 1
