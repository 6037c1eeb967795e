"""The typed shape of the configuration, with its defaults.

The loader walks these dataclasses to validate YAML, environment variables and
flags, so adding a key here is all it takes to make it configurable everywhere.
Field types the loader understands: ``bool``, ``int``, ``float``, ``str``,
:data:`Duration`, :data:`FilePath`, ``Literal``, ``X | None``, unions of a bool
and ``Literal["auto"]``, ``list[...]``, ``dict[str, ...]`` and nested dataclasses.

A dataclass may define ``check() -> list[tuple[str, str]]`` (field, problem) for
rules across fields, and ``resolved()`` to fill defaults that depend on others.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Annotated, ClassVar, Literal, Union

from exporter.actions import ACTIONS

# Seconds, written as "250ms", "15s", "1m" in files, env and flags.
Duration = Annotated[float, "duration"]
# A path that must exist and be readable when set.
FilePath = Annotated[str, "file"]
# A string never logged nor shown (password hashes, tokens).
Secret = Annotated[str, "secret"]

Enabled = Union[bool, Literal["auto"]]  # noqa: UP007 (a runtime alias, read by the loader)

# Client certificate policies, as exporter-toolkit names them (the subset TLS servers
# in Python can honour: a certificate asked for is always verified).
ClientAuth = Literal["NoClientCert", "VerifyClientCertIfGiven", "RequireAndVerifyClientCert"]

MIN_INTERVAL = 0.1
# A RAS follower queries this many times less often than the reporter by default.
FOLLOWER_FACTOR = 10


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

    HELP: ClassVar[dict[str, str]] = {
        "cert_file": "PEM certificate (chain) the server presents",
        "key_file": "PEM private key of cert_file",
        "client_ca_file": "PEM CA bundle that signs client certificates (mTLS)",
        "client_auth_type": "who must show a client certificate (unset: required with a CA)",
        "min_version": "oldest TLS version accepted",
    }

    cert_file: FilePath = ""
    key_file: FilePath = ""
    client_ca_file: FilePath = ""
    # exporter-toolkit's names. RequireAndVerifyClientCert holds for every path but
    # /healthz and /readyz, which a kubelet probe (no client certificate) must reach.
    client_auth_type: ClientAuth | None = None
    min_version: Literal["TLS1.2", "TLS1.3"] = "TLS1.2"

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

    HELP: ClassVar[dict[str, str]] = {
        "users": "user name -> bcrypt hash of the password",
    }

    users: dict[str, Secret] = field(default_factory=dict)

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

    HELP: ClassVar[dict[str, str]] = {
        "tls": "HTTPS; client certificates (mTLS) for all but the probes",
        "basic_auth": "HTTP basic auth for all but the health probes",
        "listen_address": "host:port to serve on (:9842 is every address)",
        "max_requests": "concurrent requests before 503 (instead of an unbounded queue)",
        "read_timeout": "a client silent this long is disconnected",
        "config_file": "exporter-toolkit web config file (web.yml)",
        "max_connections": "open connections at most; the oldest idle one makes room",
        "max_idle_connections": "keep-alive connections kept waiting; more close the oldest",
        "idle_timeout": "a keep-alive connection idle this long is closed",
        "header_timeout": "whole request headers must arrive within this (a total)",
        "write_timeout": "a client must read its whole answer within this",
        "health_api_unauthenticated": "serve /v1/devices without auth, as the health probes",
    }

    listen_address: str = ":9842"
    # Prometheus exporter-toolkit's web config file (--web.config.file), mapped onto tls
    # and basic_auth below; a setting given both ways is an error.
    config_file: FilePath = ""
    tls: TLSConfig | None = None
    basic_auth: BasicAuthConfig | None = None
    # Requests being served at once (after their headers arrived); more get 503
    # instead of queueing without bound. /healthz and /readyz have slots of their own.
    max_requests: int = 40
    # Open connections, idle or not; at the limit the oldest idle one is closed
    # to make room for a new one.
    max_connections: int = 256
    # Keep-alive connections waiting for their next request; more close the oldest.
    max_idle_connections: int = 64
    # A keep-alive connection with no request for this long is closed.
    idle_timeout: Duration = 30.0
    # From a request's first byte (or the connection's start for a new one) to
    # the end of its headers, TLS handshake included: a total, not per read.
    header_timeout: Duration = 5.0
    # A client that sends or accepts nothing for this long is disconnected.
    read_timeout: Duration = 10.0
    # From complete headers to the last byte of the answer: a client that reads
    # it slower (a byte now and then) is disconnected and frees its slot.
    write_timeout: Duration = 30.0
    # /v1/devices without credentials or client certificate, as /healthz and /readyz are:
    # for a device plugin on the node that has none (it reveals device health, no metrics).
    health_api_unauthenticated: bool = False

    def check(self) -> list[tuple[str, str]]:
        """The address must parse, the limits be positive and consistent."""
        from exporter.config.addresses import parse_listen_address

        out = []
        try:
            parse_listen_address(self.listen_address)
        except ValueError as exc:
            out.append(("listen_address", str(exc)))
        if self.max_requests < 1:
            out.append(("max_requests", "must be at least 1"))
        if self.max_connections <= self.max_requests:
            out.append(("max_connections", f"must be more than max_requests ({self.max_requests})"))
        if not 0 <= self.max_idle_connections <= self.max_connections:
            out.append(("max_idle_connections", "must be between 0 and max_connections"))
        for key in ("idle_timeout", "header_timeout", "read_timeout", "write_timeout"):
            if getattr(self, key) <= 0:
                out.append((key, "must be positive"))
        return out


@dataclass(frozen=True)
class LogConfig:
    """Log level and format (auto: console on a TTY, JSON otherwise)."""

    HELP: ClassVar[dict[str, str]] = {
        "level": "least severe level logged",
        "format": "auto: console on a TTY, JSON otherwise",
    }

    level: Literal["debug", "info", "warning", "error"] = "info"
    format: Literal["auto", "json", "console"] = "auto"


@dataclass(frozen=True)
class SourceConfig:
    """What every source has: a switch and its timing.

    ``timeout`` defaults to the interval (capped at 30 s); ``stale_after`` to
    three intervals. Data older than ``stale_after`` is not exported.
    """

    HELP: ClassVar[dict[str, str]] = {
        "enabled": "on, off, or auto (on where the hardware or service is found)",
        "interval": "time between two polls",
        "timeout": "deadline of one poll (derived: the interval, at most 30s)",
        "stale_after": "older data is not exported (derived: three intervals)",
    }

    enabled: Enabled = True
    interval: Duration = 15.0
    timeout: Duration | None = None
    stale_after: Duration | None = None

    def check(self) -> list[tuple[str, str]]:
        """Intervals of at least 100 ms, positive timeouts, stale_after >= interval."""
        out = []
        if self.interval < MIN_INTERVAL:
            out.append(("interval", f"must be at least {int(MIN_INTERVAL * 1000)}ms"))
        if self.timeout is not None and self.timeout <= 0:
            out.append(("timeout", "must be positive"))
        if self.stale_after is not None and self.stale_after < self.interval:
            out.append(("stale_after", "must be at least the interval"))
        return out

    def resolved(self) -> SourceConfig:
        """Fill timeout and stale_after from the interval (for display and dumps)."""
        return dataclasses.replace(self, timeout=self.poll_timeout, stale_after=self.stale_seconds)

    @property
    def poll_timeout(self) -> float:
        """Deadline of one poll: ``timeout``, else the interval capped at 30 s."""
        return self.timeout if self.timeout is not None else min(self.interval, 30.0)

    @property
    def stale_seconds(self) -> float:
        """Age after which data is dropped: ``stale_after``, else three intervals."""
        stale = self.stale_after if self.stale_after is not None else 3 * self.interval
        return max(stale, self.interval)


@dataclass(frozen=True)
class HostSourceConfig(SourceConfig):
    """Host CPU, memory and load from /proc."""

    HELP: ClassVar[dict[str, str]] = {
        "proc_path": "where /proc is mounted (the host's, in a container)",
    }

    interval: Duration = 5.0
    proc_path: str = "/proc"


@dataclass(frozen=True)
class DeviceSourceConfig(SourceConfig):
    """A vendor device backend run in a worker process."""

    HELP: ClassVar[dict[str, str]] = {
        "slow_interval": "time between reads of slow-changing data (inventory, ECC, links)",
        "bootstrap_timeout": "time for the worker to load the library and list devices",
        "processes": "per-process series with a pid label (cardinality)",
        "events": "count device events (NVIDIA XIDs)",
        "expected_devices": "devices this node should have (accel_devices_expected)",
        "sys_path": "where /sys is read to count this vendor's PCI devices",
    }

    enabled: Enabled = "auto"
    interval: Duration = 5.0
    # Inventory, ECC, retired pages, remapped rows, link state: slow to read, slow to change.
    slow_interval: Duration = 60.0
    # Time allowed for the worker to load the library and enumerate devices.
    bootstrap_timeout: Duration = 30.0
    # Per-process series (pid label): off by default for cardinality.
    processes: bool = False
    events: bool = True
    # The accelerators this node should have, exported as accel_devices_expected so an
    # alert can tell a node that booted short; set, it also makes a missing library a failure.
    expected_devices: int | None = None
    # Where the PCI bus is read (bus/pci/devices) to count this vendor's accelerators
    # as accel_pci_devices, whether or not the library sees them: the host's, if
    # mounted elsewhere.
    sys_path: str = "/sys"

    def check(self) -> list[tuple[str, str]]:
        """The slow interval cannot be shorter than the fast one; an expected count is positive."""
        out = super().check()
        if self.slow_interval < self.interval:
            out.append(("slow_interval", "must be at least interval"))
        if self.bootstrap_timeout <= 0:
            out.append(("bootstrap_timeout", "must be positive"))
        if self.expected_devices is not None and self.expected_devices < 1:
            out.append(("expected_devices", "must be at least 1 (leave it unset on other nodes)"))
        return out


AmdEvent = Literal[
    "vmfault",
    "thermal_throttle",
    "gpu_pre_reset",
    "gpu_post_reset",
    "migrate_start",
    "migrate_end",
    "page_fault_end",
    "queue_eviction",
    "queue_restore",
    "unmap_from_gpu",
    "process_start",
    "process_end",
]


# The notifications that say something about health; the others can fire very often.
AMD_DEFAULT_EVENTS: tuple[AmdEvent, ...] = (
    "vmfault",
    "thermal_throttle",
    "gpu_pre_reset",
    "gpu_post_reset",
)


@dataclass(frozen=True)
class AmdSmiSourceConfig(DeviceSourceConfig):
    """AMD GPUs through amdsmi; ``event_types`` picks the event notifications counted."""

    HELP: ClassVar[dict[str, str]] = {
        "event_types": "amdsmi event notifications counted",
        "dev_path": "where /dev is read to tell no driver from a fault",
        "state_dir": "where CPER cursors and AFID counts survive daemon restarts",
        "cper_per_poll": "CPER records read per GPU and poll (bursts drain over polls)",
    }

    event_types: list[AmdEvent] = field(default_factory=lambda: list(AMD_DEFAULT_EVENTS))
    # Where to look for the amdgpu driver (module/amdgpu under sys_path, kfd under
    # dev_path) when amdsmi_init fails, to tell "no AMD driver here" from a fault.
    dev_path: str = "/dev"
    # Where the CPER cursor and AFID counts are kept across daemon restarts (a small
    # JSON file); empty: in memory only, so a restarted daemon reads each GPU's CPER
    # ring again from its start and counts those records again.
    state_dir: str = ""
    # CPER records read per GPU and poll: a burst is drained over several polls.
    cper_per_poll: int = 256

    def check(self) -> list[tuple[str, str]]:
        """The CPER read bound is positive."""
        out = super().check()
        if self.cper_per_poll < 1:
            out.append(("cper_per_poll", "must be at least 1"))
        return out


@dataclass(frozen=True)
class LevelZeroSourceConfig(DeviceSourceConfig):
    """Intel GPUs through Level Zero Sysman (pyzes); ``library_path`` is the loader to use."""

    HELP: ClassVar[dict[str, str]] = {
        "library_path": "the Level Zero loader (unset: distributions' paths, then ld.so's)",
    }

    # Unset: Debian's, RHEL/SUSE/Fedora's /usr/lib64 and the loader's search (libsearch).
    library_path: str = ""


@dataclass(frozen=True)
class HlmlSourceConfig(DeviceSourceConfig):
    """Intel Gaudi through libhlml (habana-pyhlml); ``library_path`` is the library to use."""

    HELP: ClassVar[dict[str, str]] = {
        "library_path": "libhlml (unset: /usr/lib/habanalabs, then where ld.so looks)",
        "nic_statistics": "per-port NIC counters, read on slow polls",
    }

    library_path: str = ""
    # Per-port NIC counters (the driver names them; dozens per port): read on slow polls.
    nic_statistics: bool = True


@dataclass(frozen=True)
class TpuSourceConfig(DeviceSourceConfig):
    """Google TPUs: chips counted from the host, runtime metrics from libtpu's gRPC service."""

    HELP: ClassVar[dict[str, str]] = {
        "addresses": "libtpu runtime metrics addresses, one per workload process",
        "host_root": "the host's / (dev/ and sys/ are read under it)",
        "max_message_bytes": "largest gRPC reply accepted",
    }

    # One address per workload process (libtpu: 8431, then TPU_RUNTIME_METRICS_PORTS).
    addresses: list[str] = field(default_factory=lambda: ["localhost:8431"])
    # Where the host's dev/ and sys/ are read (the host's / mounted elsewhere in a container).
    host_root: str = "/"
    max_message_bytes: int = 4 * 1024 * 1024

    def check(self) -> list[tuple[str, str]]:
        """Distinct host:port addresses, a sane message limit."""
        from exporter.config.addresses import address_list_problems

        out = super().check() + address_list_problems(self.addresses, None, "libtpu")
        if self.max_message_bytes < 4096:
            out.append(("max_message_bytes", "must be at least 4096"))
        return out


