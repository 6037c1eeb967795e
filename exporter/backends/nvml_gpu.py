"""One enumerated NVIDIA GPU, what the reader keeps about it between polls, and its calls.

:meth:`Gpu.call` is the NVML boundary: an error is absent (the field is
omitted), failed (omitted and counted by reason) or the device gone
(:class:`~exporter.backends.contract.DeviceGone`), after the table
:data:`exporter.backends.nvml_support.CODES`. The readers (nvml_device,
nvml_gpm, nvml_reliability) all take a :class:`Gpu`, so this module sits below them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from exporter import log
from exporter.backends import nvml_support as nv
from exporter.backends.contract import Failing, count


@dataclass
class FieldPlan:
    """One GPU's nvmlDeviceGetFieldValues request and, entry by entry, where answers go."""

    links: tuple[int, ...]
    wanted: list[tuple[int, int] | int]
    # Where the answers go, as runs of consecutive entries with one family and scale:
    # (family, multiply by, divide by, first entry, entry after the last, each
    # entry's row prefix).
    runs: list[tuple[str, int, int, int, int, list[tuple[Any, ...]]]]
    # The driver's valueType of each entry at the last poll, and the entries whose
    # raw 64 bits are not already the number (anything but an unsigned integer),
    # each with its run's multiplier: a field's type does not change, so they are
    # found once, not every poll.
    kinds: bytes = b""
    convert: tuple[tuple[int, int], ...] = ()
    no_errors: bytes = b""


@dataclass
class MigDevice:
    """One MIG device (GPU instance + compute instance) found by the last slow poll."""

    gpu_instance: int
    compute_instance: int
    uuid: str
    handle: Any
    # The GPU instance profile (``1g.10gb``), from the MIG device's name.
    profile: str = ""


@dataclass(slots=True)
class Gpu:
    """One enumerated GPU and what the reader remembers about it between polls."""

    index: int
    uuid: str
    handle: Any
    nvml: Any
    active_links: tuple[int, ...] = ()
    mig: list[MigDevice] = field(default_factory=list)
    gpm_supported: bool = False
    gpm_samples: dict[int, Any] = field(default_factory=dict)
    # GPM of the whole GPU: None until asked, nvml_gpm.OFF, or its GpmState.
    gpm_full: Any = None
    last_process_sample: int = 0
    # Set when the GPU could not be identified at bootstrap: the reason it is down.
    unidentified: str = ""
    # The mig_mode label the inventory announced (a change needs a new worker).
    mig_mode: str = ""
    # The reason it was down at the last poll ("" when up), to log changes only.
    down: str = ""
    # Row prefixes shared by this GPU's readings across polls (see Emitter).
    prefixes: dict[tuple[str, ...], tuple[Any, ...]] = field(default_factory=dict)
    field_plan: FieldPlan | None = None
    # Per-GPU forms of the reader's static tables (row prefixes bound), by table name.
    plans: dict[str, list[Any]] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    # Per poll: calls (or field entries) that answered, and those that failed
    # (not merely absent): a GPU that answered nothing and failed is down.
    ok: int = 0
    failed: int = 0
    last_failure: str = ""
    # Newer entry points this GPU refused ("memory", "temperature", ...): read
    # with the older one from then on.
    legacy: set[str] = field(default_factory=set)
    # The compute tray NVML names (nvml_domains): None until read, "" for none.
    board: str | None = None
    # Logs a call's failure when it starts failing or its reason changes (the
    # backend's, shared by its GPUs).
    failing: Failing = field(default_factory=lambda: Failing(log.get(source="nvml")))

    @property
    def device(self) -> str:
        """The ``device`` label: the NVML index."""
        return str(self.index)

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run one NVML call; None when the field is absent or failed; DeviceGone when lost."""
        try:
            value = fn(*args)
        except self.nvml.NVMLError as exc:
            code = int(exc.value)
            if code in nv.ABSENT:  # the common failure (no fans, no ECC): no message built
                return None
            return self.failure(getattr(fn, "__name__", "nvml"), code, str(exc))
        except getattr(self.nvml, "NVMLLibraryMismatchError", ()):
            return None  # an unversioned symbol this driver lacks: the field is absent
        self.ok += 1
        return value

    def fail(self, name: str, exc: Any) -> None:
        """Account for an NVMLError caught by the caller (after a fallback decision)."""
        self.failure(name, int(exc.value), str(exc))

    def status(self, name: str, code: int) -> None:
        """Account for a failed per-entry status (field values, GPM metrics) like a call's."""
        self.failure(name, code, nv.reason_of(code))

    def failure(self, name: str, code: int, detail: str) -> None:
        """Classify a failed call: absent (nothing), failed (counted), or DeviceGone."""
        if code in nv.ABSENT:  # the common case (no fans, no ECC, ...): cheap
            return None
        reason = nv.CODES.failed(code, name, detail)
        self.failed += 1
        self.last_failure = reason
        count(self.errors, reason)
        self.failing.note(self, name, reason)
        return None

    def release_gpm(self, sample: Any) -> None:
        """Free one GPM sample; a failure (the GPU is gone) is not the field's."""
        with contextlib.suppress(self.nvml.NVMLError):
            self.nvml.nvmlGpmSampleFree(sample)
