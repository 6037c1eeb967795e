"""How far an action reaches: the devices of a scope, from the domains the backends name.

A backend names, per device, the domain it belongs to for each of
``DOMAIN_SCOPES`` (``accel_device_domain_info{scope, domain}``): its physical device
(``partition``: every partition of one GPU shares it), its peer domain (an NVLink
clique, an XGMI hive) and its baseboard. ``device`` and ``node`` need no name: the
device itself, every device of the node.

A scope whose domain a device does not name widens to the next wider scope whose
domain it does, up to the node: an action whose reach is not known is taken to reach
further, never less far (AMD: a reset inside an XGMI hive "can have effects beyond
the selected device"; a board without a reported baseboard is taken as the node's).
A device that names no ``partition`` domain is not partitioned: the device is its
physical device, and the partition scope is the device alone.

Pure: no I/O (the health judge calls it on each poll's devices).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Literal

from exporter.catalog.vocabulary import ACTION_SCOPES

Identity = tuple[str, ...]
DEVICE, PARTITION, PEER_DOMAIN, BASEBOARD, NODE = ACTION_SCOPES
ScopeName = Literal["device", "partition", "peer_domain", "baseboard", "node"]
WIDTH = {scope: rank for rank, scope in enumerate(ACTION_SCOPES)}


def widest(scopes: Iterable[str]) -> str:
    """The widest of ``scopes``; ``device`` for none (an unknown scope counts as the node)."""
    return max(scopes, key=lambda s: WIDTH.get(s, WIDTH[NODE]), default=DEVICE)


def members(
    scope: str,
    ident: Identity,
    domains: Mapping[Identity, Mapping[str, str]],
) -> tuple[str, ...]:
    """The uuids ``scope`` reaches from device ``ident``, sorted, ``ident`` included.

    ``domains`` holds every device the caller knows (one source's devices), each with
    the domains it names by scope. An unknown scope is taken as the node.
    """
    uuid = ident[1]
    if scope == DEVICE:
        return (uuid,)
    own = domains.get(ident, {})
    if scope == PARTITION and not own.get(PARTITION):
        return (uuid,)
    start = WIDTH.get(scope, WIDTH[NODE])
    for wider in ACTION_SCOPES[start:]:
        if wider == NODE:
            break
        domain = own.get(wider)
        if domain:
            found = {i[1] for i, d in domains.items() if d.get(wider) == domain}
            return tuple(sorted(found | {uuid}))
    return tuple(sorted({i[1] for i in domains} | {uuid}))
