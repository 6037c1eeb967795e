"""Google TPUs: chips from the host, runtime metrics from libtpu's gRPC service (in a worker).

``bootstrap`` counts the chips from sysfs (:mod:`exporter.host.tpu_chips`),
so a chip without a workload is still listed and up. ``poll`` asks every
configured address (one per workload process: libtpu serves
``localhost:8431``, then the ports of ``TPU_RUNTIME_METRICS_PORTS``) for each
metric at once, each call with its own deadline, and merges the answers by
runtime device id. A service that is not there (``UNAVAILABLE``) is the
normal state of a chip nobody uses: that address is reported not attached,
without a reason. A hung, failing or malformed service costs only its own
series, with the reason in the reply's ``runtimes`` list (see
:mod:`exporter.sources.tpu`). The merged values become each chip's readings in
the device loop every backend shares (:func:`exporter.backends.contract.poll_devices`):
a chip gone from the host is down (``device_missing``) and shows none.

A failed field is a per-device metric (the gauges) that an attached runtime
failed to give: a status other than "no workload" (``UNAVAILABLE``) or "not
offered" (``NOT_FOUND``, ``UNIMPLEMENTED``), or a reply that does not parse. It
is counted, by reason, on each chip that runtime serves (the chips its
per-device answers named, this poll or, when it answered none, the last time
it did) as ``accel_field_errors_total{source="tpu"}``; the other metrics and
runtimes are still served. The latency distributions are the runtime's, not a
chip's: a failed one is the runtime's reason only.

gRPC does not survive ``fork``; the worker is a fresh interpreter, and grpc is
imported only here, in it.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from exporter import log
from exporter.backend_api import crumb
from exporter.backend_api.tpu import DISTRIBUTIONS, MAX_POINTS
from exporter.backend_api.wire import Rows, put
from exporter.backends.base import BackendUnavailable
from exporter.backends.contract import DeviceGone, count, expect_poll, poll_devices
from exporter.backends.tpu_distributions import fold, label_of
from exporter.backends.tpu_metrics import BadMetric, device_values
from exporter.catalog.tpu import LATENCY_BUCKETS
from exporter.family_names import (
    ACCEL_MEMORY_BANDWIDTH_UTILIZATION_RATIO,
    ACCEL_MEMORY_TOTAL_BYTES,
    ACCEL_MEMORY_USED_BYTES,
    ACCEL_UTILIZATION_RATIO,
)
from exporter.host.tpu_chips import Chip, present, scan

SOURCE = "tpu"
DEFAULT_ADDRESS = "localhost:8431"
HBM_TOTAL = "tpu.runtime.hbm.memory.total.bytes"
HBM_USAGE = "tpu.runtime.hbm.memory.usage.bytes"
DUTY_CYCLE = "tpu.runtime.tensorcore.dutycycle.percent"
HBM_BANDWIDTH = "tpu.runtime.hbm.utilization.percent"
GAUGES = (HBM_TOTAL, HBM_USAGE, DUTY_CYCLE, HBM_BANDWIDTH)
# Gauges keyed by runtime device on every chip (the duty cycle is per chip on some).
PER_DEVICE = (HBM_TOTAL, HBM_USAGE, HBM_BANDWIDTH)
METRICS = (*GAUGES, *DISTRIBUTIONS)
# A chip's HBM is at most 192 GiB today; a byte count past 1 PiB is a broken reply.
MAX_BYTES = float(2**50)
# Chips whose duty cycle the service reports once per chip, not per runtime device.
DUTY_PER_CHIP = frozenset({"TPU v2", "TPU v3"})
METHOD = "/tpu.monitoring.runtime.RuntimeMetricService/GetRuntimeMetric"
# Codes that mean "no workload serves metrics here": the idle state, not a fault.
IDLE_CODES = frozenset({"UNAVAILABLE"})
# A metric this libtpu does not offer: absent, not a fault.
ABSENT_CODES = frozenset({"NOT_FOUND", "UNIMPLEMENTED"})
_REASONS = {"DEADLINE_EXCEEDED": "timeout", "RESOURCE_EXHAUSTED": "message_too_large"}


@dataclass
class Runtime:
    """What one address answered this poll."""

    address: str
    attached: bool = False
    reason: str = ""
    detail: str = ""

    def fail(self, reason: str, detail: str) -> None:
        """Keep the first fault of the poll (the others usually share its cause)."""
        if not self.reason:
            self.reason, self.detail = reason, detail[:500]


@dataclass
class Served:
    """One chip this worker serves, as the device loop sees it."""

    index: int  # the chip's place in the host's order (libtpu's)
    chip: Chip
    uuid: str
    down: str = ""
    # Failed metric reads of the runtime serving it, by reason, since the worker started.
    errors: dict[str, int] = field(default_factory=dict)

    @property
    def device(self) -> str:
        """The ``device`` label."""
        return str(self.index)


class TpuBackend:
    """The TPU backend (runs in the worker child)."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.host_root = str(config.get("host_root") or "/")
        self.addresses = [str(a) for a in config.get("addresses") or [DEFAULT_ADDRESS]]
        self.call_timeout = float(config.get("call_timeout") or 2.0)
        self.max_message_bytes = int(config.get("max_message_bytes") or 4 * 1024 * 1024)
        self.chips: list[Served] = []
        self.per_chip = 1
        self.runtime_devices = 0
        self._grpc: Any = None
        self._pb: Any = None
        self._calls: dict[str, Any] = {}
        self._channels: list[Any] = []
        self._states: dict[str, tuple[bool, str]] = {}
        # The chips (host indexes) each address's per-device answers named when it last gave any.
        self._serves: dict[str, set[int]] = {}
        self._log = log.get(source=SOURCE)

    # -- bootstrap -----------------------------------------------------------

    def bootstrap(self) -> dict[str, Any]:
        """Count the chips, open one channel per address, return the inventory."""
        found = scan(self.host_root)
        if not found:
            raise BackendUnavailable(
                "no_devices",
                f"no TPU chip under {self.host_root} (sys/bus/pci/devices with vendor 0x1ae0,"
                " or dev/accelN)",
            )
        self.per_chip = found[0].devices_per_chip
        self.runtime_devices = self.per_chip * len(found)
        devices = []
        for index in crumb.wanted(self.config, len(found)):
            chip = found[index]
            crumb.device(index)
            crumb.identity(chip.pci_bus_id or chip.node)
            self.chips.append(Served(index, chip, uuid_of(chip)))
            devices.append(
                {
                    "device": str(index),
                    "uuid": uuid_of(chip),
                    "index": index,
                    "info": {"model": chip.model, "pci_bus_id": chip.pci_bus_id},
                }
            )
        crumb.clear()
        self._connect()
        self._log.info(
            "tpu ready", chips=len(found), served=len(self.chips), addresses=self.addresses
        )
        return {"vendor": "google", "devices": devices}

    def _connect(self) -> None:
        try:
            import grpc

            from exporter.third_party.tpu_metric_service import tpu_metric_service_pb2 as pb
        except Exception as exc:  # ImportError, or protobuf's VersionError
            raise BackendUnavailable(
                "binding_missing",
                "install accel-exporter[tpu] for TPU runtime metrics"
                f" ({type(exc).__name__}: {exc})",
            ) from None
        self._grpc, self._pb = grpc, pb
        options = [
            ("grpc.max_receive_message_length", self.max_message_bytes),
            ("grpc.enable_retries", 0),
            # A workload that starts after hours of idling must be seen within a poll or
            # two, not after gRPC's default reconnect backoff (up to 120 s).
            ("grpc.initial_reconnect_backoff_ms", 500),
            ("grpc.min_reconnect_backoff_ms", 500),
            ("grpc.max_reconnect_backoff_ms", 5000),
        ]
        for address in self.addresses:
            # Local credentials: what libtpu's own client uses; they also accept a
            # plain loopback server.
            channel = grpc.secure_channel(address, grpc.local_channel_credentials(), options)
            self._channels.append(channel)
            self._calls[address] = channel.unary_unary(
                METHOD,
                request_serializer=pb.MetricRequest.SerializeToString,
                response_deserializer=pb.MetricResponse.FromString,
            )

    # -- requests --------------------------------------------------------------

    def handle(self, op: str, args: dict[str, Any]) -> dict[str, Any]:
        """Answer ``poll``."""
        expect_poll(op, SOURCE)
        crumb.clear()  # the calls below concern addresses, not one chip
        pending = {
            (address, name): self._calls[address].future(
                self._pb.MetricRequest(metric_name=name), timeout=self.call_timeout
            )
            for address in self.addresses
            for name in METRICS
        }
        runtimes = {address: Runtime(address) for address in self.addresses}
        values: dict[str, dict[int, float]] = defaultdict(dict)
        histograms: list[dict[str, Any]] = []
        # Per address: the reasons of its failed gauge reads, and the chips it served.
        failed: dict[str, list[str]] = defaultdict(list)
        serves: dict[str, set[int]] = {}
        for (address, name), future in pending.items():
            runtime = runtimes[address]
            try:
                response = future.result()
            except self._grpc.RpcError as exc:
                code = getattr(exc.code(), "name", "UNKNOWN")
                if code in ABSENT_CODES:
                    runtime.attached = True  # the service is there, without this metric
                elif code not in IDLE_CODES:
                    reason = self._reason(code, exc.details() or "")
                    runtime.fail(reason, exc.details() or code)
                    if name in GAUGES:
                        failed[address].append(reason)
                continue
            runtime.attached = True
            if name in DISTRIBUTIONS:
                try:
                    histograms += _histograms(response, address, DISTRIBUTIONS[name])
                except BadMetric as exc:
                    runtime.fail("malformed_reply", f"{name}: {exc}")
                continue
            try:
                got = device_values(response, name, self.runtime_devices, self._upper(name))
            except BadMetric as exc:
                runtime.fail("malformed_reply", f"{name}: {exc}")
                failed[address].append("malformed_reply")
                continue
            if name in PER_DEVICE:
                serves.setdefault(address, set()).update(d // self.per_chip for d in got)
            merged = values[name]
            for device, value in got.items():
                if device in merged:
                    runtime.fail("conflict", f"{name}: device {device} served by two addresses")
                else:
                    merged[device] = value
        self._note(runtimes.values())
        self._serves.update(serves)
        self._count_failed(failed)

        def read(served: Served, position: int, rows: Rows, _slow: Rows | None) -> None:
            if not present(self.host_root, served.chip):
                raise DeviceGone("device_missing", f"{served.chip.node} is gone from the host")
            self._rows(served, position, values, rows)

        reply = poll_devices(self.chips, False, read, self._log, SOURCE)
        reply["runtimes"] = [vars(r) for r in runtimes.values()]
        reply["histograms"] = histograms
        return reply

    def _count_failed(self, failed: dict[str, list[str]]) -> None:
        """Count each failed gauge read on the chips its address serves (see the module doc)."""
        by_index = {served.index: served for served in self.chips}
        for address, reasons in failed.items():
            for index in sorted(self._serves.get(address, ())):
                served = by_index.get(index)
                if served is not None:
                    for reason in reasons:
                        count(served.errors, reason)

    @staticmethod
    def _upper(name: str) -> float:
        return 100.0 if name.endswith(".percent") else MAX_BYTES

    @staticmethod
    def _reason(code: str, details: str) -> str:
        if code == "INTERNAL" and "deserializ" in details.lower():
            return "malformed_reply"  # bytes that do not decode as a MetricResponse
        return _REASONS.get(code, code.lower())

    def _rows(
        self, served: Served, position: int, values: dict[str, dict[int, float]], rows: Rows
    ) -> None:
        """One chip's readings from the runtime devices it has (all of them, or none)."""
        per, index, chip = self.per_chip, served.index, served.chip
        ids = range(index * per, index * per + per)
        prefix = (position,)
        for name, metric, combine in (
            (HBM_TOTAL, ACCEL_MEMORY_TOTAL_BYTES, math.fsum),
            (HBM_USAGE, ACCEL_MEMORY_USED_BYTES, math.fsum),
            (HBM_BANDWIDTH, ACCEL_MEMORY_BANDWIDTH_UTILIZATION_RATIO, _mean_ratio),
        ):
            got = [values[name][d] for d in ids if d in values[name]]
            if len(got) == per:  # part of a chip is not the chip
                put(rows, metric, prefix, combine(got))
        duty = values[DUTY_CYCLE]
        if chip.model in DUTY_PER_CHIP:
            if index in duty:
                put(rows, ACCEL_UTILIZATION_RATIO, prefix, duty[index] / 100.0)
        else:
            got = [duty[d] for d in ids if d in duty]
            if len(got) == per:
                put(rows, ACCEL_UTILIZATION_RATIO, prefix, _mean_ratio(got))

    def _note(self, runtimes: Any) -> None:
        """Log each address's state when it changes, not on every poll."""
        for r in runtimes:
            state = (r.attached, r.reason)
            if self._states.get(r.address) == state:
                continue
            self._states[r.address] = state
            if r.reason:
                self._log.warning(
                    "tpu runtime failing", address=r.address, reason=r.reason, detail=r.detail
                )
            else:
                self._log.info("tpu runtime", address=r.address, attached=r.attached)

    def close(self) -> None:
        """Close the channels."""
        for channel in self._channels:
            channel.close()
        self._channels = []


def _histograms(response: Any, address: str, kind: str) -> list[dict[str, Any]]:
    """One histogram per buffer size of a distribution metric; BadMetric when malformed."""
    points = response.metric.metrics
    if len(points) > MAX_POINTS:
        raise BadMetric(f"{len(points)} distributions, more than {MAX_POINTS}")
    out = []
    seen: set[str] = set()
    for point in points:
        if point.WhichOneof("measure") != "distribution":
            raise BadMetric(f"a point holds a {point.WhichOneof('measure')}, not a distribution")
        size = label_of(point.attribute, "buffer-size")
        if size in seen:
            raise BadMetric(f"buffer size {size!r} appears twice")
        seen.add(size)
        counts, total = fold(point.distribution, 1e-6, LATENCY_BUCKETS)
        out.append(
            {
                "address": address,
                "kind": kind,
                "buffer_size": size,
                "counts": list(counts),
                "sum": total,
            }
        )
    return out


def uuid_of(chip: Chip) -> str:
    """A TPU has no uuid or serial the host can read: its PCI address stands for one."""
    return f"tpu-{chip.pci_bus_id or chip.node.rsplit('/', 1)[-1]}"


def _mean_ratio(percents: list[float]) -> float:
    """Percentages of a chip's devices -> the chip's share, 0..1."""
    return math.fsum(percents) / len(percents) / 100.0
