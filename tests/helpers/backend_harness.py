"""One harness for every device backend test: make a backend in this process, start
it, poll it as the daemon does and read its reply as the daemon would.

The backend tests (nvml, amdsmi, levelzero, hlml) drive the real backend class and
the real binding package against a fake library (tests/fakes/); the fakes differ,
this harness does not. TPU and Neuron are tested through the daemon (tests/e2e):
their fakes are a server and a command, not a library loaded in this process.

A reply is read through the real frame encoding and the daemon's own
``parse_readings``, with the devices the reply lists (in inventory order,
``device`` = the position, as every backend numbers them).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

import pytest

from exporter.backends.base import BackendUnavailable
from exporter.catalog import CATALOG
from exporter.model import Reading
from exporter.sources.device import DeviceId, parse_readings
from exporter.workers.protocol import decode, encode

# A series keyed by its labels' names, as tests.helpers.daemon.samples() keys it.
Key = tuple[str, tuple[tuple[str, str], ...]]
Series = dict[Key, float]


class Backend(Protocol):
    """What the harness uses of a device backend."""

    def bootstrap(self) -> dict[str, Any]: ...

    def handle(self, op: str, args: dict[str, Any]) -> dict[str, Any]: ...

    def close(self) -> None: ...


B = TypeVar("B", bound=Backend)


class Backends(Generic[B]):
    """``make(**config)``: a backend of ``cls`` with ``config`` over ``defaults``;
    :meth:`close` closes every backend made."""

    def __init__(self, cls: Callable[[dict[str, Any]], B], **defaults: Any) -> None:
        self.cls = cls
        self.defaults = defaults
        self.made: list[B] = []

    def __call__(self, **config: Any) -> B:
        backend = self.cls({**self.defaults, **config})
        self.made.append(backend)
        return backend

    def close(self) -> None:
        """Close every backend made (a test stops what it started)."""
        for backend in self.made:
            backend.close()
        self.made.clear()


@contextmanager
def backends(cls: Callable[[dict[str, Any]], B], **defaults: Any) -> Iterator[Backends[B]]:
    """:class:`Backends` for a fixture: every backend made is closed on exit."""
    made = Backends(cls, **defaults)
    try:
        yield made
    finally:
        made.close()


def started(make: Callable[..., B], **config: Any) -> B:
    """A backend from ``make(**config)``, bootstrapped."""
    backend = make(**config)
    backend.bootstrap()
    return backend


def unavailable(cls: Callable[[dict[str, Any]], Backend], library: Path) -> BackendUnavailable:
    """Why a backend of ``cls`` on the library at ``library`` cannot start (it must not)."""
    with pytest.raises(BackendUnavailable) as refused:
        cls({"library_path": str(library)}).bootstrap()
    return refused.value


def poll(
    backend: Backend,
    *,
    slow: bool = True,
    processes: bool = False,
    events: bool = True,
    **extra: Any,
) -> dict[str, Any]:
    """One poll, asked the way the daemon asks (exporter/sources/device.py); ``extra``
    adds keys some backends read (amdsmi's ``ledger``)."""
    request = {"slow": slow, "processes": processes, "events": events, **extra}
    return backend.handle("poll", request)


def readings(reply: dict[str, Any]) -> list[Reading]:
    """Every reading of a poll reply (fast and slow), as the daemon would parse it."""
    reply = decode(encode({"type": "result", "result": reply})[4:])["result"]  # as on the wire
    devices = [DeviceId(str(i), d["uuid"], ()) for i, d in enumerate(reply["devices"])]
    out = parse_readings(reply["readings"], devices, "readings")
    out += parse_readings(reply.get("slow_readings", {}), devices, "slow_readings")
    return out


def values(reply: dict[str, Any]) -> dict[tuple[str, tuple[str, ...]], float]:
    """``{(metric, label values in catalog order): value}`` of a poll reply; a series
    twice is an error."""
    out: dict[tuple[str, tuple[str, ...]], float] = {}
    for r in readings(reply):
        key = (r.metric, r.labels)
        assert key not in out, f"duplicate series {key}"
        assert isinstance(r.value, float)
        out[key] = r.value
    return out


def series(reply: dict[str, Any], devices: list[str] | None = None) -> Series:
    """A reply's series keyed by label names (see :func:`key`); ``devices`` renames
    the inventory positions in ``device``."""
    out: Series = {}
    for (metric, labels), v in values(reply).items():
        pairs = dict(zip(CATALOG[metric].labels, labels, strict=True))
        if devices is not None:
            pairs["device"] = devices[int(pairs["device"])]
        out[(metric, tuple(sorted(pairs.items())))] = v
    return out


def key(metric: str, **labels: str) -> Key:
    """The key of one series in :func:`series` (and in tests.helpers.daemon.samples())."""
    return metric, tuple(sorted(labels.items()))