@dataclass(frozen=True)
class NeuronSourceConfig(SourceConfig):
    """AWS Trainium / Inferentia: devices from sysfs, metrics streamed by neuron-monitor."""

    HELP: ClassVar[dict[str, str]] = {
        "host_root": "the host's / (dev/ and sys/ are read under it)",
        "command": "neuron-monitor and its arguments (-c CONFIG is appended)",
        "max_line_bytes": "longest neuron-monitor report line accepted",
    }

    enabled: Enabled = "auto"
    # Also neuron-monitor's reporting period; no line for three of them is a stall.
    interval: Duration = 5.0
    # Where the host's dev/ and sys/ are read to enumerate the devices.
    host_root: str = "/"
    # The program and its arguments; the daemon appends "-c <its own config file>".
    command: list[str] = field(default_factory=lambda: ["neuron-monitor"])
    # One JSON document per line; lines grow with runtimes, cores and loaded models.
    max_line_bytes: int = 16 * 1024 * 1024

    def check(self) -> list[tuple[str, str]]:
        """A command to run, interval in whole seconds, a bounded line limit."""
        out = super().check()
        if not self.command or not self.command[0]:
            out.append(("command", "needs the neuron-monitor program"))
        if self.interval < 1 or self.interval != int(self.interval):
            out.append(("interval", "neuron-monitor periods are whole seconds (at least 1s)"))
        if not 64 * 1024 <= self.max_line_bytes <= 1024 * 1024 * 1024:
            out.append(("max_line_bytes", "must be between 64 KiB and 1 GiB"))
        return out


