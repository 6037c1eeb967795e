"""The ``sources.fabric`` section: RDMA NICs and PCIe training read from sysfs."""

from __future__ import annotations

from dataclasses import dataclass

from exporter.config.fields import Duration, Enabled, setting
from exporter.config.source import SourceConfig


@dataclass(frozen=True)
class FabricSourceConfig(SourceConfig):
    """InfiniBand/RoCE ports, PCIe link training and AER, joined to the GPUs.

    On by default: it reads a few hundred small sysfs files per poll, and a host
    without /sys/class/infiniband simply has no NICs (the PCIe side still reads the
    accelerators). ``state_dir`` empty means ``health.state_dir``; both empty, the
    flap and outage counts live in memory only.
    """

    enabled: Enabled = True
    interval: Duration = 10.0
    sys_path: str = setting("/sys", "where /sys is read (the host's, in a container)")
    state_dir: str = setting(
        "", "where flap, outage and lost-NIC counts persist ('': health.state_dir)"
    )
