"""The ``web`` section: the HTTP server, its TLS and basic auth."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

from exporter.config.fields import Duration, FilePath, Secret, at_least, positive, setting

# Client certificate policies, as exporter-toolkit names them (the subset TLS servers
# in Python can honour: a certificate asked for is always verified).
ClientAuth = Literal["NoClientCert", "VerifyClientCertIfGiven", "RequireAndVerifyClientCert"]


def _cert_key_problem(cert_file: str, key_file: str) -> str:
    """Why the server could not present ``cert_file`` with ``key_file``, naming both; or ""."""
    import ssl  # only a TLS config needs it

    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(cert_file, key_file)
    except ssl.SSLError as exc:
        if exc.reason == "KEY_VALUES_MISMATCH":
            why = "the private key does not match the certificate"
        else:
            # OpenSSL says only "PEM lib": one of the two is not PEM (or the key is encrypted).
            why = f"one of them is not a PEM certificate or unencrypted PEM key ({exc.reason})"
        return f"cannot serve cert_file {cert_file} with key_file {key_file}: {why}"
    except OSError:
        return ""  # unreadable: the file keys' own check says so
    return ""


@dataclass(frozen=True)
class TLSConfig:
    """Serve HTTPS; with ``client_ca_file`` clients must present a certificate it signed."""

    cert_file: FilePath = setting("", "PEM certificate (chain) the server presents")
    key_file: FilePath = setting("", "PEM private key of cert_file")
    client_ca_file: FilePath = setting("", "PEM CA bundle that signs client certificates (mTLS)")
    # exporter-toolkit's names. RequireAndVerifyClientCert holds for every path but
    # /healthz and /readyz, which a kubelet probe (no client certificate) must reach.
    client_auth_type: ClientAuth | None = setting(
        None, "who must show a client certificate (unset: required with a CA)"
    )
    min_version: Literal["TLS1.2", "TLS1.3"] = setting("TLS1.2", "oldest TLS version accepted")

    def check(self) -> list[tuple[str, str]]:
        """cert_file and key_file come together; a client auth type needs its CA."""
        out = []
        if not self.cert_file or not self.key_file:
            out.append(("cert_file", "tls needs both cert_file and key_file"))
        verifies = self.client_auth_type not in (None, "NoClientCert")
        if verifies and not self.client_ca_file:
            out.append(("client_ca_file", f"client_auth_type {self.client_auth_type} needs it"))
        if self.client_auth_type == "NoClientCert" and self.client_ca_file:
            out.append(("client_auth_type", "NoClientCert ignores client_ca_file; remove one"))
        if self.cert_file and self.key_file:
            problem = _cert_key_problem(self.cert_file, self.key_file)
            if problem:
                out.append(("key_file", problem))
        return out

    def resolved(self) -> TLSConfig:
        """Unset client_auth_type: RequireAndVerifyClientCert with a CA, else NoClientCert."""
        if self.client_auth_type is not None:
            return self
        auth: ClientAuth = "RequireAndVerifyClientCert" if self.client_ca_file else "NoClientCert"
        return dataclasses.replace(self, client_auth_type=auth)

    @property
    def client_cert_required(self) -> bool:
        """Whether paths other than the health probes refuse a client without a certificate."""
        return self.resolved().client_auth_type == "RequireAndVerifyClientCert"


@dataclass(frozen=True)
class BasicAuthConfig:
    """HTTP basic auth: user name -> bcrypt hash of the password."""

    users: dict[str, Secret] = setting(
        factory=dict, help="user name -> bcrypt hash of the password"
    )

    def check(self) -> list[tuple[str, str]]:
        """Every value must be a bcrypt hash, never a plain password."""
        out = []
        if not self.users:
            out.append(("users", "basic_auth needs at least one user"))
        for name, hashed in self.users.items():
            if not (hashed.startswith(("$2a$", "$2b$", "$2y$")) and len(hashed) == 60):
                out.append(
                    (f"users.{name}", "is not a bcrypt hash (use htpasswd -nBC 10 or bcrypt)")
                )
        return out


@dataclass(frozen=True)
class WebConfig:
    """The HTTP server for /metrics, /status, /healthz, /readyz."""

    listen_address: str = setting(":9842", "host:port to serve on (:9842 is every address)")
    # Prometheus exporter-toolkit's web config file (--web.config.file), mapped onto tls
    # and basic_auth below; a setting given both ways is an error.
    config_file: FilePath = setting("", "exporter-toolkit web config file (web.yml)")
    tls: TLSConfig | None = setting(
        None, "HTTPS; client certificates (mTLS) for all but the probes"
    )
    basic_auth: BasicAuthConfig | None = setting(
        None, "HTTP basic auth for all but the health probes"
    )
    # Requests being served at once (after their headers arrived); more get 503
    # instead of queueing without bound. /healthz and /readyz have slots of their own.
    max_requests: int = setting(
        40, "concurrent requests before 503 (instead of an unbounded queue)"
    )
    # Open connections, idle or not; at the limit the oldest idle one is closed
    # to make room for a new one.
    max_connections: int = setting(256, "open connections at most; the oldest idle one makes room")
    # Keep-alive connections waiting for their next request; more close the oldest.
    max_idle_connections: int = setting(
        64, "keep-alive connections kept waiting; more close the oldest"
    )
    # A keep-alive connection with no request for this long is closed.
    idle_timeout: Duration = setting(30.0, "a keep-alive connection idle this long is closed")
    # From a request's first byte (or the connection's start for a new one) to
    # the end of its headers, TLS handshake included: a total, not per read.
    header_timeout: Duration = setting(
        5.0, "whole request headers must arrive within this (a total)"
    )
    # A client that sends or accepts nothing for this long is disconnected.
    read_timeout: Duration = setting(
        10.0, "a write that makes no progress this long ends the connection"
    )
    # From complete headers to the last byte of the answer: a client that reads
    # it slower (a byte now and then) is disconnected and frees its slot.
    write_timeout: Duration = setting(30.0, "a client must read its whole answer within this")
    # /v1/devices without credentials or client certificate, as /healthz and /readyz are:
    # for a device plugin on the node that has none (it reveals device health, no metrics).
    health_api_unauthenticated: bool = setting(
        False, "serve /v1/devices without auth, as the health probes"
    )

    def check(self) -> list[tuple[str, str]]:
        """The address must parse, the limits be positive and consistent."""
        from exporter.config.addresses import parse_listen_address

        out = []
        try:
            parse_listen_address(self.listen_address)
        except ValueError as exc:
            out.append(("listen_address", str(exc)))
        out += at_least(self, 1, "max_requests")
        if self.max_connections <= self.max_requests:
            out.append(("max_connections", f"must be more than max_requests ({self.max_requests})"))
        if not 0 <= self.max_idle_connections <= self.max_connections:
            out.append(("max_idle_connections", "must be between 0 and max_connections"))
        out += positive(self, "idle_timeout", "header_timeout", "read_timeout", "write_timeout")
        return out