@dataclass(frozen=True)
class CclRasSourceConfig(SourceConfig):
    """NCCL/RCCL RAS service client (every NCCL process listens on port 28028)."""

    HELP: ClassVar[dict[str, str]] = {
        "addresses": "RAS service host:port of the NCCL/RCCL processes",
        "format": "RAS reply format asked for (auto: JSON where supported)",
        "verbose": "ask for the verbose report (per-rank detail)",
        "rank_series": "per-rank series: this node's ranks, all, or none",
        "stall_polls": "polls without progress before a job counts as stalled",
        "role": "reporter queries every poll, a follower less often (auto: by rank 0)",
        "follower_interval": "a follower's query interval (derived: ten intervals)",
        "max_response_bytes": "largest RAS reply read",
        "monitor": "keep a RAS monitor connection for instant state changes",
        "local_addresses": "this node's IP addresses (empty: read from the kernel)",
    }

    enabled: Enabled = "auto"
    addresses: list[str] = field(default_factory=lambda: ["localhost:28028"])
    interval: Duration = 30.0
    timeout: Duration | None = 15.0
    format: Literal["auto", "json", "text"] = "auto"
    verbose: bool = True
    rank_series: Literal["local", "all", "none"] = "local"
    stall_polls: int = 3
    role: Literal["auto", "reporter", "follower"] = "auto"
    # Unset: ten times the interval.
    follower_interval: Duration | None = None
    max_response_bytes: int = 32 * 1024 * 1024
    monitor: Enabled = "auto"
    # This node's addresses, to tell local ranks and the reporter role; empty: read them
    # from the kernel (plus the host of every non-loopback address above).
    local_addresses: list[str] = field(default_factory=list)

    def check(self) -> list[tuple[str, str]]:
        """Sane addresses and counts."""
        import ipaddress

        from exporter.config.addresses import address_list_problems

        out = super().check() + address_list_problems(self.addresses, 28028, "RAS")
        for i, local in enumerate(self.local_addresses):
            try:
                ipaddress.ip_address(local.strip("[]"))
            except ValueError:
                out.append((f"local_addresses.{i}", f"{local!r} is not an IP address"))
        if self.stall_polls < 1:
            out.append(("stall_polls", "must be at least 1"))
        if self.follower_interval is not None and self.follower_interval < self.interval:
            out.append(("follower_interval", "must be at least interval"))
        if self.max_response_bytes < 4096:
            out.append(("max_response_bytes", "must be at least 4096"))
        return out

    def resolved(self) -> CclRasSourceConfig:
        """Also fill ``follower_interval`` from the interval."""
        base = super().resolved()
        assert isinstance(base, CclRasSourceConfig)
        return dataclasses.replace(base, follower_interval=self.follower_seconds)

    @property
    def follower_seconds(self) -> float:
        """A follower's query interval: ``follower_interval``, else ten intervals."""
        if self.follower_interval is not None:
            return self.follower_interval
        return FOLLOWER_FACTOR * self.interval


