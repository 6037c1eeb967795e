"""What the fabric source counts, kept in ``<state_dir>/fabric.json`` across restarts.

Per port its :class:`~exporter.fabric.ports.PortMemory` (flaps, outages, the
``link_downed`` baseline, the state at the last poll, an outage under way); per NIC
whether it was present at the last poll, how often it disappeared, how it was
described and which GPUs it served (so a NIC that is gone still says whose path
it was). Written through :mod:`exporter.state_file` (atomic, fsynced, one writing
process) whenever it changed, which is rarely: a flap, an outage's end, a NIC
coming or going, a counter moving.

A daemon restart mid-outage goes on timing it from the poll that saw the port go
down; downs while the daemon was away show as ``link_downed`` growth against the
persisted baseline, or as a port found down that was up. The file records the
kernel's boot id: after a reboot the counter baselines and the last states are
dropped (the counters restarted at 0) while the counts carry on.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from exporter import log
from exporter.fabric.ports import PortMemory
from exporter.state_book import SavedBook
from exporter.state_file import boot_id

FILE_NAME = "fabric.json"
FORMAT = 1


@dataclass
class NicMemory:
    """What the fabric source remembers of one NIC."""

    present: bool = True
    disappearances: int = 0
    # Wall clock of the poll that found it gone (0: present).
    missing_since: float = 0.0
    # The labels of accel_nic_info as last read (kept while it is missing).
    pci_bus_id: str = ""
    link_layer: str = ""
    node_guid: str = ""
    firmware_version: str = ""
    numa_node: str = ""
    pcie_switch: str = ""
    # GPU pci_bus_id -> how it was joined (pcie_switch | numa_node), as last computed.
    served: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_wire(cls, raw: Any) -> NicMemory:
        """The memory a state file holds; ValueError when it is not one."""
        if not isinstance(raw, dict):
            raise ValueError("a NIC's memory is not an object")
        out = cls()
        for key in ("pci_bus_id", "link_layer", "node_guid", "firmware_version", "numa_node"):
            value = raw.get(key, "")
            if not isinstance(value, str):
                raise ValueError(f"{key} is {value!r}")
            setattr(out, key, value)
        switch = raw.get("pcie_switch", "")
        present, count, served = (
            raw.get("present", True),
            raw.get("disappearances", 0),
            raw.get("served", {}),
        )
        if not isinstance(switch, str) or not isinstance(present, bool):
            raise ValueError("pcie_switch or present of the wrong type")
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise ValueError(f"disappearances is {count!r}")
        if not isinstance(served, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in served.items()
        ):
            raise ValueError("served is not an object of strings")
        since = raw.get("missing_since", 0.0)
        if not isinstance(since, int | float) or isinstance(since, bool):
            raise ValueError(f"missing_since is {since!r}")
        out.pcie_switch, out.present, out.disappearances, out.served = (
            switch,
            present,
            count,
            dict(served),
        )
        out.missing_since = float(since)
        return out


class FabricLedger(SavedBook):
    """The fabric source's memory, in memory and (with a directory) on disk."""

    WHAT = "fabric state file"
    UNUSABLE = "fabric state file unusable: flap, outage and missing-NIC counts start again"

    def __init__(self, state_dir: str = "", *, boot: str | None = None) -> None:
        super().__init__(log.get(source="fabric"))
        self.boot = boot_id() if boot is None else boot
        self.ports: dict[str, PortMemory] = {}
        self.nics: dict[str, NicMemory] = {}
        if state_dir:
            self.path = Path(state_dir) / FILE_NAME
            self._load()

    def close(self) -> None:
        """Writes no more: the file's lock goes with the last claim in this process."""
        if self._file is not None:
            self._file.release(self)

    def reclaim(self) -> None:
        """Write again after :meth:`close` (a reload's new source took this memory over)."""
        if self._file is not None:
            self._file.claim(self)

    def rename(self, old: str, new: str) -> None:
        """NIC ``old`` is now called ``new`` (RDMA names follow probe order): move its memory."""
        self.nics[new] = self.nics.pop(old)
        for key in [k for k in self.ports if k.startswith(old + "/")]:
            self.ports[new + key[len(old) :]] = self.ports.pop(key)

    def port(self, key: str) -> PortMemory:
        """The memory of port ``key`` (``mlx5_0/1``), made on first sight."""
        found = self.ports.get(key)
        if found is None:
            found = self.ports[key] = PortMemory()
        return found

    def _load(self) -> None:
        assert self._file is not None
        raw = self._found(self._file.read())
        if raw is None:
            return
        if raw.get("format") != FORMAT or not isinstance(raw.get("ports"), dict):
            self._unusable("corrupt", "not a fabric state file of a known format")
            return
        nics = raw.get("nics", {})
        if not isinstance(nics, dict):
            self._unusable("corrupt", "nics is not an object")
            return
        same_boot = bool(self.boot) and raw.get("boot_id") == self.boot
        for key, item in raw["ports"].items():
            try:
                memory = PortMemory.from_wire(item)
            except ValueError as exc:
                self._log.warning("fabric state of a port ignored", port=key, detail=str(exc))
                continue
            if not same_boot:
                memory.new_boot()
            self.ports[str(key)] = memory
        for name, item in nics.items():
            try:
                self.nics[str(name)] = NicMemory.from_wire(item)
            except ValueError as exc:
                self._log.warning("fabric state of a NIC ignored", nic=name, detail=str(exc))
        self._written = self._text()

    def _text(self) -> str:
        return json.dumps(
            {
                "format": FORMAT,
                "boot_id": self.boot,
                "ports": {key: m.to_wire() for key, m in self.ports.items()},
                "nics": {name: asdict(m) for name, m in self.nics.items()},
            },
            sort_keys=True,
        )

    def describe(self) -> str:
        """One line for /status: whether the counts survive a daemon restart, and if not why."""
        if self.path is None:
            return "not persisted: no state_dir (a daemon restart starts the counts again)"
        if self._problem:
            return f"not persisted: {self._problem} ({self.path})"
        if self.load_problem:
            return (
                f"persisted to {self.path}; the file found at start was ignored "
                f"({self.load_problem})"
            )
        return f"persisted to {self.path}"
