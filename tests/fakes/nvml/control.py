"""Build the fake libnvidia-ml.so.1 and drive its shared state from a test.

Typical use (see README.md in this folder)::

    lib = build(tmp_dir)                        # gcc -> <tmp_dir>/libnvidia-ml.so.1
    fake = FakeNvml.create(lib, tmp_dir / "state", devices=8)
    env = fake.env()                            # LD_LIBRARY_PATH + FAKE_NVML_STATE for a subprocess
    fake.device(3).power_mw = 250000            # applies at once, even inside a running daemon
    rule = fake.add_rule("nvmlDeviceGetPowerUsage", device=1, hang=True)
    fake.release(rule)                          # clear the rule and release the hung call

The ctypes classes below mirror ``nvml_fake_state.h``; ``test_fake_nvml_layout``
checks every field offset against the compiled library.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import shutil
import struct
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from tests.fakes.fault_rules import CRASH as CRASH  # re-exported for the NVML tests
from tests.fakes.fault_rules import FaultRules, Faults, Rule

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "fake_nvml.c"
HEADER = HERE / "nvml_fake_state.h"
LIBRARY_NAME = "libnvidia-ml.so.1"

MAX_DEVICES = 16
MAX_PROCS = 16
MAX_MIG = 7
MAX_EVENTS = 64
MAX_NVLINKS = 18
MAX_FANS = 4
MAX_FIELDS = 48
# nvmlValueType_t: the member of nvmlValue_t an nvmlFieldValue_t entry carries.
VALUE_DOUBLE, VALUE_UINT, VALUE_ULONG, VALUE_ULL, VALUE_SLL, VALUE_SINT, VALUE_USHORT = range(7)
VIOLATIONS = 9
GPM_IDS = 176
PROC_NAME = 32
NOT_AVAILABLE_U64 = 0xFFFFFFFFFFFFFFFF
NO_INSTANCE = 0xFFFFFFFF

# nvmlEventType bits
EVENT_SINGLE_BIT_ECC = 0x1
EVENT_DOUBLE_BIT_ECC = 0x2
EVENT_XID = 0x8
EVENT_GPU_UNAVAILABLE = 0x4000
EVENT_RECOVERY_ACTION = 0x8000

# nvmlReturn_t codes tests inject most
NOT_SUPPORTED = 3
NO_PERMISSION = 4
DRIVER_NOT_LOADED = 9
GPU_IS_LOST = 15
RESET_REQUIRED = 16
LIB_RM_VERSION_MISMATCH = 18
UNKNOWN = 999

# Index of Device.nvlink_errors[link][...] (nvmlNvLinkErrorCounter_t).
NVLINK_REPLAY, NVLINK_RECOVERY, NVLINK_CRC_FLIT, NVLINK_CRC_DATA = 0, 1, 2, 3

# GPM metric ids (nvmlGpmMetricId_t) the fake serves on a full GPU (an H100's set).
GPM_KNOWN = (
    *range(1, 14),
    20,
    21,
    *range(30, 38),
    *range(40, 48),
    50,
    51,
    *range(60, 98),
    *range(166, 170),
)

# Order of FakeDevice.violation_ns: NVML field ids 74..79, 269, 270, 271.
VIOLATION_FIELDS = (74, 75, 76, 77, 78, 79, 269, 270, 271)


class Proc(ctypes.Structure):
    _fields_ = [
        ("pid", ctypes.c_uint32),
        ("gpu_instance", ctypes.c_uint32),
        ("compute_instance", ctypes.c_uint32),
        ("sm_util", ctypes.c_uint32),
        ("mem_util", ctypes.c_uint32),
        ("graphics", ctypes.c_uint32),
        ("used_memory", ctypes.c_uint64),
        ("enc_util", ctypes.c_uint32),
        ("dec_util", ctypes.c_uint32),
        ("name", ctypes.c_char * PROC_NAME),
    ]


class Mig(ctypes.Structure):
    _fields_ = [
        ("present", ctypes.c_uint32),
        ("gpu_instance", ctypes.c_uint32),
        ("compute_instance", ctypes.c_uint32),
        ("util_percent", ctypes.c_uint32),
        ("dram_percent", ctypes.c_uint32),
        ("pad", ctypes.c_uint32),
        ("memory_total", ctypes.c_uint64),
        ("memory_used", ctypes.c_uint64),
        ("uuid", ctypes.c_char * 48),
    ]


class Event(ctypes.Structure):
    _fields_ = [
        ("device", ctypes.c_uint32),
        ("pad", ctypes.c_uint32),
        ("type", ctypes.c_uint64),
        ("data", ctypes.c_uint64),
    ]


class Field(ctypes.Structure):
    _fields_ = [
        ("field_id", ctypes.c_uint32),
        ("scope_id", ctypes.c_uint32),
        ("value_type", ctypes.c_uint32),
        ("pad", ctypes.c_uint32),
        ("raw", ctypes.c_uint64),
    ]


class Device(ctypes.Structure):
    _fields_ = [
        ("lost", ctypes.c_uint32),
        ("ecc_enabled", ctypes.c_uint32),
        ("name", ctypes.c_char * 96),
        ("uuid", ctypes.c_char * 96),
        ("serial", ctypes.c_char * 32),
        ("vbios", ctypes.c_char * 32),
        ("pci_domain", ctypes.c_uint32),
        ("pci_bus", ctypes.c_uint32),
        ("pci_device", ctypes.c_uint32),
        ("pci_device_id", ctypes.c_uint32),
        ("pci_subsystem_id", ctypes.c_uint32),
        ("util_gpu", ctypes.c_uint32),
        ("util_memory", ctypes.c_uint32),
        ("util_encoder", ctypes.c_uint32),
        ("util_decoder", ctypes.c_uint32),
        ("pad_u", ctypes.c_uint32),
        ("memory_total", ctypes.c_uint64),
        ("memory_reserved", ctypes.c_uint64),
        ("memory_used", ctypes.c_uint64),
        ("temperature_gpu", ctypes.c_uint32),
        ("temperature_memory", ctypes.c_uint32),
        ("power_mw", ctypes.c_uint32),
        ("power_limit_mw", ctypes.c_uint32),
        ("energy_mj", ctypes.c_uint64),
        ("energy_step_mj", ctypes.c_uint64),
        ("clock_mhz", ctypes.c_uint32 * 4),
        ("max_clock_mhz", ctypes.c_uint32 * 4),
        ("fan_count", ctypes.c_uint32),
        ("fan_percent", ctypes.c_uint32 * MAX_FANS),
        ("pstate", ctypes.c_uint32),
        ("pcie_tx_kbs", ctypes.c_uint32),
        ("pcie_rx_kbs", ctypes.c_uint32),
        ("pcie_replays", ctypes.c_uint32),
        ("pcie_gen", ctypes.c_uint32),
        ("pcie_width", ctypes.c_uint32),
        ("pcie_max_gen", ctypes.c_uint32),
        ("pcie_max_width", ctypes.c_uint32),
        ("pad0", ctypes.c_uint32),
        ("clocks_event_reasons", ctypes.c_uint64),
        ("violation_ns", ctypes.c_uint64 * VIOLATIONS),
        ("ecc", (ctypes.c_uint64 * 2) * 2),
        ("retired_pages", ctypes.c_uint32 * 2),
        ("retired_pending", ctypes.c_uint32),
        ("remapped_corrected", ctypes.c_uint32),
        ("remapped_uncorrected", ctypes.c_uint32),
        ("remapped_pending", ctypes.c_uint32),
        ("remapped_failure", ctypes.c_uint32),
        ("nvlink_count", ctypes.c_uint32),
        ("nvlink_active_mask", ctypes.c_uint32),
        ("pad1", ctypes.c_uint32),
        ("nvlink_tx_kib", ctypes.c_uint64 * MAX_NVLINKS),
        ("nvlink_rx_kib", ctypes.c_uint64 * MAX_NVLINKS),
        ("mig_mode", ctypes.c_uint32),
        ("mig_pending", ctypes.c_uint32),
        ("mig", Mig * MAX_MIG),
        ("proc_count", ctypes.c_uint32),
        ("pad2", ctypes.c_uint32),
        ("procs", Proc * MAX_PROCS),
        ("calls", ctypes.c_uint64),
        ("proc_sample_us", ctypes.c_uint64),
        ("proc_last_seen", ctypes.c_uint64),
        ("memory_temp_double", ctypes.c_double),
        ("gpm_supported", ctypes.c_uint32),
        ("recovery_action", ctypes.c_uint32),
        ("gpm_value", ctypes.c_double * GPM_IDS),
        ("gpm_status", ctypes.c_uint32 * GPM_IDS),
        ("nvlink_errors", (ctypes.c_uint64 * 4) * MAX_NVLINKS),
        ("fabric_state", ctypes.c_uint32),
        ("fabric_status", ctypes.c_uint32),
        ("fabric_health_mask", ctypes.c_uint32),
        ("fabric_clique", ctypes.c_uint32),
        ("margin_temperature", ctypes.c_int32),
        ("margin_supported", ctypes.c_uint32),
        ("power_min_mw", ctypes.c_uint32),
        ("power_max_mw", ctypes.c_uint32),
        ("power_default_mw", ctypes.c_uint32),
        ("sram_threshold_exceeded", ctypes.c_uint32),
        ("field_count", ctypes.c_uint32),
        ("field_pad", ctypes.c_uint32),
        ("fields", Field * MAX_FIELDS),
        ("fabric_cluster", ctypes.c_uint32),
        ("platform_slot", ctypes.c_uint32),
        ("platform_tray", ctypes.c_uint32),
        ("platform_host", ctypes.c_uint32),
        ("platform_module", ctypes.c_uint32),
        ("platform_chassis", ctypes.c_char * 16),
    ]


class State(ctypes.Structure):
    _anonymous_ = ("faults",)
    _fields_ = [
        ("magic", ctypes.c_uint32),
        ("version", ctypes.c_uint32),
        ("device_count", ctypes.c_uint32),
        ("init_error", ctypes.c_int32),
        ("driver_version", ctypes.c_char * 80),
        ("cuda_driver_version", ctypes.c_int32),
        ("pad", ctypes.c_uint32),
        ("faults", Faults),
        ("event_head", ctypes.c_uint64),
        ("event_sets", ctypes.c_uint64),
        ("events", Event * MAX_EVENTS),
        ("devices", Device * MAX_DEVICES),
        ("gpm_samples_live", ctypes.c_int64),
        ("gpm_sample_gets", ctypes.c_uint64),
        ("gpm_metrics_gets", ctypes.c_uint64),
    ]


# C struct name of each mirror class, for the layout check.
C_NAMES = {
    Rule: "fr_rule_t",
    Faults: "fr_faults_t",
    Proc: "fake_proc_t",
    Mig: "fake_mig_t",
    Event: "fake_event_t",
    Field: "fake_field_t",
    Device: "fake_device_t",
    State: "fake_state_t",
}


def build(dest: Path, cc: str | None = None) -> Path:
    """Compile the fake into ``dest/libnvidia-ml.so.1`` (SONAME set); its path.

    A missing compiler is an error, never a skip: the tests need the fake.
    """
    compiler = cc or shutil.which("gcc") or shutil.which("cc")
    if compiler is None:
        raise RuntimeError("gcc is required to build the fake NVML library")
    dest.mkdir(parents=True, exist_ok=True)
    out = dest / LIBRARY_NAME
    cmd = [
        compiler,
        "-shared",
        "-fPIC",
        "-O1",
        "-g",
        "-Wall",
        "-Werror",
        "-pthread",
        f"-Wl,-soname,{LIBRARY_NAME}",
        "-I",
        str(HERE),
        "-o",
        str(out),
        str(SOURCE),
    ]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if result.returncode != 0:
        raise RuntimeError(f"building the fake NVML failed:\n{result.stderr}")
    return out


@dataclass(frozen=True)
class FieldValue:
    """One ``nvmlDeviceGetFieldValues`` entry as the fake answers it (``set_fields``).

    ``value`` is written to the union member of ``value_type`` (nvmlValueType_t,
    the ``VALUE_*`` constants): a float for ``VALUE_DOUBLE``, else an integer kept
    to the member's width (two's complement for the signed ones).
    """

    field_id: int
    value: float
    value_type: int = 3
    scope_id: int = 0


def union_raw(value_type: int, value: float) -> int:
    """The 64 bits whose low bytes are ``value`` as the member of ``value_type``."""
    if value_type == VALUE_DOUBLE:
        return int(struct.unpack("=Q", struct.pack("=d", value))[0])
    bits = {VALUE_UINT: 32, VALUE_SINT: 32, VALUE_USHORT: 16}.get(value_type, 64)
    return int(value) & ((1 << bits) - 1)


@dataclass
class Process:
    """One simulated GPU process."""

    pid: int
    used_memory: int = 1 << 30
    sm_util: int = 0
    mem_util: int = 0
    enc_util: int = 0
    dec_util: int = 0
    name: str = ""
    graphics: bool = False
    # An MPS client: listed by nvmlDeviceGetMPSComputeRunningProcesses only.
    mps: bool = False
    gpu_instance: int = NO_INSTANCE
    compute_instance: int = NO_INSTANCE


@dataclass
class MigInstance:
    """One simulated MIG device (a GPU instance / compute instance pair).

    Memory belongs to the GPU instance: every MigInstance of one ``gpu_instance``
    must give the same ``memory_total``/``memory_used``.
    """

    gpu_instance: int
    compute_instance: int
    memory_total: int
    memory_used: int
    util_percent: int = 0
    dram_percent: int = 0
    uuid: str = ""


class FakeNvml(FaultRules):
    """A state file of the fake library, mapped for reading and writing."""

    def __init__(self, library: Path, path: Path) -> None:
        self.library = Path(library)
        self.path = Path(path)
        self._file = open(self.path, "r+b")  # noqa: SIM115 (kept open for the mapping)
        self._map = mmap.mmap(self._file.fileno(), ctypes.sizeof(State))
        self.state = State.from_buffer(self._map)

    @classmethod
    def create(cls, library: Path, path: Path, devices: int = 1) -> FakeNvml:
        """Write a fresh state file with ``devices`` default GPUs (H100-like) and map it."""
        lib = ctypes.CDLL(str(library))
        lib.fake_nvml_state_init.argtypes = [ctypes.c_char_p, ctypes.c_uint]
        lib.fake_nvml_state_size.restype = ctypes.c_ulong
        if lib.fake_nvml_state_size() != ctypes.sizeof(State):
            raise RuntimeError("control.State does not match nvml_fake_state.h")
        err = lib.fake_nvml_state_init(str(path).encode(), devices)
        if err:
            raise OSError(err, os.strerror(err), str(path))
        return cls(library, path)

    def reset(self, devices: int = 1) -> None:
        """Back to ``devices`` default GPUs and no faults, in place (for a fake that a
        process keeps mapped, e.g. in-process tests). Event and release counters
        keep counting so that open event sets and hung calls stay consistent."""
        head, generation = int(self.state.event_head), int(self.state.release_generation)
        live = int(self.state.gpm_samples_live)
        gets = int(self.state.gpm_sample_gets), int(self.state.gpm_metrics_gets)
        lib = ctypes.CDLL(str(self.library))
        lib.fake_nvml_fill.argtypes = [ctypes.c_void_p, ctypes.c_uint]
        lib.fake_nvml_fill(ctypes.addressof(self.state), devices)
        self.state.event_head = head
        self.state.release_generation = generation + 1
        self.state.gpm_samples_live = live  # samples a process still holds stay counted
        self.state.gpm_sample_gets, self.state.gpm_metrics_gets = gets

    def env(self) -> dict[str, str]:
        """Environment for a process that should load this fake with this state."""
        return {
            "LD_LIBRARY_PATH": str(self.library.parent),
            "FAKE_NVML_STATE": str(self.path),
        }

    def close(self) -> None:
        """Unmap the state (the file stays)."""
        del self.state
        self._map.close()
        self._file.close()

    # -- devices ---------------------------------------------------------------

    def device(self, index: int) -> Device:
        """The live struct of one device; assignments apply at once."""
        return self.state.devices[index]

    def uuid(self, index: int) -> str:
        """The UUID the fake reports for device ``index``."""
        return self.state.devices[index].uuid.decode()

    def set_processes(self, index: int, processes: Iterable[Process]) -> None:
        """Replace the running processes of a device."""
        items = list(processes)
        if len(items) > MAX_PROCS:
            raise ValueError(f"at most {MAX_PROCS} processes per device")
        dev = self.state.devices[index]
        dev.proc_count = 0
        for slot, p in zip(dev.procs, items):
            slot.pid = p.pid
            slot.used_memory = p.used_memory
            slot.sm_util = p.sm_util
            slot.mem_util = p.mem_util
            slot.enc_util = p.enc_util
            slot.dec_util = p.dec_util
            slot.name = p.name.encode()
            slot.graphics = 2 if p.mps else int(p.graphics)
            slot.gpu_instance = p.gpu_instance
            slot.compute_instance = p.compute_instance
        dev.proc_count = len(items)

    def set_fields(self, index: int, entries: Iterable[FieldValue]) -> None:
        """Answer these field-value entries of GPU ``index`` as given (each matched by
        field id and scope id; at most MAX_FIELDS); ``[]`` goes back to the fake's own."""
        items = list(entries)
        if len(items) > MAX_FIELDS:
            raise ValueError(f"at most {MAX_FIELDS} field entries per GPU")
        dev = self.state.devices[index]
        dev.field_count = 0
        for slot, e in zip(dev.fields, items):
            slot.field_id, slot.scope_id = e.field_id, e.scope_id
            slot.value_type, slot.raw = e.value_type, union_raw(e.value_type, e.value)
        dev.field_count = len(items)

    def set_gpm(
        self,
        index: int,
        values: dict[int, float] | None = None,
        *,
        status: dict[int, int] | None = None,
    ) -> None:
        """GPM metric values (percent or MiB/s, by metric id) and per-entry return codes
        of GPU ``index``; a value applies to samples taken from now on."""
        dev = self.state.devices[index]
        for metric, number in (values or {}).items():
            dev.gpm_value[metric] = number
        for metric, code in (status or {}).items():
            dev.gpm_status[metric] = code

    def set_mig(self, index: int, instances: Iterable[MigInstance] | None) -> None:
        """Enable MIG with these instances (slot = position), or disable it with None."""
        dev = self.state.devices[index]
        for slot in dev.mig:
            slot.present = 0
        if instances is None:
            dev.mig_mode = 0
            return
        items = list(instances)
        if len(items) > MAX_MIG:
            raise ValueError(f"at most {MAX_MIG} MIG devices per GPU")
        memory: dict[int, tuple[int, int]] = {}
        for m in items:
            # The compute instances of a GPU instance share its memory.
            if memory.setdefault(m.gpu_instance, (m.memory_total, m.memory_used)) != (
                m.memory_total,
                m.memory_used,
            ):
                raise ValueError(f"GPU instance {m.gpu_instance}: compute instances share memory")
        for n, (slot, m) in enumerate(zip(dev.mig, items)):
            slot.gpu_instance = m.gpu_instance
            slot.compute_instance = m.compute_instance
            slot.memory_total = m.memory_total
            slot.memory_used = m.memory_used
            slot.util_percent = m.util_percent
            slot.dram_percent = m.dram_percent
            slot.uuid = (
                m.uuid or f"MIG-{index:02d}{n:02d}aaaa-bbbb-cccc-dddd-eeeeeeeeeeee"
            ).encode()
            slot.present = 1
        dev.mig_mode = 1

    # -- faults ----------------------------------------------------------------

    # The NVML tests' name for rule(): ``function`` an NVML symbol, "*", or
    # "field:<id>" to fail one entry of nvmlDeviceGetFieldValues; ``device`` -1 any,
    # -2 the calls that take no device.
    add_rule = FaultRules.rule

    def release(self, index: int | None = None) -> None:
        """Clear rule ``index`` (or none) and release every hung call."""
        if index is not None:
            self.clear_rule(index)
        self.release_hangs()

    def inject_event(self, index: int, event_type: int, data: int = 0) -> None:
        """Append one event to the ring every registered event set reads."""
        head = int(self.state.event_head)
        slot = self.state.events[head % MAX_EVENTS]
        slot.device = index
        slot.type = event_type
        slot.data = data
        self.state.event_head = head + 1

    def inject_xid(self, index: int, xid: int, *, couple: bool = False) -> None:
        """Inject an XID event. With ``couple``: XID 79 marks the GPU lost and
        XID 48 (double-bit ECC) bumps the uncorrected ECC counters, as a real one would."""
        if couple and xid == 48:
            dev = self.state.devices[index]
            dev.ecc[1][0] += 1
            dev.ecc[1][1] += 1
        self.inject_event(index, EVENT_XID, xid)
        if couple and xid == 79:
            self.state.devices[index].lost = 1