@dataclass(frozen=True)
class CclInspectorSourceConfig(SourceConfig):
    """NCCL/RCCL Inspector profiler plugin output (one JSONL file per process)."""

    HELP: ClassVar[dict[str, str]] = {
        "dir": "directory of the Inspector plugin's JSONL files",
        "link_peak_bytes_per_second": "bus bandwidth above this is flagged implausible",
        "max_line_bytes": "longest JSONL line read",
        "max_read_bytes": "bytes read per file and poll (a larger backlog is skipped)",
        "max_files": "files followed at once",
        "max_comms": "communicators tracked at once",
        "max_series": "{comm, collective, msg_size} label sets at most",
        "hostnames": "only files of these host names (empty: all)",
    }

    enabled: Enabled = "auto"
    dir: str = "/var/run/nccl-inspector"
    interval: Duration = 15.0
    # Bus bandwidth above this is flagged as implausible (RCCL 2.28.3 reports 10x too high).
    link_peak_bytes_per_second: float = 1.0e12
    max_line_bytes: int = 1024 * 1024
    # Per file and poll; a larger backlog is skipped (counted), keeping CPU per poll bounded.
    max_read_bytes: int = 8 * 1024 * 1024
    max_files: int = 256
    # Communicators tracked at once; the least recently seen is forgotten beyond this.
    max_comms: int = 64
    # {comm, collective, msg_size} label sets over all communicators (two histograms each).
    max_series: int = 512
    # Only files <hostname>-pid<pid>.log of these host names (a shared directory); empty: all.
    hostnames: list[str] = field(default_factory=list)

    def check(self) -> list[tuple[str, str]]:
        """Positive limits."""
        out = super().check()
        for key in ("max_line_bytes", "max_read_bytes", "max_files", "max_comms", "max_series"):
            if getattr(self, key) < 1:
                out.append((key, "must be at least 1"))
        if self.max_read_bytes < self.max_line_bytes:
            out.append(("max_read_bytes", "must be at least max_line_bytes"))
        if self.link_peak_bytes_per_second <= 0:
            out.append(("link_peak_bytes_per_second", "must be positive"))
        return out


@dataclass(frozen=True)
class CudaCheckpointSourceConfig(SourceConfig):
    """CUDA checkpoint state of GPU processes (read-only; needs CUDA 12.8 / driver r570+)."""

    HELP: ClassVar[dict[str, str]] = {
        "proc_path": "where /proc is mounted (the host's, in a container)",
        "scan_maps": "also find processes that map libcuda (checkpointed ones)",
        "bootstrap_timeout": "time for the worker to load libcuda and call cuInit",
    }

    enabled: Enabled = False
    interval: Duration = 30.0
    proc_path: str = "/proc"
    # Also look for processes that map libcuda (checkpointed ones leave the GPU process list).
    scan_maps: bool = True
    # Time allowed for the worker to load libcuda and call cuInit.
    bootstrap_timeout: Duration = 30.0

    def check(self) -> list[tuple[str, str]]:
        """A positive bootstrap deadline."""
        out = super().check()
        if self.bootstrap_timeout <= 0:
            out.append(("bootstrap_timeout", "must be positive"))
        return out


