"""The daemon's copy of each AMD GPU's CPER ledger (cursor and AFID counts), persisted.

The amdsmi worker reads a GPU's CPER ring from the cursor the daemon passes
and answers the advanced ledger; the daemon keeps the newest answer, so a new
worker goes on where the last reply left off (nothing read twice, nothing
lost). With a state directory, the ledgers are also written to a small JSON
file after every change (:mod:`exporter.state_file`: atomic, fsynced, one writing
process per file under its lock), so a restarted daemon neither re-reads the ring
from its start nor resets the AFID counters.

The ring lives in the driver's memory: after a reboot it starts empty and the
old cursors point past its end. The file therefore records the kernel's boot
id; on another boot the cursors start at 0 while the counts carry on (the new
ring's records are new errors). The records themselves are not used for
idempotence: the cursor says exactly which were read, and record ids are only
unique per boot.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from exporter import log, state_file
from exporter.state_book import SavedBook
from exporter.state_file import boot_id, write_reason

FILE_NAME = "amdsmi-cper.json"
FORMAT = 1
# Kept importable here (tests and older callers): the state file module owns them.
__all__ = ["FILE_NAME", "FORMAT", "LedgerStore", "boot_id", "store_for", "write_reason"]

# One store per state directory and process: a configuration reload builds new
# sources, and they must go on from the ledgers of the ones they replace.
_STORES: dict[str, LedgerStore] = {}
# Only the daemon writes the file; one-shot commands (once, probe, check --local)
# read it, so their counts go on from the daemon's, and leave it alone. The switch
# is the state file module's (the same dict): one switch for every state file.
_WRITES = state_file.WRITES
enable_writes = state_file.enable_writes


def store_for(state_dir: str) -> LedgerStore:
    """The process's store for ``state_dir`` ("" = in memory only)."""
    store = _STORES.get(state_dir)
    if store is None:
        store = _STORES[state_dir] = LedgerStore(state_dir)
    return store


class LedgerStore(SavedBook):
    """Ledgers by device uuid, in memory and (with a directory) on disk."""

    WHAT = "CPER state file"
    UNUSABLE = "CPER state file unreadable: CPER records are read again from the start"

    def __init__(self, state_dir: str = "", *, boot: str | None = None) -> None:
        super().__init__(log.get(source="amdsmi"))
        # The store lives as long as the process: so does its claim on the file's lock.
        self.path = Path(state_dir) / FILE_NAME if state_dir else None
        self.boot = boot_id() if boot is None else boot
        self.ledgers: dict[str, dict[str, Any]] = {}
        if self.path is not None:
            self._load(self.path)

    def _load(self, path: Path) -> None:
        raw = self._found(state_file.read_json(path))
        if raw is None:
            return
        devices = raw.get("devices")
        if not isinstance(devices, dict) or raw.get("format") != FORMAT:
            self._unusable("corrupt", "not a CPER state file of a known format")
            return
        # Imported here and in update(): the CPER tables are needed once a state file
        # exists or an amdsmi worker answers, not wherever the amdsmi source merely probes.
        from exporter.backend_api.cper import Ledger, LedgerError

        same_boot = bool(self.boot) and raw.get("boot_id") == self.boot
        for uuid, item in devices.items():
            try:
                ledger = Ledger.from_wire(item)
            except LedgerError as exc:
                self._log.warning("CPER state of a device ignored", uuid=uuid, detail=str(exc))
                continue
            if not same_boot:
                ledger.cursor = 0  # a new boot: a new ring
            self.ledgers[str(uuid)] = ledger.to_wire()
        self._written = self._text()

    def update(self, answer: Mapping[str, Any], known: set[str]) -> bool:
        """Adopt the worker's ledgers; True when one changed. ValueError on a bad shape."""
        from exporter.backend_api.cper import Ledger, LedgerError

        changed = False
        for uuid, item in answer.items():
            if uuid not in known:
                raise ValueError(f"ledger for {uuid!r}, which is not in the inventory")
            try:
                ledger = Ledger.from_wire(item).to_wire()
            except LedgerError as exc:
                raise ValueError(f"ledger for {uuid!r}: {exc}") from None
            if self.ledgers.get(uuid) != ledger:
                self.ledgers[uuid] = ledger
                changed = True
        return changed

    def _text(self) -> str:
        return json.dumps(
            {"format": FORMAT, "boot_id": self.boot, "devices": self.ledgers}, sort_keys=True
        )

    def describe(self) -> str:
        """One line for /status: whether the ledgers survive a daemon restart, and if not why."""
        if self.path is None:
            return "not persisted: no state_dir (a daemon restart counts all CPER records again)"
        if self._problem:
            return (
                f"not persisted: {self._problem} ({self.path}); a daemon restart counts "
                "all CPER records again"
            )
        if self.load_problem:
            return (
                f"persisted to {self.path}; the file found at start was ignored "
                f"({self.load_problem}), so CPER records were counted again from the start"
            )
        return f"persisted to {self.path}"
