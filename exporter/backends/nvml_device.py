"""Reading one NVIDIA GPU through pynvml: fast fields, slow fields, processes, MIG.

Every library call goes through :meth:`Gpu.call`, which turns NVML errors into
one of three outcomes: the field is absent (not supported on this SKU or not
permitted: omitted, never exported as a number), the field failed (omitted and
counted by reason), or the whole device is gone (:class:`DeviceGone`, e.g.
GPU_IS_LOST), which ends the device's poll at once so a lost GPU costs one call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from exporter import log
from exporter.backends import nvml_domains, nvml_gpm, nvml_reliability
from exporter.backends import nvml_support as nv
from exporter.backends.base import InventoryChanged
from exporter.backends.binding import Binding
from exporter.backends.contract import Emitter, not_available
from exporter.backends.nvml_gpu import FieldPlan, Gpu, MigDevice
from exporter.backends.nvml_scalars import (
    FAST_SCALARS,
    FIELD_SPECS,
    MEMORY,
    MIG_MEMORY,
    OLDER,
    SLOW_SCALARS,
    BoundScalar,
    Scalar,
)
from exporter.family_names import (
    ACCEL_CLOCK_THROTTLE_ACTIVE,
    ACCEL_DECODER_UTILIZATION_RATIO,
    ACCEL_ECC_ERRORS_TOTAL,
    ACCEL_ENCODER_UTILIZATION_RATIO,
    ACCEL_FAN_SPEED_RATIO,
    ACCEL_MEMORY_BANDWIDTH_UTILIZATION_RATIO,
    ACCEL_MIG_DEVICE_INFO,
    ACCEL_NVLINK_UP,
    ACCEL_PROCESS_DECODER_UTILIZATION_RATIO,
    ACCEL_PROCESS_ENCODER_UTILIZATION_RATIO,
    ACCEL_PROCESS_INFO,
    ACCEL_PROCESS_MEMORY_BYTES,
    ACCEL_PROCESS_MEMORY_UTILIZATION_RATIO,
    ACCEL_PROCESS_SM_UTILIZATION_RATIO,
    ACCEL_PROCESSES,
    ACCEL_REMAPPED_ROWS,
    ACCEL_REMAPPED_ROWS_FAILURE,
    ACCEL_REMAPPED_ROWS_PENDING,
    ACCEL_RETIRED_PAGES,
    ACCEL_TEMPERATURE_CELSIUS,
    ACCEL_UTILIZATION_RATIO,
)


class DeviceReader:
    """Reads GPUs; remembers which API generation the driver speaks."""

    def __init__(self, nvml: Binding) -> None:
        self.nvml = nvml
        # Newer entry points first; older nvidia-ml-py releases or drivers lack them.
        self._memory_v2 = nvml.has("nvmlMemory_v2")
        self._memory_version = getattr(nvml, "nvmlMemory_v2", None)
        self._temperature_v = nvml.has("nvmlDeviceGetTemperatureV")
        self._event_reasons = nvml.has("nvmlDeviceGetCurrentClocksEventReasons")
        # (api, newer name, newer available, newer, older): drivers before the _v3
        # entry points list processes through _v2, with the same struct.
        self._process_lists = tuple(
            (
                api,
                f"nvmlDeviceGet{kind}RunningProcesses_v3",
                nvml.has(f"nvmlDeviceGet{kind}RunningProcesses_v3"),
                getattr(nvml, f"nvmlDeviceGet{kind}RunningProcesses_v3"),
                getattr(nvml, f"nvmlDeviceGet{kind}RunningProcesses_v2"),
            )
            # MPS clients are listed by their own PIDs only through the MPS entry point
            # (the compute list shows the MPS server): per-pod figures need them.
            for api, kind in (
                ("compute_processes", "Compute"),
                ("graphics_processes", "Graphics"),
                ("mps_processes", "MPSCompute"),
            )
        )
        self._has_gpm = all(
            nvml.has(name)
            for name in (
                "nvmlGpmQueryDeviceSupport",
                "nvmlGpmMigSampleGet",
                "c_nvmlGpmMetricsGet_t",
                "NVML_GPM_METRICS_GET_VERSION",
            )
        )
        self._tables = {"fast": self._bind(FAST_SCALARS), "slow": self._bind(SLOW_SCALARS)}
        self._gpm_full = nvml_gpm.GpmReader(nvml)
        self._reliability = nvml_reliability.ReliabilityReader(nvml)
        self._board = nvml_domains.BoardReader(nvml)

    def _bind(self, table: tuple[Scalar, ...]) -> list[BoundScalar]:
        return [(getattr(self.nvml, fn), *rest) for fn, *rest in table]

    def _scalars(self, gpu: Gpu, out: Emitter, table: str) -> None:
        """One call per row: the common shape, kept tight since it runs ~15 times a GPU."""
        plan = gpu.plans.get(table)
        if plan is None:  # the rows with this GPU's row prefixes, built once
            plan = gpu.plans[table] = [
                (fn, args, metric, out.prefix(extra) if extra else out.prefix(), mul, per, most)
                for fn, args, metric, extra, (mul, per), most in self._tables[table]
            ]
        handle = gpu.handle
        rows = out.rows
        error = self.nvml.NVMLError
        sentinels, absent = nv.SENTINELS, nv.ABSENT
        answered = 0
        for fn, args, metric, prefix, mul, per, most in plan:
            try:
                value = fn(handle, *args)
            except error as exc:
                code = int(exc.value)
                if code not in absent:
                    gpu.failure(fn.__name__, code, str(exc))
                continue
            answered += 1
            if value not in sentinels and value <= most:
                target = rows[metric]  # new_rows(): a new family gets its list
                target += prefix
                target.append(value * mul if per == 1 else value / per)
        gpu.ok += answered

    # -- fast ---------------------------------------------------------------

    def fast(self, gpu: Gpu, out: Emitter, processes: bool) -> None:
        """Utilization, memory, temperatures, power, clocks, PCIe, throttle, NVLink traffic."""
        n, h = self.nvml, gpu.handle
        util = gpu.call(n.nvmlDeviceGetUtilizationRates, h)
        if util is not None:
            busy, memory = nv.UTILIZATION.unpack(bytes(util))
            out.ratio(ACCEL_UTILIZATION_RATIO, busy)
            out.ratio(ACCEL_MEMORY_BANDWIDTH_UTILIZATION_RATIO, memory)
        enc = gpu.call(n.nvmlDeviceGetEncoderUtilization, h)
        if enc is not None:
            out.ratio(ACCEL_ENCODER_UTILIZATION_RATIO, enc[0])
        dec = gpu.call(n.nvmlDeviceGetDecoderUtilization, h)
        if dec is not None:
            out.ratio(ACCEL_DECODER_UTILIZATION_RATIO, dec[0])
        self._memory(gpu, h, out, MEMORY)
        out.add(ACCEL_TEMPERATURE_CELSIUS, self._temperature(gpu), "gpu")
        self._scalars(gpu, out, "fast")
        self._fans(gpu, h, out)
        self._throttle(gpu, h, out)
        self._field_values(gpu, h, out)
        self._processes(gpu, h, out, processes)
        self._mig_fast(gpu, out)
        self._gpm_full.read(gpu, out)
        self._reliability.fast(gpu, out)

    def _newer(
        self,
        gpu: Gpu,
        api: str,
        name: str,
        available: bool,
        fn: Callable[..., Any],
        *args: Any,
        **kwargs: Any,
    ) -> Any:
        """The value of a newer entry point, or OLDER when this GPU must use the older one.

        The newer call can refuse a GPU the older one still serves: a driver that
        lacks it or says NOT_SUPPORTED (mocks, vGPU, older branches), a struct
        version it does not know, an argument it rejects. That GPU then uses the
        older entry point, in this poll and every later one. Any other error is
        the field's failure (None); a fatal one is DeviceGone.
        """
        if not available or api in gpu.legacy:
            return OLDER
        try:
            value = fn(*args, **kwargs)
        except self.nvml.NVMLError as exc:
            code = int(exc.value)
            if code not in nv.DOWNGRADE:
                return gpu.failure(name, code, str(exc))
            gpu.legacy.add(api)
            log.get(source="nvml").info(
                "using the older entry point",
                device=gpu.index,
                call=name,
                reason=nv.reason_of(code),
            )
            return OLDER
        gpu.ok += 1
        return value

    def _memory(
        self,
        gpu: Gpu,
        handle: Any,
        out: Emitter,
        families: tuple[str, str, str, str],
        gpu_instance: str = "",
    ) -> None:
        """Total, used, free (and reserved, from memory v2) of a GPU or MIG device."""
        n = self.nvml
        reserved: int | None = None
        # v2 separates the driver's reservation from "used"; older drivers lack it.
        mem = self._newer(
            gpu,
            "mig_memory" if gpu_instance else "memory",
            "nvmlDeviceGetMemoryInfo_v2",
            self._memory_v2,
            n.nvmlDeviceGetMemoryInfo,
            handle,
            version=self._memory_version,
        )
        if mem is OLDER:
            mem = gpu.call(n.nvmlDeviceGetMemoryInfo, handle)
            if mem is None:
                return
            total, free, used = nv.MEMORY_V1.unpack(bytes(mem))
        elif mem is None:
            return
        else:
            _version, total, reserved, free, used = nv.MEMORY_V2.unpack(bytes(mem))
        extra = (gpu_instance,) if gpu_instance else ()
        total_name, used_name, free_name, reserved_name = families
        out.add(total_name, total, *extra)
        out.add(used_name, used, *extra)
        out.add(free_name, free, *extra)
        if reserved_name:
            out.add(reserved_name, reserved, *extra)

    def _temperature(self, gpu: Gpu) -> float | None:
        n, h = self.nvml, gpu.handle
        value = self._newer(
            gpu,
            "temperature",
            "nvmlDeviceGetTemperatureV",
            self._temperature_v,
            n.nvmlDeviceGetTemperatureV,
            h,
            0,
        )
        if value is OLDER:
            value = gpu.call(n.nvmlDeviceGetTemperature, h, 0)
        return value  # type: ignore[no-any-return]

    def _fans(self, gpu: Gpu, handle: Any, out: Emitter) -> None:
        n = self.nvml
        count = gpu.call(n.nvmlDeviceGetNumFans, handle)
        for fan in range(min(count or 0, 16)):
            out.ratio(
                ACCEL_FAN_SPEED_RATIO, gpu.call(n.nvmlDeviceGetFanSpeed_v2, handle, fan), str(fan)
            )

    def _throttle(self, gpu: Gpu, handle: Any, out: Emitter) -> None:
        n = self.nvml
        reasons = self._newer(
            gpu,
            "throttle",
            "nvmlDeviceGetCurrentClocksEventReasons",
            self._event_reasons,
            n.nvmlDeviceGetCurrentClocksEventReasons,
            handle,
        )
        if reasons is OLDER:
            reasons = gpu.call(n.nvmlDeviceGetCurrentClocksThrottleReasons, handle)
        if reasons is None or not_available(reasons):
            return
        plan = gpu.plans.get("throttle")
        if plan is None:
            plan = gpu.plans["throttle"] = [
                (bit, out.prefix(name)) for bit, name in nv.THROTTLE_REASONS
            ]
        target = out.rows[ACCEL_CLOCK_THROTTLE_ACTIVE]
        for bit, prefix in plan:
            target += prefix
            target.append(1 if reasons & bit else 0)

    def _field_plan(self, gpu: Gpu, out: Emitter) -> FieldPlan:
        """The field-value request of a GPU and where each answer goes (per NVLink layout)."""
        if gpu.field_plan is None or gpu.field_plan.links != gpu.active_links:
            wanted: list[tuple[int, int] | int] = []
            runs: list[tuple[str, int, int, int, int, list[tuple[Any, ...]]]] = []
            for fid, (metric, extra, (mul, per)) in FIELD_SPECS.items():
                first = len(wanted)
                if extra:  # one entry per GPU
                    wanted.append(fid)
                    prefixes = [out.prefix(extra)]
                else:  # one entry per NVLink link, the link in scopeId
                    wanted += [(fid, link) for link in gpu.active_links]
                    prefixes = [out.prefix(str(link)) for link in gpu.active_links]
                if runs and runs[-1][:3] == (metric, mul, per):  # the violation reasons
                    first, prefixes = runs[-1][3], runs[-1][5] + prefixes
                    runs.pop()
                runs.append((metric, mul, per, first, len(wanted), prefixes))
            gpu.field_plan = FieldPlan(
                gpu.active_links, wanted, runs, no_errors=bytes(4 * len(wanted))
            )
        return gpu.field_plan

    def _field_values(self, gpu: Gpu, handle: Any, out: Emitter) -> None:
        plan = self._field_plan(gpu, out)
        try:
            values = self.nvml.nvmlDeviceGetFieldValues(handle, plan.wanted)
        except self.nvml.NVMLError as exc:
            gpu.failure("nvmlDeviceGetFieldValues", int(exc.value), str(exc))
            return
        kinds, codes, raws = nv.field_columns(values)
        numbers = cast("list[float]", raws)  # the raw bits become numbers in place
        if len(numbers) != len(plan.wanted):
            raise ValueError(f"{len(numbers)} field values for {len(plan.wanted)} asked")
        kind_bytes = kinds.tobytes()
        if kind_bytes != plan.kinds:
            plan.kinds = kind_bytes
            scale = [mul for _m, mul, _p, first, end, _x in plan.runs for _ in range(first, end)]
            plan.convert = tuple(
                (i, scale[i]) for i, kind in enumerate(kinds) if kind not in nv.RAW_KINDS
            )
        union_value = nv.union_value
        for i, mul in plan.convert:
            number = union_value(kinds[i], raws[i])
            # A NaN or infinite double is dropped like a sentinel, and so is a finite
            # one that scaling to base units would make infinite (the reply could
            # not be encoded). An integer times mul stays an exact integer.
            scaled = number * mul
            numbers[i] = number if scaled - scaled == 0 else -1
        answered = len(numbers)
        if codes.tobytes() != plan.no_errors:  # some entries failed: the rare case
            for i, code in enumerate(codes):
                if code:
                    answered -= 1
                    numbers[i] = -1
                    gpu.status(f"nvmlDeviceGetFieldValues {plan.wanted[i]}", code)
        rows, sentinels = out.rows, nv.SENTINELS
        for metric, mul, per, first, end, prefixes in plan.runs:
            target = rows[metric]
            for prefix, number in zip(prefixes, numbers[first:end], strict=True):
                if number not in sentinels:
                    target += prefix
                    target.append(number * mul if per == 1 else number / per)
        gpu.ok += answered

    def _processes(self, gpu: Gpu, handle: Any, out: Emitter, per_process: bool) -> None:
        n = self.nvml
        lists = []
        for api, name, available, newer, older in self._process_lists:
            found = self._newer(gpu, api, name, available, newer, handle)
            lists.append(gpu.call(older, handle) if found is OLDER else found)
        if all(found is None for found in lists):
            return
        memory: dict[int, int | None] = {}
        for proc in [proc for found in lists for proc in found or ()]:
            used = proc.usedGpuMemory
            known = memory.get(proc.pid)
            # A process can be in both lists; its memory is the same allocation.
            if used is None:
                used = known
            elif known is not None:
                used = max(used, known)
            memory[proc.pid] = used
        out.add(ACCEL_PROCESSES, len(memory))
        if not per_process:
            return
        for pid, used in sorted(memory.items()):
            out.add(ACCEL_PROCESS_MEMORY_BYTES, used, str(pid))
        try:
            samples = n.nvmlDeviceGetProcessUtilization(handle, gpu.last_process_sample)
            gpu.ok += 1
        except n.NVMLError as exc:
            samples = []
            # NOT_FOUND: no sample since lastSeenTimeStamp. SUCCESS (0): pynvml raises
            # it when the size query already succeeds, i.e. there is nothing to report.
            if int(exc.value) not in (nv.SUCCESS, nv.NOT_FOUND):
                gpu.fail("nvmlDeviceGetProcessUtilization", exc)
        latest: dict[int, Any] = {}
        for sample in samples:
            if sample.pid not in latest or sample.timeStamp > latest[sample.pid].timeStamp:
                latest[sample.pid] = sample
            gpu.last_process_sample = max(gpu.last_process_sample, int(sample.timeStamp))
        for pid, sample in sorted(latest.items()):
            label = str(pid)
            out.ratio(ACCEL_PROCESS_SM_UTILIZATION_RATIO, sample.smUtil, label)
            out.ratio(ACCEL_PROCESS_MEMORY_UTILIZATION_RATIO, sample.memUtil, label)
            out.ratio(ACCEL_PROCESS_ENCODER_UTILIZATION_RATIO, sample.encUtil, label)
            out.ratio(ACCEL_PROCESS_DECODER_UTILIZATION_RATIO, sample.decUtil, label)
        for pid in sorted(memory):
            name = gpu.call(n.nvmlSystemGetProcessName, pid)
            if name:  # NOT_FOUND: the process ended between the two calls
                out.add(ACCEL_PROCESS_INFO, 1, str(pid), nv.text(name))

    def _mig_fast(self, gpu: Gpu, out: Emitter) -> None:
        # Memory belongs to the GPU instance: every MIG device (compute instance)
        # of it reports the same, so one of them is read, labelled by instance.
        instances = {m.gpu_instance: m.handle for m in reversed(gpu.mig)}
        for gi, handle in sorted(instances.items()):
            self._memory(gpu, handle, out, MIG_MEMORY, str(gi))
        if gpu.gpm_supported:
            for gi in sorted(instances):
                nvml_gpm.mig_instance(self.nvml, gpu, gi, out)

    # -- slow ---------------------------------------------------------------

    def slow(self, gpu: Gpu, out: Emitter) -> None:
        """Max clocks and link, ECC, retired pages, remapped rows, NVLink state, the board, MIG."""
        n, h = self.nvml, gpu.handle
        self._scalars(gpu, out, "slow")
        for etype, tname in nv.ECC_TYPES:
            for counter, cname in nv.ECC_COUNTERS:
                out.add(
                    ACCEL_ECC_ERRORS_TOTAL,
                    gpu.call(n.nvmlDeviceGetTotalEccErrors, h, etype, counter),
                    tname,
                    cname,
                )
        for cause, name in nv.RETIREMENT_CAUSES:
            pages = gpu.call(n.nvmlDeviceGetRetiredPages, h, cause)
            if pages is not None:
                out.add(ACCEL_RETIRED_PAGES, len(pages), name)
        rows = gpu.call(n.nvmlDeviceGetRemappedRows, h)
        if rows is not None:
            out.add(ACCEL_REMAPPED_ROWS, rows[0], "corrected")
            out.add(ACCEL_REMAPPED_ROWS, rows[1], "uncorrected")
            out.add(ACCEL_REMAPPED_ROWS_PENDING, rows[2])
            out.add(ACCEL_REMAPPED_ROWS_FAILURE, rows[3])
        self._nvlinks(gpu, out)
        self._reliability.slow(gpu, out)
        self._board.slow(gpu, out)
        self._mig_layout(gpu, out)

    def _nvlinks(self, gpu: Gpu, out: Emitter) -> None:
        n, h = self.nvml, gpu.handle
        values = gpu.call(n.nvmlDeviceGetFieldValues, h, [nv.FI_NVLINK_LINK_COUNT])
        count = 0
        if values is not None:
            _fid, _scope, code, number = nv.field_entries(values)[0]
            if code:
                gpu.status("field 91", code)
            elif not not_available(number):
                count = int(number)
        active = []
        for link in range(min(count, 64)):
            state = gpu.call(n.nvmlDeviceGetNvLinkState, h, link)
            if state is None:
                continue
            out.add(ACCEL_NVLINK_UP, 1 if state else 0, str(link))
            if state:
                active.append(link)
        gpu.active_links = tuple(active)

    def _mig_layout(self, gpu: Gpu, out: Emitter) -> None:
        n, h = self.nvml, gpu.handle
        mode = gpu.call(n.nvmlDeviceGetMigMode, h)
        if mode is not None and nv.mig_mode(mode) != gpu.mig_mode:
            raise InventoryChanged(
                f"GPU {gpu.index}: MIG mode {nv.mig_mode(mode)}, "
                f"{gpu.mig_mode or 'unknown'} when the worker started"
            )
        found: list[MigDevice] = []
        if mode is not None and mode[0] == 1:
            slots = gpu.call(n.nvmlDeviceGetMaxMigDeviceCount, h) or 0
            for slot in range(slots):
                try:
                    mh = n.nvmlDeviceGetMigDeviceHandleByIndex(h, slot)
                except n.NVMLError as exc:
                    if int(exc.value) != nv.NOT_FOUND:  # NOT_FOUND: an empty slot
                        gpu.fail("nvmlDeviceGetMigDeviceHandleByIndex", exc)
                    continue
                gi = gpu.call(n.nvmlDeviceGetGpuInstanceId, mh)
                ci = gpu.call(n.nvmlDeviceGetComputeInstanceId, mh)
                uuid = gpu.call(n.nvmlDeviceGetUUID, mh)
                if gi is None or ci is None or uuid is None:
                    continue
                name = gpu.call(n.nvmlDeviceGetName, mh)
                profile = nv.mig_profile(nv.text(name)) if name is not None else ""
                found.append(MigDevice(int(gi), int(ci), nv.text(uuid), mh, profile))
            support = gpu.call(n.nvmlGpmQueryDeviceSupport, h) if self._has_gpm else None
            gpu.gpm_supported = bool(support is not None and support.isSupportedDevice)
        for mig in found:
            out.add(
                ACCEL_MIG_DEVICE_INFO,
                1,
                str(mig.gpu_instance),
                str(mig.compute_instance),
                mig.uuid,
                mig.profile,
            )
        kept = {m.gpu_instance for m in found}
        for gi in [gi for gi in gpu.gpm_samples if gi not in kept]:
            gpu.release_gpm(gpu.gpm_samples.pop(gi))
        gpu.mig = found
