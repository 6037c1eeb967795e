"""The TPU source: a device worker (exporter.backends.tpu) plus the state of each runtime address.

Besides the device shapes of :mod:`exporter.sources.device`, the worker's poll
reply carries ``"runtimes": [{"address": str, "attached": bool, "reason": str,
"detail": str}]``, one per configured address. They become
``accel_tpu_runtime_attached{address}`` and the ``runtimes`` entry of /status;
a failing address (hung, erroring, malformed) is a reason there, not a source
failure: the chips are still counted and up.

On a host without TPU chips (most nodes of a mixed cluster) no worker is
started at all: the parent's own sysfs scan says so, and is repeated at each
poll until chips appear.
"""

from __future__ import annotations

import itertools
from typing import Any

from exporter.catalog.tpu import LATENCY_BUCKETS
from exporter.config.devices import TpuSourceConfig
from exporter.config.health import HealthConfig
from exporter.family_names import ACCEL_TPU_RUNTIME_ATTACHED, ACCEL_TPU_TRANSFER_LATENCY_SECONDS
from exporter.host.tpu_chips import scan
from exporter.model import HistogramValue, Reading, is_number
from exporter.sources.device import DeviceSource, ShapeError, call_budget

# Share of the worker's part of the poll deadline one gRPC call may take: all the
# calls run at once, and the reply must still be built and sent in time.
RPC_SHARE = 0.6


class TpuSource(DeviceSource):
    """Polls the TPU worker; exports each runtime address's state."""

    def __init__(
        self, name: str, config: TpuSourceConfig, health: HealthConfig | None = None
    ) -> None:
        super().__init__(
            name,
            config,
            "exporter.backends.tpu:TpuBackend",
            backend_config={
                "addresses": list(config.addresses),
                "host_root": config.host_root,
                "max_message_bytes": config.max_message_bytes,
                "call_timeout": call_budget(config.poll_timeout) * RPC_SHARE,
            },
            vendor="google",
            health=health,
        )
        self.addresses = tuple(config.addresses)
        self.host_root = config.host_root
        self._runtimes: list[dict[str, Any]] = []

    def _cannot_start(self) -> tuple[str, str] | None:
        """No TPU chip on the host: no worker (a chip is looked for again each poll)."""
        if scan(self.host_root):
            return super()._cannot_start()
        return "no_devices", f"no TPU chip under {self.host_root} (PCI vendor 0x1ae0, dev/accelN)"

    def status(self) -> dict[str, Any]:
        """The device worker's state plus each runtime address's."""
        return {**super().status(), "runtimes": self._runtimes}

    def _check_reply(
        self, reply: Any, slow: bool
    ) -> tuple[dict[tuple[str, str], str], list[Reading]]:
        states, out = super()._check_reply(reply, slow)
        runtimes = reply.get("runtimes")
        if not isinstance(runtimes, list) or len(runtimes) != len(self.addresses):
            raise ShapeError(f"poll reply needs one runtime per address ({len(self.addresses)})")
        checked = []
        for address, item in zip(self.addresses, runtimes, strict=True):
            if (
                not isinstance(item, dict)
                or item.get("address") != address
                or not isinstance(item.get("attached"), bool)
                or not isinstance(item.get("reason", ""), str)
                or not isinstance(item.get("detail", ""), str)
            ):
                raise ShapeError(f"runtime entry for {address} is malformed")
            entry = {
                "address": address,
                "attached": item["attached"],
                "reason": item.get("reason", ""),
                "detail": item.get("detail", "")[:500],
            }
            checked.append(entry)
            out.append(
                Reading(ACCEL_TPU_RUNTIME_ATTACHED, (address,), 1.0 if item["attached"] else 0.0)
            )
        self._runtimes = checked
        out += self._histograms(reply.get("histograms", []))
        return states, out

    def _histograms(self, raw: Any) -> list[Reading]:
        """``accel_tpu_transfer_latency_seconds`` from the reply, every field checked."""
        # Imported here: the reply's tables are needed once a TPU worker answers,
        # not on every host without TPU chips (no worker starts there).
        from exporter.backend_api.tpu import DISTRIBUTIONS, MAX_LABEL, MAX_POINTS

        kinds = frozenset(DISTRIBUTIONS.values())
        limit = len(self.addresses) * len(kinds) * MAX_POINTS
        if not isinstance(raw, list) or len(raw) > limit:
            raise ShapeError(f"histograms is not a list of at most {limit}")
        width = len(LATENCY_BUCKETS) + 1
        out = []
        for item in raw:
            if not isinstance(item, dict):
                raise ShapeError("a histogram is not an object")
            counts, total = item.get("counts"), item.get("sum")
            labels = (item.get("address"), item.get("kind"), item.get("buffer_size"))
            if (
                labels[0] not in self.addresses
                or labels[1] not in kinds
                or not isinstance(labels[2], str)
                or len(labels[2]) > MAX_LABEL
                or not isinstance(counts, list)
                or len(counts) != width
                or any(type(c) is not int or c < 0 for c in counts)
                or any(a > b for a, b in itertools.pairwise(counts))
                or not isinstance(total, (int, float))
                or not is_number(total)
                or total < 0
            ):
                raise ShapeError(f"histogram {labels} is malformed")
            value = HistogramValue(LATENCY_BUCKETS, tuple(counts), float(total))
            out.append(Reading(ACCEL_TPU_TRANSFER_LATENCY_SECONDS, labels, value))  # type: ignore[arg-type]
        return out
