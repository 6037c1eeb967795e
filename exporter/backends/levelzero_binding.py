"""pyzes, loaded from the configured loader, plus the Sysman entry points it does not bind.

pyzes 0.1.3 loads ``/usr/lib/x86_64-linux-gnu/libze_loader.so.1`` while it is
imported (a hard-coded Debian path; level-zero#485), so on RHEL or SUSE, whose
loader is ``/usr/lib64/libze_loader.so.1``, the import fails. :func:`load`
imports it with that one path mapped to the loader found (``library_path``, else
:mod:`libsearch`) for the duration of the import; the package itself is
untouched and loads nothing else.

pyzes binds no RAS, fabric-port or device-state call: :class:`Extra` binds
them with structs written from the Level Zero spec (zes_api.h 1.17, x86_64
layouts) against the same loaded library, so they share its initialisation.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import importlib.util
import sys
from collections.abc import Iterator
from typing import Any

from exporter.backends.base import BackendUnavailable
from exporter.host import libsearch

# The loader pyzes opens while it is imported.
PYZES_LOADER = "/usr/lib/x86_64-linux-gnu/libze_loader.so.1"

# ze_result_t values the backend tells apart.
SUCCESS = 0
DEVICE_LOST = 0x70000001
DEVICE_REQUIRES_RESET = 0x70000006
DEVICE_IN_LOW_POWER_STATE = 0x70000007
INSUFFICIENT_PERMISSIONS = 0x70010000
NOT_AVAILABLE = 0x70010001
UNINITIALIZED = 0x78000001
UNSUPPORTED_VERSION = 0x78000002
UNSUPPORTED_FEATURE = 0x78000003
UNSUPPORTED_ENUMERATION = 0x7800000D
SURVIVABILITY_MODE_DETECTED = 0x78000020

RESULT_NAMES = {
    DEVICE_LOST: "device_lost",
    DEVICE_REQUIRES_RESET: "device_requires_reset",
    DEVICE_IN_LOW_POWER_STATE: "device_in_low_power_state",
    INSUFFICIENT_PERMISSIONS: "insufficient_permissions",
    NOT_AVAILABLE: "not_available",
    0x70020000: "dependency_unavailable",
    UNINITIALIZED: "uninitialized",
    UNSUPPORTED_VERSION: "unsupported_version",
    UNSUPPORTED_FEATURE: "unsupported_feature",
    0x78000004: "invalid_argument",
    0x78000005: "invalid_null_handle",
    0x78000007: "invalid_null_pointer",
    UNSUPPORTED_ENUMERATION: "unsupported_enumeration",
    SURVIVABILITY_MODE_DETECTED: "survivability_mode",
    0x7FFFFFFE: "unknown",
}


def result_name(rc: int) -> str:
    """A ze_result_t as a short reason (its hex value when unknown)."""
    return RESULT_NAMES.get(rc, f"ze_result_{rc & 0xFFFFFFFF:#x}")


@contextlib.contextmanager
def _loader_at(path: str) -> Iterator[None]:
    """While pyzes imports, its ``CDLL(<Debian path>)`` opens ``path`` instead."""
    original = ctypes.CDLL
    if path == PYZES_LOADER:
        yield
        return

    class Redirected(original):  # type: ignore[misc,valid-type]
        def __init__(self, name: Any, *args: Any, **kwargs: Any) -> None:
            super().__init__(path if name == PYZES_LOADER else name, *args, **kwargs)

    ctypes.CDLL = Redirected  # type: ignore[misc]
    try:
        yield
    finally:
        ctypes.CDLL = original  # type: ignore[misc]


def load(found: libsearch.Found) -> Any:
    """Import pyzes bound to the loader ``found``; BackendUnavailable with the reason."""
    if importlib.util.find_spec("pyzes") is None:
        raise BackendUnavailable(
            "binding_missing",
            "the pyzes package is not installed (accel-exporter's 'intel' extra, docs/deploy.md)",
        )
    if not found.path:
        raise BackendUnavailable("library_not_found", found.detail)
    library_path = found.path
    loaded = sys.modules.get("pyzes")
    if loaded is not None:  # bound once per process, to the first loader (in-process tests)
        return loaded
    try:
        with _loader_at(library_path):
            return importlib.import_module("pyzes")
    except OSError as exc:
        raise BackendUnavailable(
            "library_not_found", f"pyzes could not load {library_path}: {exc}"
        ) from None


# -- structs pyzes lacks (zes_api.h 1.17; sizes checked by tests against the spec values) --


class DeviceState(ctypes.Structure):
    """zes_device_state_t (24 bytes)."""

    _fields_ = [
        ("stype", ctypes.c_int32),
        ("pNext", ctypes.c_void_p),
        ("reset", ctypes.c_uint32),
        ("repaired", ctypes.c_int32),
    ]


class RasProperties(ctypes.Structure):
    """zes_ras_properties_t (32 bytes); type 0 correctable, 1 uncorrectable."""

    _fields_ = [
        ("stype", ctypes.c_int32),
        ("pNext", ctypes.c_void_p),
        ("type", ctypes.c_int32),
        ("onSubdevice", ctypes.c_uint8),
        ("subdeviceId", ctypes.c_uint32),
    ]


class RasState(ctypes.Structure):
    """zes_ras_state_t (72 bytes): cumulative counts of the seven categories."""

    _fields_ = [
        ("stype", ctypes.c_int32),
        ("pNext", ctypes.c_void_p),
        ("category", ctypes.c_uint64 * 7),
    ]


class RasStateExp(ctypes.Structure):
    """zes_ras_state_exp_t (16 bytes): one category of zesRasGetStateExp and its count."""

    _fields_ = [("category", ctypes.c_int32), ("errorCounter", ctypes.c_uint64)]


# zes_ras_error_category_exp_t: memory (ECC) errors, which zes_ras_state_t has no field for.
RAS_CATEGORY_EXP_MEMORY = 7


class FabricPortId(ctypes.Structure):
    """zes_fabric_port_id_t (12 bytes)."""

    _fields_ = [
        ("fabricId", ctypes.c_uint32),
        ("attachId", ctypes.c_uint32),
        ("portNumber", ctypes.c_uint8),
    ]


class FabricPortSpeed(ctypes.Structure):
    """zes_fabric_port_speed_t (16 bytes)."""

    _fields_ = [("bitRate", ctypes.c_int64), ("width", ctypes.c_int32)]


class FabricPortProperties(ctypes.Structure):
    """zes_fabric_port_properties_t (328 bytes)."""

    _fields_ = [
        ("stype", ctypes.c_int32),
        ("pNext", ctypes.c_void_p),
        ("model", ctypes.c_char * 256),
        ("onSubdevice", ctypes.c_uint8),
        ("subdeviceId", ctypes.c_uint32),
        ("portId", FabricPortId),
        ("maxRxSpeed", FabricPortSpeed),
        ("maxTxSpeed", FabricPortSpeed),
    ]


class FabricPortState(ctypes.Structure):
    """zes_fabric_port_state_t (72 bytes)."""

    _fields_ = [
        ("stype", ctypes.c_int32),
        ("pNext", ctypes.c_void_p),
        ("status", ctypes.c_int32),
        ("qualityIssues", ctypes.c_uint32),
        ("failureReasons", ctypes.c_uint32),
        ("remotePortId", FabricPortId),
        ("rxSpeed", FabricPortSpeed),
        ("txSpeed", FabricPortSpeed),
    ]


class FabricPortThroughput(ctypes.Structure):
    """zes_fabric_port_throughput_t (24 bytes): µs timestamp, byte counters."""

    _fields_ = [
        ("timestamp", ctypes.c_uint64),
        ("rxCounter", ctypes.c_uint64),
        ("txCounter", ctypes.c_uint64),
    ]


# zes_structure_type_t of the structs above (the spec's values).
STYPE_DEVICE_STATE = 0x15
STYPE_RAS_PROPERTIES = 0xF
STYPE_RAS_STATE = 0x22
STYPE_FABRIC_PORT_PROPERTIES = 0x6
STYPE_FABRIC_PORT_STATE = 0x19

_P = ctypes.c_void_p
_COUNT = ctypes.POINTER(ctypes.c_uint32)
_SIGNATURES: dict[str, list[Any]] = {
    "zesDeviceGetState": [_P, ctypes.POINTER(DeviceState)],
    "zesDeviceEnumRasErrorSets": [_P, _COUNT, ctypes.POINTER(_P)],
    "zesRasGetProperties": [_P, ctypes.POINTER(RasProperties)],
    "zesRasGetState": [_P, ctypes.c_uint8, ctypes.POINTER(RasState)],
    "zesRasGetStateExp": [_P, _COUNT, ctypes.POINTER(RasStateExp)],
    "zesDeviceEnumFabricPorts": [_P, _COUNT, ctypes.POINTER(_P)],
    "zesFabricPortGetProperties": [_P, ctypes.POINTER(FabricPortProperties)],
    "zesFabricPortGetState": [_P, ctypes.POINTER(FabricPortState)],
    "zesFabricPortGetThroughput": [_P, ctypes.POINTER(FabricPortThroughput)],
}


class Extra:
    """The Sysman entry points pyzes does not bind, from its loaded library.

    ``missing`` lists those an older loader lacks; calling one answers
    UNSUPPORTED_FEATURE, as a driver without the feature would.
    """

    def __init__(self, library: Any) -> None:
        self.missing: list[str] = []
        self._fns: dict[str, Any] = {}
        for name, argtypes in _SIGNATURES.items():
            try:
                fn = library[name]  # a fresh function object: pyzes's cache is not touched
            except AttributeError:
                self.missing.append(name)
                continue
            fn.argtypes = argtypes
            fn.restype = ctypes.c_int32
            self._fns[name] = fn

    def function(self, name: str) -> Any:
        """The bound function ``name`` (None when the library lacks it), for tight loops."""
        return self._fns.get(name)

    def call(self, name: str, *args: Any) -> int:
        """Call ``name``; its ze_result_t."""
        fn = self._fns.get(name)
        if fn is None:
            return UNSUPPORTED_FEATURE
        return int(fn(*args))
