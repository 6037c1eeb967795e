"""Which DeviceTaintRules a pass wants: every device of each bad device's action scope.

A bad device's verdict names the devices its action reaches (``DeviceHealth.
scope_uuids``: an XGMI-hive reset the hive, a baseboard replacement the board's
GPUs, itself included). Each is resolved to its DRA device, and the devices are
grouped by the (driver, pool) of the node's ResourceSlices that publishes them:

- **pool-wide**: the scope holds exactly the devices of one pool, two or more (every
  device the pool lists is one of the scope's, a partition by its parent's uuid), or
  the scope is the node: one rule selecting the driver and pool with no ``device`` (a
  DeviceTaintRule without ``device`` selects every device of the pool). Only a pool
  whose every slice was listed (``resourceSliceCount``) is taken as whole: a rule
  must never reach a device the scope does not;
- **per device**: otherwise one rule per device of the scope (keyed by its uuid),
  whether or not that device is itself bad.

A device in the scope of several bad devices gets one rule: per-device wants of one
device merge, and a device whose pool has a pool-wide want is covered by that one.
Each want names its culprits (the bad devices whose action put it there), the most
disruptive of their actions (the taint's value) and their reasons.

Pure: the writer (:mod:`exporter.outputs.kube_health`) resolves and lists; this
module only groups.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from exporter import actions, scope
from exporter.enrich.dra import DraDevice, SliceDevice
from exporter.outputs.kube_selector import Selector, pool_key
from exporter.verdict import DeviceHealth


@dataclass(frozen=True)
class Pool:
    """One (driver, pool) of the node's ResourceSlices: its devices, and whether all were listed."""

    driver: str
    name: str
    devices: tuple[SliceDevice, ...]
    # Every slice of the pool's newest generation was in the listing.
    complete: bool


@dataclass(frozen=True)
class Want:
    """One rule a pass wants: what it selects, who asked and why."""

    key: str  # a device's uuid, or pool_key(driver, pool) for a pool-wide rule
    selector: Selector
    action: str  # the most disruptive action of the culprits: the taint's value
    scope: str  # the widest scope of the culprits' actions
    culprits: tuple[str, ...]  # the bad devices whose action reaches it, sorted
    covers: tuple[str, ...]  # the uuids it covers, sorted
    reasons: tuple[str, ...]  # the culprits' reasons, sorted

    @property
    def pool_wide(self) -> bool:
        """Whether it selects every device of a pool."""
        return not self.selector.device


@dataclass
class Targets:
    """The wants of one pass, and the devices of some scope that no slice names."""

    wants: dict[str, Want] = field(default_factory=dict)
    # culprit uuid -> the uuids of its scope that did not resolve (no rule for them yet).
    unresolved: dict[str, tuple[str, ...]] = field(default_factory=dict)


def reach(dev: DeviceHealth) -> tuple[str, ...]:
    """The uuids a bad device's action reaches: its scope's, itself always among them."""
    return tuple(sorted(set(dev.scope_uuids) | {dev.uuid}))


def _whole(pool: Pool, members: Iterable[str], refs: Mapping[str, DraDevice], wide: str) -> bool:
    """Whether the scope's ``members`` in ``pool`` are every device of the pool.

    A scope of one device is never taken as a pool (a device rule says the same, and
    names the device); the node's scope always is.
    """
    names = list(members)
    if wide == scope.NODE:
        return True  # the node's own pool: every device in it is the node's
    if not pool.complete or not pool.devices or len(names) < 2:
        return False
    at = {refs[u] for u in names}
    ids = {u.lower() for u in names}
    return all(
        d.ref in at
        or (d.uuid and d.uuid.lower() in ids)
        or (d.parent_uuid and d.parent_uuid.lower() in ids)
        for d in pool.devices
    )


@dataclass
class _Ask:
    selector: Selector
    culprits: set[str] = field(default_factory=set)
    covers: set[str] = field(default_factory=set)


def targets(
    bad: Mapping[str, DeviceHealth],
    refs: Mapping[str, DraDevice],
    pools: Mapping[tuple[str, str], Pool],
) -> Targets:
    """The rules that cover the scope of every one of ``bad`` (module docstring).

    ``refs`` is the DRA device of each uuid the slices name, ``pools`` the node's
    pools by (driver, pool).
    """
    out = Targets()
    asks: dict[str, _Ask] = {}
    for uuid, dev in sorted(bad.items()):
        uuids = reach(dev)
        missing = tuple(u for u in uuids if u not in refs)
        if missing:
            out.unresolved[uuid] = missing
        by_pool: dict[tuple[str, str], list[str]] = {}
        for member in uuids:
            if member in refs:
                by_pool.setdefault((refs[member].driver, refs[member].pool), []).append(member)
        for (driver, name), members in sorted(by_pool.items()):
            pool = pools.get((driver, name))
            if pool is not None and _whole(pool, members, refs, dev.scope):
                ask = asks.setdefault(pool_key(driver, name), _Ask(Selector(driver, name, "")))
                ask.covers.update(members)
                ask.covers.update(d.uuid for d in pool.devices if d.uuid)
                ask.culprits.add(uuid)
                continue
            for member in members:
                ref = refs[member]
                ask = asks.setdefault(member, _Ask(Selector(ref.driver, ref.pool, ref.device)))
                ask.covers.add(member)
                ask.culprits.add(uuid)
    # One rule per device: a device of a pool that has a pool-wide rule is covered by it.
    for key, ask in list(asks.items()):
        whole = asks.get(pool_key(ask.selector.driver, ask.selector.pool))
        if ask.selector.device and whole is not None:
            whole.culprits |= ask.culprits
            whole.covers |= ask.covers
            del asks[key]
    for key, ask in sorted(asks.items()):
        culprits = tuple(sorted(ask.culprits))
        out.wants[key] = Want(
            key=key,
            selector=ask.selector,
            action=_worst(bad[c].action for c in culprits),
            scope=scope.widest(bad[c].scope for c in culprits),
            culprits=culprits,
            covers=tuple(sorted(ask.covers)),
            reasons=tuple(sorted({r for c in culprits for r in bad[c].reason_names()})),
        )
    return out


def _worst(names: Iterable[str]) -> str:
    """The most disruptive action; a word the vocabulary lacks counts as the most (kept)."""
    listed = list(names)
    known = [a for a in listed if a in actions.RANK]
    unknown = sorted(a for a in listed if a not in actions.RANK)
    return unknown[0] if unknown else actions.worst(known)
