"""What the NVSentinel output sends: HealthEvents from verdict records, and when.

Pure (no I/O, no grpc): :mod:`exporter.outputs.nvsentinel` reads the store and sends
what :func:`plan` returns; :mod:`exporter.outputs.nvsentinel_wire` turns an
:class:`Event` into the proto message. The rules follow NVSentinel's own GPU health
monitor (``health-monitors/gpu-health-monitor``, ``platform_connector.py``):

- one check (:data:`CHECK_NAME`) per device, its entities the device's index under
  its component class (``GPU`` for NVIDIA, AMD and Intel GPUs; ``ACCELERATOR`` for
  Gaudi, TPU and Neuron devices), its PCI address (``PCI``) and its UUID
  (``GPU_UUID``; ``ACCELERATOR_UUID`` for the others): NVSentinel clears an event
  only with a healthy event naming exactly the same entities, so a device's entities
  are the ones its unhealthy event carried, remembered;
- an unhealthy event when a device's known verdict is not ``ok`` (``isFatal`` for
  ``failed``), sent again only when what it says changes; codes that went away
  while the device is still bad get a healthy event naming those codes (NVSentinel's
  partial recovery);
- a healthy event (``errorCode`` empty, action ``NONE``) once a device reported bad
  is ``ok`` again, and once for every device the first time this run sees it ``ok``
  (the monitor's "first poll healthy baseline": what NVSentinel holds from a run that
  ended clears);
- nothing for a device whose verdict is unknown or absent: no event without fresh
  evidence either way;
- in a batch, unhealthy events before healthy ones (NVSentinel consumes events one by
  one: a replacement fault lands before the recovery of what it replaces).

``COMPONENT_RESET`` (NVSentinel's GPU reset: it acts on the ``GPU_UUID`` entities) is
asked only for a GPU whose UUID and PCI address both are known, as NVSentinel's own
monitor does; otherwise a node reboot (``RESTART_BM``). A reset whose scope reaches
further than the device names every device of the scope as a ``GPU_UUID``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from exporter import actions as act
from exporter.enrich.devices import normalise_pci
from exporter.verdict import FAILED, OK, DeviceHealth

CHECK_NAME = "AcceleratorHealth"
GPU, ACCELERATOR = "GPU", "ACCELERATOR"
# accel_device_info's vendor label of the devices NVSentinel calls GPUs.
GPU_VENDORS = frozenset({"nvidia", "amd", "intel"})
STORE_ONLY, EXECUTE_REMEDIATION = "STORE_ONLY", "EXECUTE_REMEDIATION"
COMPONENT_RESET, RESTART_BM, CONTACT_SUPPORT = "COMPONENT_RESET", "RESTART_BM", "CONTACT_SUPPORT"

# Our action -> NVSentinel's RecommendedAction (docs/nvsentinel.md has the why of each).
# NVSentinel's fault-remediation acts on COMPONENT_RESET, RESTART_BM, RESTART_VM and
# REPLACE_VM; the rest it stores and shows.
DEFAULT_ACTIONS: Mapping[str, str] = {
    act.NONE: "NONE",
    act.RESTART_APP: "RESTART_APP",
    # NVML's DRAIN_P2P: stop peer-to-peer traffic over the degraded links; the GPUs stay
    # in service and no reset is asked (that is DRAIN_AND_RESET, our reset_device). A
    # down NVLink asks it for its whole peer domain: NVSentinel must not reset those.
    act.DRAIN_P2P: CONTACT_SUPPORT,
    act.RESET_DEVICE: COMPONENT_RESET,
    act.REBOOT_NODE: RESTART_BM,
    act.SERVICE: CONTACT_SUPPORT,
    act.INSPECT_HARDWARE: CONTACT_SUPPORT,
    act.CONTACT_VENDOR: CONTACT_SUPPORT,
    # NVSentinel's "replace": the node is swapped out (a cloud's replacement VM, a
    # bare-metal site's repair workflow); the device's own replacement is a person's.
    act.REPLACE_DEVICE: "REPLACE_VM",
}
# A word no table names (a newer vocabulary than this mapping): a person must look.
FALLBACK_ACTION = CONTACT_SUPPORT


@dataclass(frozen=True)
class Entity:
    """One impacted entity: its type (``GPU``, ``PCI``, ``GPU_UUID``) and value."""

    type: str
    value: str


@dataclass(frozen=True)
class Identity:
    """What the device sources say of a device beyond its verdict (accel_device_info)."""

    vendor: str = ""
    index: str = ""
    pci: str = ""


@dataclass(frozen=True)
class Event:
    """One HealthEvent, without its timestamp, node and agent (the sender's to add)."""

    uuid: str
    component_class: str
    fatal: bool
    healthy: bool
    message: str
    action: str  # the RecommendedAction name
    error_codes: tuple[str, ...]
    entities: tuple[Entity, ...]
    strategy: str  # the ProcessingStrategy name
    metadata: tuple[tuple[str, str], ...] = ()
    check_name: str = CHECK_NAME

    @property
    def clears(self) -> bool:
        """A healthy event with no codes: everything of its entities is over."""
        return self.healthy and not self.error_codes


@dataclass(frozen=True)
class Settings:
    """What the plan needs from ``outputs.nvsentinel``."""

    shadow: bool = True
    actions: Mapping[str, str] = field(default_factory=dict)

    @property
    def strategy(self) -> str:
        """The processing strategy of every new unhealthy event."""
        return STORE_ONLY if self.shadow else EXECUTE_REMEDIATION


def component_class(vendor: str) -> str:
    """NVSentinel's component class of a device of ``vendor`` (accel_device_info's label)."""
    return GPU if vendor in GPU_VENDORS else ACCELERATOR


def recommended(action: str, settings: Settings, can_reset: bool) -> str:
    """NVSentinel's RecommendedAction for our ``action``; a reset needs ``can_reset``."""
    name = settings.actions.get(action) or DEFAULT_ACTIONS.get(action, FALLBACK_ACTION)
    if name == COMPONENT_RESET and not can_reset:
        return RESTART_BM  # a node reboot resets every device, named or not
    return name


def entities(uuid: str, ident: Identity, scope_uuids: tuple[str, ...] = ()) -> tuple[Entity, ...]:
    """The device's entities: index under its class, PCI address, UUID; then its scope's."""
    klass = component_class(ident.vendor)
    out = []
    if ident.index:
        out.append(Entity(klass, ident.index))
    pci = normalise_pci(ident.pci) if ident.pci else None
    if pci:
        out.append(Entity("PCI", pci))
    out.append(Entity(f"{klass}_UUID", uuid))
    out += [Entity(f"{klass}_UUID", u) for u in scope_uuids if u != uuid]
    return tuple(out)


def error_codes(dev: DeviceHealth) -> tuple[str, ...]:
    """The findings' and the reasons' codes (``xid_79``, ``afid_30``, ``device_down``)."""
    return tuple(sorted({f.reason for f in dev.findings} | set(dev.reason_names())))


def _metadata(dev: DeviceHealth, ident: Identity) -> tuple[tuple[str, str], ...]:
    """What NVSentinel has no field for: our action, its scope, what next, whence."""
    worst = [f for f in dev.findings if f.action == dev.action]
    first = worst[0] if worst else None
    pairs = {
        "accel_exporter.state": dev.state,
        "accel_exporter.action": dev.action,
        "accel_exporter.scope": dev.scope,
        "accel_exporter.scope_uuids": ",".join(dev.scope_uuids),
        "accel_exporter.escalation": dev.escalation,
        "accel_exporter.escalation_scope": dev.escalation_scope,
        "accel_exporter.vendor": ident.vendor,
        "accel_exporter.detail": first.detail if first else "",
        "accel_exporter.provenance": first.provenance if first else "",
        "accel_exporter.reference": first.reference if first else "",
    }
    return tuple((k, v[:512]) for k, v in pairs.items() if v)


def unhealthy(dev: DeviceHealth, ident: Identity, settings: Settings) -> Event:
    """The event of a known device whose verdict is not ``ok``."""
    klass = component_class(ident.vendor)
    pci = normalise_pci(ident.pci) if ident.pci else None
    action = recommended(dev.action, settings, can_reset=klass == GPU and bool(pci))
    reach = dev.scope_uuids if action == COMPONENT_RESET else ()
    codes = error_codes(dev)
    message = f"{dev.state} ({', '.join(codes) or 'no reason'}); recommended action: {dev.action}"
    if dev.scope != "device" and dev.scope_uuids:
        message += f" (scope {dev.scope}: {len(dev.scope_uuids)} devices)"
    return Event(
        uuid=dev.uuid,
        component_class=klass,
        fatal=dev.state == FAILED,
        healthy=False,
        message=message,
        action=action,
        error_codes=codes,
        entities=entities(dev.uuid, ident, reach),
        strategy=settings.strategy,
        metadata=_metadata(dev, ident),
    )


def healthy(of: Event, codes: tuple[str, ...] = (), message: str = "") -> Event:
    """The healthy event that clears ``of`` (only ``codes`` of it, when given).

    The same check, class, entities and strategy as the event it clears: NVSentinel
    pairs the two by them.
    """
    said = message or (f"no longer reports {', '.join(codes)}" if codes else "ok: no health reason")
    return replace(
        of,
        fatal=False,
        healthy=True,
        message=said,
        action="NONE",
        error_codes=codes,
        metadata=(("accel_exporter.state", OK),) if not codes else of.metadata,
    )


def baseline(uuid: str, ident: Identity, settings: Settings) -> Event:
    """The healthy event of a device first seen ``ok`` this run."""
    klass = component_class(ident.vendor)
    start = Event(
        uuid=uuid,
        component_class=klass,
        fatal=False,
        healthy=True,
        message="ok: no health reason",
        action="NONE",
        error_codes=(),
        entities=entities(uuid, ident),
        strategy=settings.strategy,
    )
    return healthy(start)


@dataclass(frozen=True)
class Step:
    """What one pass sends, in order, and what is remembered once it is delivered."""

    events: tuple[Event, ...]
    # uuid -> the event that now stands for the device (the last one it was sent).
    sent: Mapping[str, Event]


def plan(
    health: Mapping[str, DeviceHealth],
    idents: Mapping[str, Identity],
    sent: Mapping[str, Event],
    settings: Settings,
    due: frozenset[str] = frozenset(),
) -> Step:
    """The events that bring NVSentinel in line with the verdicts, and the new memory.

    ``sent``: what NVSentinel was last told of each device (delivered events only);
    ``due``: uuids whose unhealthy event is to be sent again although unchanged
    (``resend``). Devices without a known verdict are left as they are.
    """
    bad: list[Event] = []
    good: list[Event] = []
    memory = dict(sent)
    for uuid in sorted(health):
        dev = health[uuid]
        if not dev.known:
            continue  # no evidence either way: nothing said, nothing forgotten
        ident = idents.get(uuid, Identity(index=dev.device))
        before = sent.get(uuid)
        if dev.state != OK:
            want = unhealthy(dev, ident, settings)
            if before is not None and not before.healthy and before == want:
                if uuid in due:
                    bad.append(want)
                continue
            bad.append(want)
            memory[uuid] = want
            if before is None or before.healthy:
                continue
            if before.entities != want.entities or before.component_class != want.component_class:
                good.append(healthy(before))  # the old event named other entities
            else:
                gone = tuple(c for c in before.error_codes if c not in want.error_codes)
                if gone:
                    good.append(healthy(before, gone))
            continue
        if before is None:
            event = baseline(uuid, ident, settings)
        elif not before.healthy:
            event = healthy(before)
        else:
            continue
        good.append(event)
        memory[uuid] = event
    return Step(tuple(bad + good), memory)
