"""The bookkeeping every owner of one JSON state file shares (:mod:`exporter.state_file`).

An owner (the CPER ledgers, the fabric memory, a health keeper) holds a document
in memory and writes it through a shared :class:`~exporter.state_file.StateFile`
when it changed. What goes wrong with the file is counted by reason (``errors``,
``accel_exporter_state_errors_total``), said in /status (``load_problem``: why the
file found at start was not used; ``_problem``: why it is not persisted now) and
logged once, when it starts and when it ends: the document goes on in memory.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, ClassVar

from exporter import state_file
from exporter.state_file import ReadResult, StateFile, StateFileError


class StateBook:
    """Errors, problems and the text last written of one state file's owner.

    A subclass says what an unusable file at start costs (``UNUSABLE``, the whole
    warning).
    """

    UNUSABLE: ClassVar[str]

    def __init__(self, logger: Any) -> None:
        self._log = logger
        self._file: StateFile | None = None
        # The text last written or read: an unchanged document is not written again.
        self._written = ""
        # Why the document is not persisted now ("": it is).
        self._problem = ""
        # Why the file found at start was not used ("": it was, or there was none), and
        # failed reads and writes by reason (accel_exporter_state_errors_total).
        self.load_problem = ""
        self.errors: dict[str, int] = {}

    @property
    def path(self) -> Path | None:
        """The state file (None: memory only)."""
        return None if self._file is None else self._file.path

    @path.setter
    def path(self, path: Path | None) -> None:
        # The owner writes the new file (the process's one object for it) from now on.
        if self._file is not None:
            self._file.release(self)
        self._file = None if path is None else state_file.shared(path)
        if self._file is not None:
            self._file.claim(self)

    def _count(self, reason: str) -> None:
        self.errors[reason] = self.errors.get(reason, 0) + 1

    def _unusable(self, reason: str, detail: str) -> None:
        """The file found at start is not used: counted, said in /status, logged."""
        self._count(reason)
        self.load_problem = f"{reason}: {detail}"
        self._log.warning(self.UNUSABLE, path=str(self.path), reason=reason, detail=detail)

    def _found(self, found: ReadResult) -> dict[str, Any] | None:
        """The document a read found; None when there is none (an unusable one noted)."""
        if found.data is None and found.reason != "missing":
            self._unusable(found.reason, found.detail)
        return found.data


class SavedBook(StateBook, ABC):
    """A state file written whenever its document changed (:meth:`save`), as :meth:`_text`.

    A subclass names its file in log lines (``WHAT``: "CPER state file").
    """

    WHAT: ClassVar[str]

    @abstractmethod
    def _text(self) -> str:
        """The document as it is written (sorted keys: equal documents, equal texts)."""

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
            # The document goes on in memory; only a daemon restart would lose it.
            self._count(exc.reason)
            if not self._problem:
                self._log.warning(
                    f"{self.WHAT} not written",
                    path=str(self.path),
                    reason=exc.reason,
                    detail=exc.detail,
                )
            self._problem = f"{exc.reason}: {exc.detail}"
            return
        if self._problem:
            self._log.info(f"{self.WHAT} written again", path=str(self.path))
        self._problem = ""
        self._written = text
