"""HTTP basic auth with bcrypt hashes, and the TLS context for the listener."""

from __future__ import annotations

import base64
import binascii
import hashlib
import ssl
import threading

import bcrypt

from exporter.config.schema import BasicAuthConfig, TLSConfig


class BasicAuth:
    """Checks ``Authorization: Basic`` headers against bcrypt hashes.

    bcrypt is deliberately slow (tens to hundreds of milliseconds), so a
    successful check is remembered by a salted digest of the credentials: a
    scrape every few seconds then costs a dictionary lookup, not a bcrypt run.
    Failed checks are never cached, so a wrong password always costs the full
    bcrypt time.
    """

    def __init__(self, config: BasicAuthConfig) -> None:
        self._users = {name: hashed.encode() for name, hashed in config.users.items()}
        self._salt = bcrypt.gensalt()
        self._verified: set[bytes] = set()
        self._lock = threading.Lock()
        # A hash to burn time against for unknown users, so user names cannot be probed by timing.
        # Same cost as the real hashes, or the time difference would still tell.
        rounds = max((_cost(h) for h in self._users.values()), default=10)
        self._dummy = bcrypt.hashpw(b"unknown-user", bcrypt.gensalt(rounds=rounds))

    def check(self, header: str | None) -> bool:
        """True when ``header`` carries a known user and that user's password."""
        if not header or not header.startswith("Basic "):
            return False
        try:
            decoded = base64.b64decode(header[6:].strip(), validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return False
        user, sep, password = decoded.partition(":")
        if not sep:
            return False
        key = hashlib.sha256(self._salt + decoded.encode()).digest()
        with self._lock:
            if key in self._verified:
                return True
        hashed = self._users.get(user)
        if hashed is None:
            bcrypt.checkpw(password.encode(), self._dummy)
            return False
        try:
            ok = bcrypt.checkpw(password.encode(), hashed)
        except ValueError:
            return False
        if ok:
            with self._lock:
                if len(self._verified) > 1024:
                    self._verified.clear()
                self._verified.add(key)
        return ok


def _cost(hashed: bytes) -> int:
    """The cost factor of a ``$2b$NN$...`` hash (10 when it cannot be read)."""
    parts = hashed.split(b"$")
    return int(parts[2]) if len(parts) > 3 and parts[2].isdigit() else 10


def tls_context(config: TLSConfig) -> ssl.SSLContext:
    """Server-side TLS context; a client certificate, when given, verified against the CA.

    The handshake never refuses a client without one: ``client_auth_type``
    RequireAndVerifyClientCert is enforced per path by the HTTP handler, so that the
    health probes stay reachable (exporter-toolkit refuses them too, which loops pods).
    """
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = (
        ssl.TLSVersion.TLSv1_3 if config.min_version == "TLS1.3" else ssl.TLSVersion.TLSv1_2
    )
    ctx.load_cert_chain(config.cert_file, config.key_file)
    if config.client_ca_file:
        ctx.load_verify_locations(cafile=config.client_ca_file)
        ctx.verify_mode = ssl.CERT_OPTIONAL
    return ctx