@dataclass(frozen=True)
class SourcesConfig:
    """Every source the daemon knows."""

    HELP: ClassVar[dict[str, str]] = {
        "host": "host CPU, memory, load and uptime from /proc",
        "nvml": "NVIDIA GPUs through NVML (in a worker process)",
        "amdsmi": "AMD GPUs through amdsmi (in a worker process)",
        "tpu": "Google TPUs: chips from the host, metrics from libtpu",
        "neuron": "AWS Trainium / Inferentia through neuron-monitor",
        "ccl_ras": "NCCL/RCCL job health from the RAS service (port 28028)",
        "ccl_inspector": "NCCL/RCCL Inspector profiler plugin output (JSONL files)",
        "cuda_checkpoint": "CUDA checkpoint state of GPU processes (CUDA 12.8+)",
    }

    # Keys that are not here but where a user looks for them: the loader adds the hint.
    HINTS: ClassVar[dict[str, str]] = {
        "workload": "workload attribution is the top-level section workload, not under sources",
        "enrich": "workload attribution is the top-level section workload",
    }
    # Sources are named for their library; the vendor's name suggests it ("did you mean").
    SYNONYMS: ClassVar[dict[str, str]] = {
        "nvidia": "nvml",
        "dcgm": "nvml",
        "amd": "amdsmi",
        "rocm": "amdsmi",
        "rocm_smi": "amdsmi",
        "intel": "levelzero",
        "xpu": "levelzero",
        "level_zero": "levelzero",
        "gaudi": "hlml",
        "habana": "hlml",
        "google": "tpu",
        "aws": "neuron",
        "trainium": "neuron",
        "inferentia": "neuron",
        "nccl": "ccl_ras",
        "rccl": "ccl_ras",
    }

    host: HostSourceConfig = field(default_factory=HostSourceConfig)
    nvml: DeviceSourceConfig = field(default_factory=DeviceSourceConfig)
    amdsmi: AmdSmiSourceConfig = field(default_factory=AmdSmiSourceConfig)
    levelzero: LevelZeroSourceConfig = field(default_factory=LevelZeroSourceConfig)
    hlml: HlmlSourceConfig = field(default_factory=HlmlSourceConfig)
    tpu: TpuSourceConfig = field(default_factory=TpuSourceConfig)
    neuron: NeuronSourceConfig = field(default_factory=NeuronSourceConfig)
    ccl_ras: CclRasSourceConfig = field(default_factory=CclRasSourceConfig)
    ccl_inspector: CclInspectorSourceConfig = field(default_factory=CclInspectorSourceConfig)
    cuda_checkpoint: CudaCheckpointSourceConfig = field(default_factory=CudaCheckpointSourceConfig)


# The kubelet's pod-resources reply grows with pods x devices; gRPC's default 4 MiB is
# known to be too small on busy nodes (dcgm-exporter#509), so never allow less than this.
MIN_POD_RESOURCES_MESSAGE_BYTES = 16 * 1024 * 1024
# Workload labels that may be stamped onto device series.
STAMPABLE_LABELS = ("namespace", "pod", "container")
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
# A Kubernetes label key: an optional DNS-subdomain prefix and "/", then a name.
_LABEL_NAME = r"[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_LABEL_PREFIX = r"[a-z0-9](?:[-a-z0-9.]{0,251}[a-z0-9])?"
LABEL_KEY = rf"^(?:{_LABEL_PREFIX}/)?{_LABEL_NAME}$"


@dataclass(frozen=True)
class PodLabelsConfig:
    """Kubernetes pod labels from the API server, through an allowlist (off by default).

    The pods of this node are listed (``fieldSelector=spec.nodeName``) with the
    pod's service account, on their own interval, and cached; the labels in
    ``keys`` of the pods that use an accelerator are exported on
    ``accel_pod_labels_info`` as ``label_<key>``. Needs RBAC get/list/watch on pods.
    """

    HELP: ClassVar[dict[str, str]] = {
        "enabled": "export allowlisted pod labels from the API server",
        "keys": "the allowlist of pod label keys (exact names)",
        "interval": "time between two pod listings",
        "timeout": "deadline of one pod listing",
        "max_reply_bytes": "largest pod list accepted",
        "api_server": "API server URL (empty: in-cluster)",
        "node_name": "this node's name (empty: $NODE_NAME)",
        "token_file": "service account token",
        "ca_file": "CA bundle of the API server",
    }

    enabled: bool = False
    # The allowlist: exact label keys (e.g. team, app.kubernetes.io/name). The exported
    # label set is fixed when the daemon starts, so no patterns.
    keys: list[str] = field(default_factory=list)
    interval: Duration = 60.0
    timeout: Duration = 10.0
    # A node's pod list is small; a larger reply is refused (never read into memory).
    max_reply_bytes: int = 16 * 1024 * 1024
    # Empty: in-cluster, https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT.
    api_server: str = ""
    # Empty: $NODE_NAME (the chart sets it from the downward API spec.nodeName).
    node_name: str = ""
    token_file: str = f"{SERVICE_ACCOUNT_DIR}/token"
    ca_file: str = f"{SERVICE_ACCOUNT_DIR}/ca.crt"

    def check(self) -> list[tuple[str, str]]:
        """Label keys valid and distinct once exported; positive timings; an https URL."""
        import re

        from exporter.catalog.workload import pod_label_name

        out = []
        if self.enabled and not self.keys:
            out.append(("keys", "enabled needs at least one label key (the allowlist)"))
        seen: dict[str, str] = {}
        for i, key in enumerate(self.keys):
            if not re.match(LABEL_KEY, key) or len(key) > 317:
                out.append((f"keys.{i}", f"{key!r} is not a Kubernetes label key"))
                continue
            name = pod_label_name(key)
            if name in seen:
                out.append((f"keys.{i}", f"{key!r} is exported as {name}, like {seen[name]!r}"))
            seen[name] = key
        if self.interval < MIN_INTERVAL:
            out.append(("interval", f"must be at least {int(MIN_INTERVAL * 1000)}ms"))
        if self.timeout <= 0:
            out.append(("timeout", "must be positive"))
        if self.max_reply_bytes < 64 * 1024:
            out.append(("max_reply_bytes", "must be at least 64 KiB (65536)"))
        if self.api_server and not self.api_server.startswith("https://"):
            out.append(("api_server", "must be an https:// URL"))
        return out


