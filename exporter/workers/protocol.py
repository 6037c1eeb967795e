"""Frames between the daemon and a worker: 4-byte big-endian length, then UTF-8 JSON.

Messages (all JSON objects with a ``type``):

parent -> child  ``init {backend, config, log_level}`` once, then ``call {id, op, args}``
child -> parent  ``ready {inventory}`` or ``error {kind, reason, detail}`` once,
                 then ``result {id, result}`` or ``fault {id, reason, detail}`` per call
"""

from __future__ import annotations

import asyncio
import json
import os
import struct
from typing import Any

MAX_FRAME = 64 * 1024 * 1024
_HEADER = struct.Struct(">I")


class ProtocolError(Exception):
    """The peer sent something that is not a valid frame."""


def encode(message: dict[str, Any]) -> bytes:
    """One frame for ``message``."""
    body = json.dumps(message, separators=(",", ":"), allow_nan=False).encode("utf-8")
    if len(body) > MAX_FRAME:
        raise ProtocolError(f"frame of {len(body)} bytes exceeds {MAX_FRAME}")
    return _HEADER.pack(len(body)) + body


def decode(body: bytes) -> dict[str, Any]:
    """Parse a frame body; ProtocolError unless it is a JSON object with a string type."""
    try:
        message = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ProtocolError(f"frame is not JSON: {exc}") from None
    if not isinstance(message, dict) or not isinstance(message.get("type"), str):
        raise ProtocolError("frame is not an object with a type")
    return message


async def read_frame(reader: asyncio.StreamReader) -> dict[str, Any]:
    """Read one frame; ProtocolError on a bad header or body, EOFError at end of stream."""
    try:
        header = await reader.readexactly(_HEADER.size)
    except asyncio.IncompleteReadError as exc:
        if exc.partial:
            raise ProtocolError("stream ended inside a frame header") from None
        raise EOFError("worker closed its output") from None
    (length,) = _HEADER.unpack(header)
    if length > MAX_FRAME:
        raise ProtocolError(f"frame length {length} exceeds {MAX_FRAME}")
    try:
        body = await reader.readexactly(length)
    except asyncio.IncompleteReadError:
        raise ProtocolError("stream ended inside a frame") from None
    return decode(body)


def write_frame_fd(fd: int, message: dict[str, Any]) -> None:
    """Blocking write of one frame to a file descriptor (child side)."""
    write_fd(fd, encode(message))


def write_fd(fd: int, data: bytes) -> None:
    """Blocking write of already encoded frames to a file descriptor (child side)."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def read_frame_fd(fd: int) -> dict[str, Any] | None:
    """Blocking read of one frame (child side); None at end of stream."""
    header = _read_exact(fd, _HEADER.size)
    if header is None:
        return None
    (length,) = _HEADER.unpack(header)
    if length > MAX_FRAME:
        raise ProtocolError(f"frame length {length} exceeds {MAX_FRAME}")
    body = _read_exact(fd, length)
    if body is None:
        raise ProtocolError("stream ended inside a frame")
    return decode(body)


def _read_exact(fd: int, size: int) -> bytes | None:
    chunks = []
    remaining = size
    while remaining:
        chunk = os.read(fd, remaining)
        if not chunk:
            if remaining == size:
                return None
            raise ProtocolError("stream ended inside a frame")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)
