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

from exporter import log, state_file
from exporter.fabric.ports import PortMemory
from exporter.state_file import StateFile, StateFileError, boot_id

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


class FabricLedger:
    """The fabric source's memory, in memory and (with a directory) on disk."""

    def __init__(self, state_dir: str = "", *, boot: str | None = None) -> None:
        self.boot = boot_id() if boot is None else boot
        self.ports: dict[str, PortMemory] = {}
        self.nics: dict[str, NicMemory] = {}
        self._log = log.get(source="fabric")
        self._file: StateFile | None = None
        self._written = ""
        self._problem = ""
        # Why the file found at start was not used ("": it was, or there was none), and
        # failed reads and writes by reason (accel_exporter_state_errors_total).
        self.load_problem = ""
        self.errors: dict[str, int] = {}
        if state_dir:
            self._file = state_file.shared(Path(state_dir) / FILE_NAME)
            self._file.claim(self)
            self._load()

    @property
    def path(self) -> Path | None:
        """The state file (None: memory only)."""
        return None if self._file is None else self._file.path

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

    def _count(self, reason: str) -> None:
        self.errors[reason] = self.errors.get(reason, 0) + 1

    def _unusable(self, reason: str, detail: str) -> None:
        self._count(reason)
        self.load_problem = f"{reason}: {detail}"
        self._log.warning(
            "fabric state file unusable: flap, outage and missing-NIC counts start again",
            path=str(self.path),
            reason=reason,
            detail=detail,
        )

    def _load(self) -> None:
        assert self._file is not None
        found = self._file.read()
        if found.reason == "missing":
            return
        if found.data is None:
            self._unusable(found.reason, found.detail)
            return
        raw = found.data
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

    def save(self, *, force: bool = False) -> None:
        """Write the file when it differs from what was written.

        A no-op without a directory, and outside the daemon unless ``force``.
        """
        if self._file is None or not (force or state_file.writes_enabled()):
            return
        text = self._text()
        if text == self._written:
            return
        try:
            self._file.write(text)
        except StateFileError as exc:
            # Counting goes on in memory; only a daemon restart would lose it.
            self._count(exc.reason)
            if not self._problem:
                self._log.warning(
                    "fabric state file not written",
                    path=str(self.path),
                    reason=exc.reason,
                    detail=exc.detail,
                )
            self._problem = f"{exc.reason}: {exc.detail}"
            return
        if self._problem:
            self._log.info("fabric state file written again", path=str(self.path))
        self._problem = ""
        self._written = text

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