@dataclass(frozen=True)
class DraConfig:
    """Dynamic Resource Allocation: this node's ResourceSlices, to map DRA claims to devices.

    The kubelet names a DRA device by (driver, pool, device); the driver's
    ResourceSlice (``resource.k8s.io/v1``) carries its UUID or PCI address. The
    slices of this node are listed from the API server (the server, node name and
    credentials of ``pod_labels``), cached, and listed again on ``interval`` or as
    soon as a claim names a device the cache lacks. Needs RBAC get/list/watch on
    ``resourceslices.resource.k8s.io``.
    """

    HELP: ClassVar[dict[str, str]] = {
        "enabled": "map DRA claims to devices through ResourceSlices (auto: in a cluster)",
        "interval": "time between two ResourceSlice listings",
        "min_interval": "shortest time between listings asked for by an unknown device",
        "timeout": "deadline of one ResourceSlice listing",
        "max_reply_bytes": "largest ResourceSlice list accepted",
    }

    enabled: Enabled = "auto"
    interval: Duration = 300.0
    min_interval: Duration = 5.0
    timeout: Duration = 10.0
    max_reply_bytes: int = 16 * 1024 * 1024

    def check(self) -> list[tuple[str, str]]:
        """Positive timings, ordered; a reply limit of at least 64 KiB."""
        out = []
        if self.min_interval < MIN_INTERVAL:
            out.append(("min_interval", f"must be at least {int(MIN_INTERVAL * 1000)}ms"))
        if self.interval < self.min_interval:
            out.append(("interval", "must be at least min_interval"))
        if self.timeout <= 0:
            out.append(("timeout", "must be positive"))
        if self.max_reply_bytes < 64 * 1024:
            out.append(("max_reply_bytes", "must be at least 64 KiB (65536)"))
        return out


@dataclass(frozen=True)
class K8sEnrichConfig:
    """Kubernetes pod attribution from the kubelet pod-resources API (v1 List)."""

    HELP: ClassVar[dict[str, str]] = {
        "enabled": "attribute devices to pods through the kubelet (auto: if its socket exists)",
        "socket": "the kubelet pod-resources socket",
        "interval": "time between two kubelet queries",
        "timeout": "deadline of one kubelet query",
        "resource_names": "extended resource names of accelerators",
        "resource_patterns": "regexes of more resource names (MIG, shared GPUs)",
        "max_message_bytes": "largest pod-resources reply accepted",
        "stamp_device_series": "also put workload labels on device series",
        "stamp_labels": "the labels stamped (namespace, pod, container)",
        "pod_labels": "allowlisted pod labels from the API server (off by default)",
        "dra": "DRA claims mapped to devices through the node's ResourceSlices",
    }

    # Keys that were renamed: the loader names the new key in its error.
    RENAMED: ClassVar[dict[str, str]] = {
        "pod_label_allowlist": "stamp_labels; Kubernetes pod labels are pod_labels.keys"
    }

    enabled: Enabled = "auto"
    socket: str = "/var/lib/kubelet/pod-resources/kubelet.sock"
    # How often the kubelet is asked; between refreshes the last answer is reused.
    interval: Duration = 30.0
    timeout: Duration = 5.0
    resource_names: list[str] = field(default_factory=lambda: ["nvidia.com/gpu", "amd.com/gpu"])
    # Regexes of extra resource names: MIG profiles (nvidia.com/mig-1g.10gb), and the
    # shared GPUs of time-slicing or MPS with renameByDefault (nvidia.com/gpu.shared).
    resource_patterns: list[str] = field(
        default_factory=lambda: [r"^nvidia\.com/mig-.*$", r"^nvidia\.com/gpu\.shared$"]
    )
    max_message_bytes: int = 64 * 1024 * 1024
    # Stamp workload labels onto device series (off: join on accel_device_workload_info).
    stamp_device_series: bool = False
    # The labels stamped, from namespace, pod, container; nothing is stamped unless listed.
    stamp_labels: list[str] = field(default_factory=list)
    pod_labels: PodLabelsConfig = field(default_factory=PodLabelsConfig)
    dra: DraConfig = field(default_factory=DraConfig)

    def check(self) -> list[tuple[str, str]]:
        """Valid regexes, positive timings, a reply limit of at least 16 MiB."""
        import re

        out = []
        for i, pattern in enumerate(self.resource_patterns):
            try:
                re.compile(pattern)
            except re.error as exc:
                out.append((f"resource_patterns.{i}", f"is not a valid regex: {exc}"))
        if self.interval < MIN_INTERVAL:
            out.append(("interval", f"must be at least {int(MIN_INTERVAL * 1000)}ms"))
        if self.timeout <= 0:
            out.append(("timeout", "must be positive"))
        if self.max_message_bytes < MIN_POD_RESOURCES_MESSAGE_BYTES:
            out.append(("max_message_bytes", "must be at least 16 MiB (16777216)"))
        if not self.socket:
            out.append(("socket", "needs a path"))
        for i, label in enumerate(self.stamp_labels):
            if label not in STAMPABLE_LABELS:
                out.append((f"stamp_labels.{i}", f"must be one of {list(STAMPABLE_LABELS)}"))
        if self.stamp_device_series and not self.stamp_labels:
            out.append(("stamp_labels", "stamp_device_series needs at least one label here"))
        if self.pod_labels.enabled and self.enabled is False:
            out.append(("pod_labels.enabled", "needs workload.k8s.enabled auto or true"))
        return out


