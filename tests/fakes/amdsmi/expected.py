"""What the exporter must show for a device of the fake, derived from the fake's state.

This is the specification side of the tests, written independently of the
backend: raw amdsmi units in the state, base units out (percent / 100,
MHz x 1e6, Mb/s x 1e6 / 8, KB x 1024, energy = accumulator x resolution uJ / 1e6).
"""

from __future__ import annotations

import struct

from tests.fakes.amdsmi.state import U16_NA, U32_NA, U64_NA, Device

Series = tuple[str, tuple[tuple[str, str], ...]]

TEMPS = ("edge", "hotspot", "memory", "hbm_0", "hbm_1", "hbm_2", "hbm_3")
CLOCKS = {0: "graphics", 4: "memory", 3: "soc", 1: "data_fabric", 6: "video", 8: "decode"}
# RAS blocks in bit order (bit 0 = UMC).
BLOCKS = (
    *("umc", "sdma", "gfx", "mmhub", "athub", "pcie_bif", "hdp", "xgmi_wafl", "df", "smn"),
    *("sem", "mp0", "mp1", "fuse", "mca", "vcn", "jpeg", "ih", "mpio"),
)
RESIDENCY = ("prochot", "ppt", "socket_thermal", "vr_thermal", "hbm_thermal")
THROTTLE = (*RESIDENCY, "gfx_clock_below_host_limit")
XCP_RESIDENCY = (
    "gfx_below_host_limit_ppt",
    "gfx_below_host_limit_thermal",
    "gfx_low_utilization",
    "gfx_below_host_limit_total",
)
TEMP_LIMITS = ("max", "critical", "emergency")
# board_info model_number of every fake device (fake_amdsmi.c): an MI300X OAM's part number.
PART_NUMBER = "102-G30211-00"
PCIE_GEN = {2500: 1, 5000: 2, 8000: 3, 16000: 4, 32000: 5, 64000: 6}


def f32(x: float) -> float:
    """``x`` rounded to a C float, as the library hands it over."""
    return float(struct.unpack("f", struct.pack("f", x))[0])


def uuid(dev: Device) -> str:
    return str(dev.uuid.decode())


def pci_bus_id(dev: Device) -> str:
    b = dev.bdf
    return f"{b >> 16:04x}:{(b >> 8) & 0xFF:02x}:{(b >> 3) & 0x1F:02x}.{b & 7:x}"


def info(dev: Device, index: int) -> dict[str, str]:
    """The labels of accel_device_info."""
    return {
        "vendor": "amd",
        "device": str(index),
        "uuid": uuid(dev),
        "model": dev.market_name.decode(),
        "pci_bus_id": pci_bus_id(dev),
        "serial": dev.board_serial.decode(),
        "vbios": dev.vbios_version.decode(),
        "driver_version": dev.driver_version.decode(),
        "cuda_driver_version": "",
        "mig_mode": "",
        "compute_partition": mode(dev),
        "memory_partition": dev.memory_partition.decode() or ("NPS1" if partitioned(dev) else ""),
        "partition": str(dev.partition_id) if partitioned(dev) else "",
        "physical_gpu": pci_bus_id(dev)[:-1] + "0" if partitioned(dev) else "",
    }


MODES = {2: "DPX", 3: "TPX", 4: "QPX", 8: "CPX"}


def mode(dev: Device) -> str:
    """The compute partition mode: reported (first partition), else from num_partition."""
    return dev.compute_partition.decode() or MODES.get(dev.num_partition, "")


def partitioned(dev: Device) -> bool:
    """A partition of a GPU in a mode other than SPX."""
    return mode(dev) not in ("", "SPX")


