"""HTTP basic auth with bcrypt hashes, and the TLS context for the listener."""

from __future__ import annotations

import base64
import enum
import threading
from collections import OrderedDict
from typing import TYPE_CHECKING

from exporter.config.web import BasicAuthConfig, TLSConfig

if TYPE_CHECKING:
    import ssl

# Checks waiting for the bcrypt turn; one more is answered 503 (busy) at once,
# so a storm of new credentials queues a bounded number of threads.
MAX_WAITING = 16
# A backstop: a check that waited this long for its turn is answered busy.
BCRYPT_WAIT_SECONDS = 10.0
# Remembered credentials, each way; beyond this the oldest are forgotten.
CACHE_SIZE = 1024


class Verdict(enum.Enum):
    """The outcome of one check; the failure values are the counter's reason label."""

    OK = "ok"
    MISSING = "missing"
    MALFORMED = "malformed"
    REJECTED = "rejected"
    BUSY = "busy"


class BasicAuth:
    """Checks ``Authorization: Basic`` headers against bcrypt hashes.

    bcrypt is deliberately slow (tens to hundreds of milliseconds) and releases
    the GIL, so unbounded checks would take every core from the polls: at most
    one runs at a time (as exporter-toolkit does); at most ``max_waiting``
    checks wait for their turn (each at most ``wait`` seconds), and one more
    answers BUSY at once instead of queueing. Outcomes
    are remembered by a salted digest of the whole credential, both ways: a
    scrape every few seconds costs a dictionary lookup, and so does a flood
    repeating one wrong password (it tells the sender only what it already
    knows). Unknown users cost a bcrypt run like known ones, so user names
    cannot be probed by timing.
    """

    def __init__(
        self,
        config: BasicAuthConfig,
        wait: float = BCRYPT_WAIT_SECONDS,
        max_waiting: int = MAX_WAITING,
    ) -> None:
        # Imported here and in _bcrypt(): only a listener with basic auth loads bcrypt
        # (and hashlib, whose OpenSSL digests cost resident memory on every node).
        import hashlib

        import bcrypt

        self._sha256 = hashlib.sha256

        self._users = {name: hashed.encode() for name, hashed in config.users.items()}
        self._salt = bcrypt.gensalt()
        self._wait = wait
        self._max_waiting = max_waiting
        self._waiting = 0
        self._known: OrderedDict[bytes, bool] = OrderedDict()
        self._lock = threading.Lock()
        self._turn = threading.Lock()
        # Same cost as the real hashes, or the time difference would still tell.
        rounds = max((_cost(h) for h in self._users.values()), default=10)
        self._dummy = bcrypt.hashpw(b"unknown-user", bcrypt.gensalt(rounds=rounds))

    def check(self, header: str | None) -> bool:
        """True when ``header`` carries a known user and that user's password."""
        return self.verify(header) is Verdict.OK

    def verify(self, header: str | None) -> Verdict:
        """The verdict on one ``Authorization`` header."""
        if not header:
            return Verdict.MISSING
        if not header.startswith("Basic "):
            return Verdict.MALFORMED
        try:
            decoded = base64.b64decode(header[6:].strip(), validate=True).decode("utf-8")
        except ValueError:  # binascii.Error, UnicodeDecodeError, or non-ASCII text
            return Verdict.MALFORMED
        user, sep, password = decoded.partition(":")
        if not sep:
            return Verdict.MALFORMED
        key = self._sha256(self._salt + decoded.encode()).digest()
        known = self._remembered(key)
        if known is not None:
            return Verdict.OK if known else Verdict.REJECTED
        with self._lock:
            if self._waiting >= self._max_waiting:
                return Verdict.BUSY
            self._waiting += 1
        try:
            turn = self._turn.acquire(timeout=self._wait)
        finally:
            with self._lock:
                self._waiting -= 1
        if not turn:
            return Verdict.BUSY
        try:
            # Another thread may have checked the same credential while this one waited.
            known = self._remembered(key)
            if known is None:
                known = self._bcrypt(user, password.encode())
                with self._lock:
                    self._known[key] = known
                    while len(self._known) > CACHE_SIZE:
                        self._known.popitem(last=False)
        finally:
            self._turn.release()
        return Verdict.OK if known else Verdict.REJECTED

    def _remembered(self, key: bytes) -> bool | None:
        with self._lock:
            known = self._known.get(key)
            if known is not None:
                self._known.move_to_end(key)
            return known

    def _bcrypt(self, user: str, password: bytes) -> bool:
        import bcrypt

        hashed = self._users.get(user)
        if hashed is None:
            bcrypt.checkpw(password, self._dummy)
            return False
        try:
            return bool(bcrypt.checkpw(password, hashed))
        except ValueError:
            return False


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
    import ssl  # loaded only where TLS is configured (exporter.ssl_later)

    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = (
        ssl.TLSVersion.TLSv1_3 if config.min_version == "TLS1.3" else ssl.TLSVersion.TLSv1_2
    )
    ctx.load_cert_chain(config.cert_file, config.key_file)
    if config.client_ca_file:
        ctx.load_verify_locations(cafile=config.client_ca_file)
        ctx.verify_mode = ssl.CERT_OPTIONAL
    return ctx
