"""The device sources: one section per vendor library (``sources.nvml``, ``amdsmi``, ...)."""

from __future__ import annotations

from dataclasses import dataclass

from exporter.catalog.vocabulary import AMD_HEALTH_EVENTS, AmdEvent
from exporter.config.fields import Duration, Enabled, at_least, positive, setting
from exporter.config.source import SourceConfig


@dataclass(frozen=True)
class DeviceSourceConfig(SourceConfig):
    """A vendor device backend run in a worker process."""

    enabled: Enabled = "auto"
    interval: Duration = 5.0
    # Inventory, ECC, retired pages, remapped rows, link state: slow to read, slow to change.
    slow_interval: Duration = setting(
        60.0, "time between reads of slow-changing data (inventory, ECC, links)"
    )
    # Time allowed for the worker to load the library and enumerate devices.
    bootstrap_timeout: Duration = setting(
        30.0, "time for the worker to load the library and list devices"
    )
    # Per-process series (pid label): off by default for cardinality.
    processes: bool = setting(False, "per-process series with a pid label (cardinality)")
    events: bool = setting(True, "count device events (NVIDIA XIDs)")
    # The accelerators this node should have, exported as accel_devices_expected so an
    # alert can tell a node that booted short; set, it also makes a missing library a failure.
    expected_devices: int | None = setting(
        None, "devices this node should have (accel_devices_expected)"
    )
    # Where the PCI bus is read (bus/pci/devices) to count this vendor's accelerators
    # as accel_pci_devices, whether or not the library sees them: the host's, if
    # mounted elsewhere.
    sys_path: str = setting("/sys", "where /sys is read to count this vendor's PCI devices")

    def check(self) -> list[tuple[str, str]]:
        """The slow interval cannot be shorter than the fast one; an expected count is positive."""
        out = super().check()
        if self.slow_interval < self.interval:
            out.append(("slow_interval", "must be at least interval"))
        out += positive(self, "bootstrap_timeout")
        if self.expected_devices is not None and self.expected_devices < 1:
            out.append(("expected_devices", "must be at least 1 (leave it unset on other nodes)"))
        return out


@dataclass(frozen=True)
class AmdSmiSourceConfig(DeviceSourceConfig):
    """AMD GPUs through amdsmi; ``event_types`` picks the event notifications counted."""

    event_types: list[AmdEvent] = setting(
        factory=lambda: list(AMD_HEALTH_EVENTS), help="amdsmi event notifications counted"
    )
    # Where to look for the amdgpu driver (module/amdgpu under sys_path, kfd under
    # dev_path) when amdsmi_init fails, to tell "no AMD driver here" from a fault.
    dev_path: str = setting("/dev", "where /dev is read to tell no driver from a fault")
    # Where the CPER cursor and AFID counts are kept across daemon restarts (a small
    # JSON file); empty: in memory only, so a restarted daemon reads each GPU's CPER
    # ring again from its start and counts those records again.
    state_dir: str = setting("", "where CPER cursors and AFID counts survive daemon restarts")
    # CPER records read per GPU and poll: a burst is drained over several polls.
    cper_per_poll: int = setting(
        256, "CPER records read per GPU and poll (bursts drain over polls)"
    )

    def check(self) -> list[tuple[str, str]]:
        """The CPER read bound is positive."""
        return super().check() + at_least(self, 1, "cper_per_poll")


@dataclass(frozen=True)
class LevelZeroSourceConfig(DeviceSourceConfig):
    """Intel GPUs through Level Zero Sysman (pyzes); ``library_path`` is the loader to use."""

    # Unset: Debian's, RHEL/SUSE/Fedora's /usr/lib64 and the loader's search (libsearch).
    library_path: str = setting(
        "", "the Level Zero loader (unset: distributions' paths, then ld.so's)"
    )


@dataclass(frozen=True)
class HlmlSourceConfig(DeviceSourceConfig):
    """Intel Gaudi through libhlml (habana-pyhlml); ``library_path`` is the library to use."""

    library_path: str = setting("", "libhlml (unset: /usr/lib/habanalabs, then where ld.so looks)")
    # Per-port NIC counters (the driver names them; dozens per port): read on slow polls.
    nic_statistics: bool = setting(True, "per-port NIC counters, read on slow polls")


@dataclass(frozen=True)
class TpuSourceConfig(DeviceSourceConfig):
    """Google TPUs: chips counted from the host, runtime metrics from libtpu's gRPC service."""

    # One address per workload process (libtpu: 8431, then TPU_RUNTIME_METRICS_PORTS).
    addresses: list[str] = setting(
        factory=lambda: ["localhost:8431"],
        help="libtpu runtime metrics addresses, one per workload process",
    )
    # Where the host's dev/ and sys/ are read (the host's / mounted elsewhere in a container).
    host_root: str = setting("/", "the host's / (dev/ and sys/ are read under it)")
    max_message_bytes: int = setting(4 * 1024 * 1024, "largest gRPC reply accepted")

    def check(self) -> list[tuple[str, str]]:
        """Distinct host:port addresses, a sane message limit."""
        from exporter.config.addresses import address_list_problems

        out = super().check() + address_list_problems(self.addresses, None, "libtpu")
        return out + at_least(self, 4096, "max_message_bytes")


@dataclass(frozen=True)
class NeuronSourceConfig(SourceConfig):
    """AWS Trainium / Inferentia: devices from sysfs, metrics streamed by neuron-monitor."""

    enabled: Enabled = "auto"
    # Also neuron-monitor's reporting period; no line for three of them is a stall.
    interval: Duration = 5.0
    # Where the host's dev/ and sys/ are read to enumerate the devices.
    host_root: str = setting("/", "the host's / (dev/ and sys/ are read under it)")
    # The program and its arguments; the daemon appends "-c <its own config file>".
    command: list[str] = setting(
        factory=lambda: ["neuron-monitor"],
        help="neuron-monitor and its arguments (-c CONFIG is appended)",
    )
    # One JSON document per line; lines grow with runtimes, cores and loaded models.
    max_line_bytes: int = setting(16 * 1024 * 1024, "longest neuron-monitor report line accepted")

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
