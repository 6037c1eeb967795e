"""Node addresses: which addresses are this node's, and NCCL's order among addresses.

RAS names nodes by IP address only (no DNS). Deciding whether a rank is local
(per-rank series) and whether this exporter is the job's reporter (lowest node
address) needs this node's addresses, read from the kernel: IPv4 from
``/proc/net/fib_trie`` (the ``/32 host LOCAL`` entries) and IPv6 from
``/proc/net/if_inet6``. Interfaces come and go (containers, VFs), so callers
read them again from time to time rather than once.
"""

from __future__ import annotations

import ipaddress
import os
import socket
from collections.abc import Iterable


def normalize(host: str) -> str:
    """Canonical spelling of an address (IPv4-mapped IPv6 as IPv4); other text unchanged."""
    try:
        ip = ipaddress.ip_address(host.strip().strip("[]").split("%", 1)[0])
    except ValueError:
        return host.strip()
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    return str(ip)


def host_key(host: str) -> tuple[int, int, str]:
    """Sort key: IPv4 before IPv6, then numerically (NCCL's order); non-addresses last."""
    try:
        ip = ipaddress.ip_address(normalize(host))
    except ValueError:
        return (2, 0, host)
    return (0 if ip.version == 4 else 1, int(ip), "")


def lowest_host(hosts: Iterable[str]) -> str | None:
    """The lowest address among ``hosts`` (None when empty)."""
    ordered = sorted(hosts, key=host_key)
    return ordered[0] if ordered else None


def _ipv4_local(text: str) -> set[str]:
    out: set[str] = set()
    candidate = ""
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("|-- "):
            candidate = stripped[4:].strip()
        elif stripped == "/32 host LOCAL" and candidate:
            out.add(candidate)
    return out


def _ipv6_local(text: str) -> set[str]:
    out: set[str] = set()
    for line in text.splitlines():
        fields = line.split()
        if fields and len(fields[0]) == 32:
            try:
                out.add(str(ipaddress.IPv6Address(bytes.fromhex(fields[0]))))
            except ValueError:
                continue
    return out


def _read(path: str) -> str:
    try:
        with open(path, encoding="ascii", errors="replace") as fh:
            return fh.read()
    except OSError:
        return ""


def local_addresses(proc: str = "/proc") -> frozenset[str]:
    """Every address assigned to this node (network namespace), loopback included."""
    found = _ipv4_local(_read(os.path.join(proc, "net", "fib_trie")))
    found |= _ipv6_local(_read(os.path.join(proc, "net", "if_inet6")))
    if not found:
        # No /proc/net (unusual sandboxes): the addresses the host name resolves to.
        try:
            infos = socket.getaddrinfo(socket.gethostname(), None, type=socket.SOCK_STREAM)
        except OSError:
            infos = []
        found = {str(info[4][0]) for info in infos}
    return frozenset(normalize(h) for h in found)
