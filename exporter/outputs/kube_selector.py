"""What a DeviceTaintRule selects: one DRA device, or every device of one pool.

``resource.k8s.io/v1beta2``'s ``DeviceTaintSelector`` has only ``driver``, ``pool`` and
``device`` (Kubernetes 1.36); a selector without ``device`` selects every device of
the pool. The writer's rules always name the driver and the pool (the node's own).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# The key a pool-wide rule is held under (a device rule's key is the device's uuid).
POOL_PREFIX = "pool:"


def pool_key(driver: str, pool: str) -> str:
    """The key of the pool-wide rule of ``pool`` of ``driver``."""
    return f"{POOL_PREFIX}{driver}/{pool}"


def pool_of_key(key: str) -> tuple[str, str] | None:
    """(driver, pool) of a pool-wide rule's key; None for a device's key."""
    if not key.startswith(POOL_PREFIX):
        return None
    driver, slash, pool = key[len(POOL_PREFIX) :].partition("/")
    return (driver, pool) if slash and driver and pool else None


@dataclass(frozen=True)
class Selector:
    """Which devices a rule selects: the DRA (driver, pool, device); device "" for the pool."""

    driver: str
    pool: str
    device: str

    def as_dict(self) -> dict[str, str]:
        """The selector as the API takes it (no ``device`` for a pool-wide one)."""
        out = {"driver": self.driver, "pool": self.pool, "device": self.device}
        return {k: v for k, v in out.items() if v or k != "device"}

    @classmethod
    def of(cls, spec: Any) -> Selector:
        """The selector of a rule's ``spec`` (empty strings where a field is missing)."""
        sel = spec.get("deviceSelector") if isinstance(spec, dict) else None
        sel = sel if isinstance(sel, dict) else {}
        return cls(*(str(sel.get(k) or "") for k in ("driver", "pool", "device")))
