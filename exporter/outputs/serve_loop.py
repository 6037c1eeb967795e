"""Serving a socketserver without its shutdown poll."""

from __future__ import annotations

import selectors
import socket
import socketserver


def serve_until(server: socketserver.TCPServer, wake: socket.socket) -> None:
    """Accept connections on ``server`` until ``wake`` becomes readable; asleep in between.

    socketserver's ``serve_forever`` wakes every poll interval to look for a shutdown
    request (five times a second, an idle daemon's most frequent timer): this sleeps on
    the listening socket and on ``wake``, which stopping writes to.
    """
    with selectors.DefaultSelector() as selector:
        selector.register(server, selectors.EVENT_READ)
        selector.register(wake, selectors.EVENT_READ)
        while True:
            ready = {key.fileobj for key, _ in selector.select()}
            if wake in ready:
                return
            # What serve_forever calls for a ready socket (typeshed does not list it).
            server._handle_request_noblock()  # type: ignore[attr-defined]