@dataclass(frozen=True)
class SlurmEnrichConfig:
    """Slurm job attribution from process cgroups and environments, or prolog files."""

    HELP: ClassVar[dict[str, str]] = {
        "enabled": "attribute devices to Slurm jobs (auto: where Slurm runs)",
        "mode": "proc: from process cgroups and environments; files: prolog files",
        "files_dir": "where contrib/slurm/prolog.sh writes its files",
    }

    enabled: Enabled = "auto"
    mode: Literal["proc", "files"] = "proc"
    files_dir: str = "/run/accel-exporter/slurm"


@dataclass(frozen=True)
class WorkloadConfig(SourceConfig):
    """Workload attribution: one source ("workload") joining devices, processes and workloads.

    It reads the device sources' latest data from the store (never on scrape), the
    kubelet (``k8s``) and /proc or prolog files (``slurm``), on its own interval.
    """

    HELP: ClassVar[dict[str, str]] = {
        "proc_path": "where /proc is mounted (the host's, in a container)",
        "k8s": "Kubernetes pods, from the kubelet pod-resources API",
        "slurm": "Slurm jobs, from process cgroups or prolog files",
    }

    enabled: Enabled = "auto"
    interval: Duration = 15.0
    proc_path: str = "/proc"
    k8s: K8sEnrichConfig = field(default_factory=K8sEnrichConfig)
    slurm: SlurmEnrichConfig = field(default_factory=SlurmEnrichConfig)


@dataclass(frozen=True)
class OtlpOutputConfig:
    """OTLP metrics push (off by default).

    A key left unset here is the SDK exporter's: it reads the standard
    ``OTEL_EXPORTER_OTLP_METRICS_*`` and ``OTEL_EXPORTER_OTLP_*`` variables, then its
    default (see docs/otlp.md): explicit configuration wins, as the OpenTelemetry spec asks.
    """

    HELP: ClassVar[dict[str, str]] = {
        "enabled": "push metrics over OTLP",
        "endpoint": "collector URL (http/protobuf) or gRPC target",
        "protocol": "OTLP transport (unset: OTEL_EXPORTER_OTLP_PROTOCOL, else http/protobuf)",
        "interval": "time between two pushes (unset: OTEL_METRIC_EXPORT_INTERVAL, else 30s)",
        "timeout": "deadline of one push (unset: OTEL_*_TIMEOUT in ms, else 10s)",
        "headers": "headers sent with every push (tokens)",
        "compression": "push compression (unset: OTEL_*_COMPRESSION, else gzip)",
        "insecure": "gRPC without TLS (endpoints without a scheme only)",
        "certificate_file": "CA bundle that signs the collector's certificate",
        "client_certificate_file": "client certificate for mTLS to the collector",
        "client_key_file": "key of client_certificate_file",
        "temporality": "counter temporality (unset: OTEL_* preference, else cumulative)",
        "resource_attributes": "resource attributes that win over detection",
    }

    enabled: bool = False
    # Base URL (http/protobuf: /v1/metrics is appended unless already there) or gRPC target.
    endpoint: str = ""
    protocol: Literal["grpc", "http/protobuf"] | None = None
    interval: Duration | None = None
    timeout: Duration | None = None
    headers: dict[str, Secret] = field(default_factory=dict)
    compression: Literal["none", "gzip"] | None = None
    # gRPC only, and only for an endpoint without http:// or https://.
    insecure: bool | None = None
    certificate_file: FilePath = ""
    client_certificate_file: FilePath = ""
    client_key_file: FilePath = ""
    temporality: Literal["cumulative", "delta"] | None = None
    # Resource attributes that win over detection and OTEL_RESOURCE_ATTRIBUTES.
    resource_attributes: dict[str, str] = field(default_factory=dict)

    def check(self) -> list[tuple[str, str]]:
        """Positive timings (the OTEL_* merge is checked by load_config, with its env)."""
        out = []
        if self.interval is not None and self.interval < MIN_INTERVAL:
            out.append(("interval", f"must be at least {int(MIN_INTERVAL * 1000)}ms"))
        if self.timeout is not None and self.timeout <= 0:
            out.append(("timeout", "must be positive"))
        return out


CompatName = Literal["dcgm", "amd"]


