"""What a GPU says about its own health: recovery action, NVLink errors, fabric, limits.

Read by :class:`~exporter.backends.nvml_device.DeviceReader` after its own
fields: the slow poll asks the driver's recovery action (field 230), the NVLink
data-link error counters of each active link, the fabric registration and
health mask (NVSwitch systems), and the power-limit bounds; the fast poll asks
the thermal margin. Each goes through :meth:`Gpu.call`, so a field the GPU lacks
is absent and a lost GPU ends the poll like any other call.
"""

from __future__ import annotations

import ctypes
from typing import Any

from exporter.backends import nvml_domains
from exporter.backends import nvml_support as nv
from exporter.backends.contract import Emitter, not_available
from exporter.backends.nvml_gpu import Gpu
from exporter.family_names import (
    ACCEL_DEVICE_RECOVERY_ACTION,
    ACCEL_NVIDIA_FABRIC_HEALTH_ISSUE,
    ACCEL_NVIDIA_FABRIC_STATE,
    ACCEL_NVLINK_ERRORS_TOTAL,
    ACCEL_POWER_LIMIT_BOUND_WATTS,
    ACCEL_SRAM_ECC_THRESHOLD_EXCEEDED,
    ACCEL_TEMPERATURE_MARGIN_CELSIUS,
)

FI_RECOVERY_ACTION = 230
# nvmlDeviceGpuRecoveryAction_t -> the action label; the first five are always
# exported (one-hot), a newer one only while the driver asks it.
RECOVERY_ACTIONS = ("none", "gpu_reset", "node_reboot", "drain_p2p", "drain_and_reset")
NEWER_RECOVERY_ACTIONS = {5: "recover_imex_domain", 6: "bus_reset", 7: "system_reboot"}

# nvmlNvLinkErrorCounter_t -> the type label.
NVLINK_ERRORS = ((0, "replay"), (1, "recovery"), (2, "crc_flit"), (3, "crc_data"))

# nvmlGpuFabricState_t (0 NOT_SUPPORTED: no fabric here, nothing exported).
FABRIC_STATES = ((1, "not_started"), (2, "in_progress"), (3, "completed"))
# Two-bit fields of the fabric health mask: (shift, check); 1 TRUE, 2 FALSE, 0 not supported.
FABRIC_HEALTH_BITS = (
    (0, "degraded_bandwidth"),
    (2, "route_recovery"),
    (4, "route_unhealthy"),
    (6, "access_timeout_recovery"),
)
# A four-bit field: 0 not supported, 1 none, anything else a configuration fault.
FABRIC_CONFIG_SHIFT = 8


class ReliabilityReader:
    """Reads the fields above for one GPU at a time."""

    def __init__(self, nvml: Any) -> None:
        self.nvml = nvml
        self._fabric = nvml.has("c_nvmlGpuFabricInfo_v3_t")
        self._sram = nvml.has("c_nvmlEccSramErrorStatus_v1_t")

    def slow(self, gpu: Gpu, out: Emitter) -> None:
        """Recovery action, NVLink errors (after the link layout is known), fabric, bounds."""
        n, h = self.nvml, gpu.handle
        self._recovery_action(gpu, out)
        for link in gpu.active_links:
            for counter, kind in NVLINK_ERRORS:
                value = gpu.call(n.nvmlDeviceGetNvLinkErrorCounter, h, link, counter)
                out.add(ACCEL_NVLINK_ERRORS_TOTAL, value, str(link), kind)
        self._fabric_info(gpu, out)
        self._sram_threshold(gpu, out)
        bounds = gpu.call(n.nvmlDeviceGetPowerManagementLimitConstraints, h)
        if bounds is not None:
            out.add(ACCEL_POWER_LIMIT_BOUND_WATTS, bounds[0] / 1000, "min")
            out.add(ACCEL_POWER_LIMIT_BOUND_WATTS, bounds[1] / 1000, "max")
        default = gpu.call(n.nvmlDeviceGetPowerManagementDefaultLimit, h)
        if default is not None:
            out.add(ACCEL_POWER_LIMIT_BOUND_WATTS, default / 1000, "default")

    def fast(self, gpu: Gpu, out: Emitter) -> None:
        """The thermal margin (signed: -1 is a temperature here, not "not available")."""
        margin = gpu.call(self.nvml.nvmlDeviceGetMarginTemperature, gpu.handle)
        if margin is not None:
            target = out.rows[ACCEL_TEMPERATURE_MARGIN_CELSIUS]
            target += out.prefix()
            target.append(int(margin))

    def _recovery_action(self, gpu: Gpu, out: Emitter) -> None:
        values = gpu.call(self.nvml.nvmlDeviceGetFieldValues, gpu.handle, [FI_RECOVERY_ACTION])
        if values is None:
            return
        _fid, _scope, code, number = nv.field_entries(values)[0]
        if code:
            gpu.status(f"field {FI_RECOVERY_ACTION}", code)
            return
        if not_available(number):
            return
        action = int(number)
        for value, name in enumerate(RECOVERY_ACTIONS):
            out.add(ACCEL_DEVICE_RECOVERY_ACTION, 1 if value == action else 0, name)
        newer = NEWER_RECOVERY_ACTIONS.get(action)
        if newer:
            out.add(ACCEL_DEVICE_RECOVERY_ACTION, 1, newer)
        elif action >= len(RECOVERY_ACTIONS):
            gpu.errors["invalid_value"] = gpu.errors.get("invalid_value", 0) + 1

    def _sram_threshold(self, gpu: Gpu, out: Emitter) -> None:
        if not self._sram:
            return
        n = self.nvml
        status = n.c_nvmlEccSramErrorStatus_v1_t()
        if gpu.call(n.nvmlDeviceGetSramEccErrorStatus, gpu.handle, ctypes.byref(status)) is None:
            return
        exceeded = int(status.bThresholdExceeded)
        out.add(ACCEL_SRAM_ECC_THRESHOLD_EXCEEDED, 1 if exceeded else 0)

    def _fabric_info(self, gpu: Gpu, out: Emitter) -> None:
        if not self._fabric or "fabric" in gpu.legacy:
            return
        n = self.nvml
        info = n.c_nvmlGpuFabricInfo_v3_t()
        try:
            n.nvmlDeviceGetGpuFabricInfoV(gpu.handle, ctypes.byref(info))
        except n.NVMLError as exc:
            code = int(exc.value)
            if code in nv.DOWNGRADE:  # no fabric here, or a driver without the v3 struct
                gpu.legacy.add("fabric")
                return
            gpu.failure("nvmlDeviceGetGpuFabricInfoV", code, str(exc))
            return
        gpu.ok += 1
        state = int(info.state)
        if not any(state == value for value, _ in FABRIC_STATES):
            return  # NOT_SUPPORTED: not part of a fabric
        for value, name in FABRIC_STATES:
            out.add(ACCEL_NVIDIA_FABRIC_STATE, 1 if state == value else 0, name)
        nvml_domains.emit_clique(info, out)
        mask = int(info.healthMask)
        for shift, check in FABRIC_HEALTH_BITS:
            bits = (mask >> shift) & 0x3
            if bits in (1, 2):
                out.add(ACCEL_NVIDIA_FABRIC_HEALTH_ISSUE, 1 if bits == 1 else 0, check)
        config = (mask >> FABRIC_CONFIG_SHIFT) & 0xF
        if config:
            out.add(
                ACCEL_NVIDIA_FABRIC_HEALTH_ISSUE,
                0 if config == 1 else 1,
                "incorrect_configuration",
            )
