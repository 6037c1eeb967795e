"""The domains each device belongs to (``accel_device_domain_info``), kept as identity.

A device backend names a device's peer domain (an NVLink clique, an XGMI hive) and
its baseboard in its slow readings (``accel_device_domain_info{scope, domain}``, read
every ``slow_interval``, the way other static fields are). The partition domain needs
no backend: a partition's ``accel_device_info`` names its physical GPU
(``physical_gpu``), and every partition of one GPU shares it.

Domains are what an action's reach is computed from (:mod:`exporter.scope`), and the
device most likely to need a wide action is one that is down: so what a device last
named is kept while it is down, unread or isolated, and exported with its identity in
every state, like ``accel_device_info``. A device that is up and names no domain at a
slow poll has none any more (its fabric registration dropped, say): its actions widen
(never narrow) until it names one again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from exporter.catalog.vocabulary import DOMAIN_SCOPES
from exporter.family_names import ACCEL_DEVICE_DOMAIN_INFO
from exporter.model import Reading

FAMILY = ACCEL_DEVICE_DOMAIN_INFO
PARTITION = "partition"
# The scopes a backend may name; the partition's own is derived here from physical_gpu.
NAMED_BY_BACKENDS = tuple(s for s in DOMAIN_SCOPES if s != PARTITION)

Key = tuple[str, str]


class DomainMemory:
    """What each device last named, by uuid, and the readings that export it."""

    def __init__(self) -> None:
        self._named: dict[str, dict[str, str]] = {}

    def learn(self, slow: Iterable[Reading], up: Iterable[Key]) -> list[Reading]:
        """``slow`` without its domain rows, which replace what the ``up`` devices named.

        A row for a scope no backend names (``partition``, derived here; a word
        outside the vocabulary) or with an empty domain is dropped: it names nothing.
        """
        named: dict[str, dict[str, str]] = {}
        rest = []
        for r in slow:
            if r.metric != FAMILY:
                rest.append(r)
                continue
            _device, uuid, scope, domain = r.labels
            if scope in NAMED_BY_BACKENDS and domain:
                named.setdefault(uuid, {})[scope] = domain
        for _device, uuid in up:
            self._named[uuid] = named.get(uuid, {})
        return rest

    def keep(self, uuids: Iterable[str]) -> None:
        """Forget every device but ``uuids`` (those a new inventory lists)."""
        wanted = set(uuids)
        for uuid in [u for u in self._named if u not in wanted]:
            del self._named[uuid]

    def domains(self, uuid: str, info: Mapping[str, str]) -> dict[str, str]:
        """The domains of one device by scope: what it named, and its physical GPU's."""
        out = dict(self._named.get(uuid, {}))
        physical = info.get("physical_gpu", "")
        if physical:
            out[PARTITION] = physical
        return out

    def readings(self, device: str, uuid: str, info: Mapping[str, str]) -> list[Reading]:
        """The ``accel_device_domain_info`` series of one device, scopes in vocabulary order."""
        named = self.domains(uuid, info)
        return [
            Reading(FAMILY, (device, uuid, scope, named[scope]), 1.0)
            for scope in DOMAIN_SCOPES
            if scope in named
        ]