def xcps(dev: Device) -> dict[int, tuple[float, dict[str, float]]]:
    """XCP -> (busy share, {residency reason: mean accumulator}) of the XCPs the device exports.

    An unpartitioned GPU exports every XCP with a valid XCC; a partition only its own.
    """
    if not dev.xcp_set:
        return {}
    wanted = [dev.partition_id] if partitioned(dev) else range(8)
    out = {}
    for x in wanted:
        xccs = [c for c in range(8) if dev.xcp_busy[x][c] != U32_NA]
        if not xccs:
            continue
        busy = sum(dev.xcp_busy[x][c] for c in xccs) / len(xccs) / 100
        acc = {}
        for a, reason in enumerate(XCP_RESIDENCY):
            vals = [dev.xcp_acc[a][x][c] for c in xccs if dev.xcp_acc[a][x][c] != U64_NA]
            if vals:
                acc[reason] = sum(vals) / len(vals)
        out[x] = (busy, acc)
    return out


def series(
    dev: Device,
    index: int,
    *,
    processes: bool = False,
    slow: bool = True,
    corrected_decoded: bool = True,
) -> dict[Series, float]:
    """Every series the device must have, with its exact value (not events).

    ``corrected_decoded``: the fake's library version decodes corrected AFIDs (26.5.0+).
    """
    ident = {"device": str(index), "uuid": uuid(dev)}
    out: dict[Series, float] = {}

    def put(name: str, value: float, **dims: str) -> None:
        out[(name, tuple(sorted({**ident, **dims}.items())))] = float(value)

    put("accel_device_up", 1)
    own = xcps(dev)
    if not partitioned(dev):
        put("accel_utilization_ratio", dev.gfx_activity / 100)
    elif dev.partition_id in own:
        put("accel_utilization_ratio", own[dev.partition_id][0])
    for x, (busy, acc) in own.items():
        put("accel_amd_xcp_utilization_ratio", busy, xcp=str(x))
        for reason, value in acc.items():
            put("accel_amd_violation_residency_total", value, reason=reason, xcp=str(x))
    put("accel_memory_bandwidth_utilization_ratio", dev.umc_activity / 100)
    if dev.mm_activity != U16_NA:
        put("accel_amd_mm_activity_ratio", dev.mm_activity / 100)
    put("accel_memory_total_bytes", dev.mem_total[0])
    put("accel_memory_used_bytes", dev.mem_used[0])
    put("accel_memory_free_bytes", dev.mem_total[0] - dev.mem_used[0])
    put("accel_amd_visible_vram_total_bytes", dev.mem_total[1])
    put("accel_amd_visible_vram_used_bytes", dev.mem_used[1])
    put("accel_amd_gtt_total_bytes", dev.mem_total[2])
    put("accel_amd_gtt_used_bytes", dev.mem_used[2])
    for t, sensor in enumerate(TEMPS):
        if not (dev.temp_unsupported >> t) & 1:
            put("accel_temperature_celsius", dev.temp[t], sensor=sensor)
    put("accel_power_watts", dev.socket_power)
    put("accel_power_limit_watts", dev.power_limit)
    put("accel_energy_joules_total", dev.energy_acc * f32(dev.energy_resolution) / 1e6)
    for t, clock in CLOCKS.items():
        if not (dev.clk_unsupported >> t) & 1:
            put("accel_clock_hertz", dev.clk[t] * 1e6, clock=clock)
            put("accel_clock_max_hertz", dev.clk_max[t] * 1e6, clock=clock)
    put("accel_pcie_link_width", dev.pcie_width)
    put("accel_pcie_link_generation", PCIE_GEN[dev.pcie_speed])
    put("accel_pcie_link_max_width", dev.pcie_max_width)
    put("accel_pcie_link_max_generation", dev.pcie_interface_version)
    put("accel_amd_pcie_bandwidth_bytes_per_second", dev.pcie_bandwidth * 1e6 / 8)
    put("accel_pcie_replays_total", dev.pcie_replay)
    put("accel_amd_pcie_recoveries_total", dev.pcie_recovery)
    put("accel_amd_pcie_nak_sent_total", dev.pcie_nak_sent)
    put("accel_amd_pcie_nak_received_total", dev.pcie_nak_received)
    put("accel_amd_pcie_replay_rollovers_total", dev.pcie_replay_roll_over)
    put("accel_amd_pcie_other_end_recoveries_total", dev.pcie_other_end_recovery)
    for k, v in enumerate(dev.vcn_activity):
        if v != U16_NA:
            put("accel_amd_vcn_activity_ratio", v / 100, engine=str(k))
    for k, v in enumerate(dev.jpeg_activity):
        if v != U16_NA:
            put("accel_amd_jpeg_activity_ratio", v / 100, engine=str(k))
    for k in range(8):
        if dev.xgmi_read_kb[k] != U64_NA:
            put("accel_amd_xgmi_read_bytes_total", dev.xgmi_read_kb[k] * 1024, link=str(k))
        if dev.xgmi_write_kb[k] != U64_NA:
            put("accel_amd_xgmi_write_bytes_total", dev.xgmi_write_kb[k] * 1024, link=str(k))
        if dev.xgmi_link_status[k] in (0, 1):
            put("accel_amd_xgmi_link_up", dev.xgmi_link_status[k], link=str(k))
    put("accel_amd_violation_samples_total", dev.accumulation_counter)
    for k, reason in enumerate(RESIDENCY):
        put("accel_amd_violation_residency_total", dev.residency[k], reason=reason, xcp="")
    for k, reason in enumerate(THROTTLE):
        put("accel_clock_throttle_active", 1 if dev.violation_active[k] else 0, reason=reason)
    if not partitioned(dev) or dev.partition_id == 0:  # the CPER ring's reader
        put("accel_amd_corrected_afids_decoded", 1 if corrected_decoded else 0)
    if processes:
        put("accel_processes", dev.proc_count)
        for k in range(dev.proc_count):
            pid = str(dev.proc_pid[k])
            put("accel_process_memory_bytes", dev.proc_vram[k], pid=pid)
            put("accel_amd_process_compute_units", dev.proc_cu[k], pid=pid)
    if slow:
        put("accel_amd_board_info", 1, part_number=PART_NUMBER)
        for k, kind in enumerate(("corrected", "uncorrected", "deferred")):
            put("accel_ecc_errors_total", dev.ecc_total[k], type=kind, counter="")
        for bit, block in enumerate(BLOCKS):
            if (dev.ecc_enabled >> bit) & 1:
                for k, kind in enumerate(("correctable", "uncorrectable", "deferred")):
                    metric = f"accel_amd_ecc_{kind}_errors_total"
                    put(metric, dev.ecc_block[bit][k], block=block)
        put("accel_amd_partition_id", dev.partition_id)
        put("accel_amd_power_cap_watts", dev.power_cap_min_uw / 1e6, bound="min")
        put("accel_amd_power_cap_watts", dev.power_cap_max_uw / 1e6, bound="max")
        put("accel_amd_power_cap_watts", dev.power_cap_default_uw / 1e6, bound="default")
        for t, sensor in enumerate(TEMPS):
            for k, limit in enumerate(TEMP_LIMITS):
                if not (dev.temp_unsupported >> t) & 1 and dev.temp_limit[t][k]:
                    put(
                        "accel_amd_temperature_limit_celsius",
                        dev.temp_limit[t][k],
                        sensor=sensor,
                        limit=limit,
                    )
        if not dev.bad_page_unsupported and (not partitioned(dev) or dev.partition_id == 0):
            put("accel_retired_pages", dev.bad_pages[0], cause="")
            put("accel_retired_pages_pending", 1 if dev.bad_pages[1] else 0)
            put("accel_amd_bad_pages", dev.bad_pages[1], status="pending")
            put("accel_amd_bad_pages", dev.bad_pages[2], status="unreservable")
            if dev.bad_page_threshold != U32_NA:
                put("accel_amd_bad_page_threshold", dev.bad_page_threshold)
    return out
