"""``host:port`` parsing shared by the web listener and the RAS client."""

from __future__ import annotations


def split_host_port(text: str, *, default_port: int | None = None) -> tuple[str, int]:
    """Split ``host:port``, ``[v6]:port`` or ``:port``; ValueError naming what is wrong."""
    raw = text.strip()
    if not raw:
        raise ValueError("empty address")
    scheme, sep, rest = raw.partition("://")
    if sep and scheme.isalpha():
        # A URL pasted where host:port belongs; its colons would read as IPv6.
        authority = rest.split("/", 1)[0]
        raise ValueError(f"{text!r} is a URL: give host:port, as {authority}")
    if raw.startswith("["):
        end = raw.find("]")
        if end < 0:
            raise ValueError(f"unclosed '[' in {text!r}")
        host, rest = raw[1:end], raw[end + 1 :]
        if rest and not rest.startswith(":"):
            raise ValueError(f"expected ':port' after ']' in {text!r}")
        port_text = rest[1:] if rest else ""
    elif raw.count(":") > 1:
        raise ValueError(f"IPv6 addresses must be bracketed: {text!r} -> [addr]:port")
    elif ":" in raw:
        host, port_text = raw.rsplit(":", 1)
    else:
        host, port_text = raw, ""
    if not port_text:
        if default_port is None:
            raise ValueError(f"missing port in {text!r}")
        return host, default_port
    if not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise ValueError(f"invalid port {port_text!r} in {text!r}")
    return host, int(port_text)


def join_host_port(host: str, port: int) -> str:
    """``host:port`` as :func:`split_host_port` reads it back (``[::]:9842`` for IPv6)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def address_list_problems(
    addresses: list[str], default_port: int | None, service: str
) -> list[tuple[str, str]]:
    """(field, problem) for a config list of ``host:port`` to connect to: empty, bad, or twice."""
    out = []
    if not addresses:
        out.append(("addresses", "needs at least one host:port"))
    for i, address in enumerate(addresses):
        try:
            host, port = split_host_port(address, default_port=default_port)
        except ValueError as exc:
            out.append((f"addresses.{i}", str(exc)))
            continue
        if not host:
            out.append((f"addresses.{i}", f"missing host in {address!r}"))
        if port == 0:
            out.append(
                (f"addresses.{i}", f"port 0 in {address!r}: {service} listens on a real port")
            )
    if len(set(addresses)) != len(addresses):
        out.append(("addresses", "lists an address twice"))
    return out


def parse_listen_address(text: str) -> tuple[str, int]:
    """Host (empty = every interface) and port for the HTTP listener."""
    return split_host_port(text)