@dataclass(frozen=True)
class PrometheusOutputConfig:
    """What /metrics carries beyond our own series (nothing, by default)."""

    HELP: ClassVar[dict[str, str]] = {
        "compat": "also serve dcgm-exporter 4.x (dcgm), device-metrics-exporter 1.5 (amd) series",
        "workload_labels": "pod, namespace, container, job_id on device series while attributed",
        "cluster_name": "the cluster_name label of the amd compat series",
    }

    compat: list[CompatName] = field(default_factory=list)
    workload_labels: bool = False
    cluster_name: str = ""


@dataclass(frozen=True)
class KubernetesOutputConfig:
    """The health verdict written to Kubernetes (docs/kubernetes-health.md); off by default."""

    HELP: ClassVar[dict[str, str]] = {
        "enabled": "write DeviceTaintRules and a Node condition for this node's devices",
        "interval": "time between two reconciliations",
        "timeout": "deadline of one API request",
        "taint_rules": "a DeviceTaintRule per failed device (DRA clusters)",
        "taint_effect": "effect after the first, effect-less rule: None, NoSchedule, NoExecute",
        "taint_degraded": "taint degraded devices too, not only failed ones",
        "taint_key": "the taint's key",
        "clear_after": "a device healthy this long loses its taint (hysteresis)",
        "node_condition": "the Node condition AcceleratorHealthy (device-plugin clusters)",
        "api_server": "API server URL (empty: in-cluster)",
        "node_name": "this node's name (empty: $NODE_NAME)",
        "token_file": "service account token",
        "ca_file": "CA bundle of the API server",
    }

    enabled: bool = False
    interval: Duration = 30.0
    timeout: Duration = 10.0
    taint_rules: bool = True
    # Rules are created with effect None (they only report what they would do); this
    # effect is set one reconciliation later. None keeps them report-only.
    taint_effect: Literal["None", "NoSchedule", "NoExecute"] = "None"
    taint_degraded: bool = False
    taint_key: str = "accel-exporter.io/unhealthy"
    clear_after: Duration = 300.0
    node_condition: bool = True
    api_server: str = ""
    node_name: str = ""
    token_file: str = f"{SERVICE_ACCOUNT_DIR}/token"
    ca_file: str = f"{SERVICE_ACCOUNT_DIR}/ca.crt"

    def check(self) -> list[tuple[str, str]]:
        """Positive timings; a taint key that is a label name."""
        import re

        out = []
        if self.interval < MIN_INTERVAL:
            out.append(("interval", f"must be at least {int(MIN_INTERVAL * 1000)}ms"))
        if self.timeout <= 0:
            out.append(("timeout", "must be positive"))
        if self.clear_after < 0:
            out.append(("clear_after", "must not be negative"))
        if not re.fullmatch(LABEL_KEY, self.taint_key):
            out.append(("taint_key", "must be a label name ([prefix/]name)"))
        return out


@dataclass(frozen=True)
class OutputsConfig:
    """Push outputs (Prometheus pull is always on, in ``web``)."""

    HELP: ClassVar[dict[str, str]] = {
        "otlp": "OTLP metrics push (off by default)",
        "kubernetes": "device health to Kubernetes: DeviceTaintRules, Node condition (off)",
        "prometheus": "compat series and workload labels on /metrics (off by default)",
    }

    otlp: OtlpOutputConfig = field(default_factory=OtlpOutputConfig)
    kubernetes: KubernetesOutputConfig = field(default_factory=KubernetesOutputConfig)
    prometheus: PrometheusOutputConfig = field(default_factory=PrometheusOutputConfig)


@dataclass(frozen=True)
class HealthConfig:
    """How the health verdict weighs device events (docs/health.md)."""

    HELP: ClassVar[dict[str, str]] = {
        "event_window": "how long an XID or AFID counts, from the event's own time",
        "xid_actions": "XID code -> action, over NVIDIA's catalog (e.g. '13': none)",
        "afid_actions": "AFID -> action, from AMD's AFID Event List (unlisted: service)",
    }

    event_window: Duration = 3600.0
    xid_actions: dict[str, str] = field(default_factory=dict)
    afid_actions: dict[str, str] = field(default_factory=dict)

    def check(self) -> list[tuple[str, str]]:
        """A positive window; override keys that are codes, values in the vocabulary."""
        out: list[tuple[str, str]] = []
        if self.event_window <= 0:
            out.append(("event_window", "must be more than 0"))
        for key, table in (("xid_actions", self.xid_actions), ("afid_actions", self.afid_actions)):
            for code, action in table.items():
                if not code.isdigit():
                    out.append((f"{key}.{code}", "is not a code (a whole number)"))
                if action not in ACTIONS:
                    out.append((f"{key}.{code}", f"must be one of {', '.join(ACTIONS)}"))
        return out


@dataclass(frozen=True)
class Config:
    """The whole, validated configuration."""

    # Old names still read, with a "renamed" warning: old key -> new key.
    ALIASES: ClassVar[dict[str, str]] = {"enrich": "workload"}
    HELP: ClassVar[dict[str, str]] = {
        "web": "the HTTP server: /metrics, /status, /healthz, /readyz",
        "log": "log level and format",
        "workload": "which pod, container or Slurm job uses each device",
        "health": "the health verdict: event window, action overrides",
    }

    web: WebConfig = field(default_factory=WebConfig)
    log: LogConfig = field(default_factory=LogConfig)
    sources: SourcesConfig = field(default_factory=SourcesConfig)
    workload: WorkloadConfig = field(default_factory=WorkloadConfig)
    outputs: OutputsConfig = field(default_factory=OutputsConfig)
    health: HealthConfig = field(default_factory=HealthConfig)
