"""The domains an NVIDIA GPU belongs to: its NVLink clique and its board (exporter.scope).

Read at the slow poll, as ``accel_device_domain_info{scope, domain}`` rows (the daemon
keeps them as identity: :mod:`exporter.sources.device_domains`).

- ``peer_domain``: the NVLink clique, from the GPU fabric info (the fabric manager's
  registration, ``nvmlDeviceGetGpuFabricInfoV``, already read for the fabric state):
  the cluster uuid and the clique id, named only once the registration is completed
  and the cluster uuid is not all zero (NVML's "not part of a cluster"). GPUs of one
  clique share NVLink memory (NVL72, an NVSwitch system); a GPU without a fabric (an
  HGX board without NVSwitch registration, PCIe cards) names none, and an action
  reaching its peers widens to its baseboard, else to the node.
- ``baseboard``: the compute tray, from ``nvmlDeviceGetPlatformInfo`` (v2: the
  chassis serial number and the slot of the tray in the chassis; Blackwell rack-scale
  systems). Read once per GPU: it does not move. NVML names none on an HGX board of
  8, whose board is the node's (what the widening gives).
"""

from __future__ import annotations

import ctypes
from typing import Any

from exporter.backends import nvml_support as nv
from exporter.backends.contract import Emitter
from exporter.backends.nvml_gpu import Gpu
from exporter.family_names import ACCEL_DEVICE_DOMAIN_INFO

FAMILY = ACCEL_DEVICE_DOMAIN_INFO
FABRIC_COMPLETED = 3  # NVML_GPU_FABRIC_STATE_COMPLETED
# Gpu.board while the platform info is not read yet; "" once NVML names no board.
UNREAD = None


def clique(info: Any) -> str:
    """The NVLink clique of a ``c_nvmlGpuFabricInfo_v3_t``; "" while none is named."""
    if int(info.state) != FABRIC_COMPLETED:
        return ""
    cluster = bytes(info.clusterUuid)
    if not any(cluster):
        return ""
    hexed = cluster.hex()
    uuid = f"{hexed[:8]}-{hexed[8:12]}-{hexed[12:16]}-{hexed[16:20]}-{hexed[20:]}"
    return f"nvlink-clique:{uuid}:{int(info.cliqueId)}"


def emit_clique(info: Any, out: Emitter) -> None:
    """The ``peer_domain`` row of a fabric info that names a clique."""
    domain = clique(info)
    if domain:
        out.add(FAMILY, 1, "peer_domain", domain)


def board(info: Any) -> str:
    """The compute tray of a ``c_nvmlPlatformInfo_v2_t``; "" without a chassis serial."""
    serial = nv.text(info.chassisSerialNumber)
    if not serial:
        return ""
    return f"nvidia-tray:{serial}:slot{ord(info.slotNumber)}"


class BoardReader:
    """Reads each GPU's board once and emits it at every slow poll."""

    def __init__(self, nvml: Any) -> None:
        self.nvml = nvml
        self._supported = nvml.has("c_nvmlPlatformInfo_v2_t")

    def slow(self, gpu: Gpu, out: Emitter) -> None:
        """The ``baseboard`` row, read at the first slow poll that gets an answer."""
        if gpu.board is UNREAD:
            gpu.board = self._read(gpu)
        if gpu.board:
            out.add(FAMILY, 1, "baseboard", gpu.board)

    def _read(self, gpu: Gpu) -> str | None:
        """The board, "" when NVML names none here, None to ask again (a failed call)."""
        if not self._supported:
            return ""
        n = self.nvml
        info = n.c_nvmlPlatformInfo_v2_t()
        try:
            n.nvmlDeviceGetPlatformInfo(gpu.handle, ctypes.byref(info))
        except n.NVMLError as exc:
            code = int(exc.value)
            if code in nv.DOWNGRADE:  # not a rack-scale platform, or an older driver
                return ""
            gpu.failure("nvmlDeviceGetPlatformInfo", code, str(exc))
            return None
        gpu.ok += 1
        return board(info)
