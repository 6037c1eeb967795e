"""The ``sources`` section: every source the daemon knows, each its own section."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from exporter.config.ccl import CclInspectorSourceConfig, CclRasSourceConfig
from exporter.config.devices import (
    AmdSmiSourceConfig,
    DeviceSourceConfig,
    HlmlSourceConfig,
    LevelZeroSourceConfig,
    NeuronSourceConfig,
    TpuSourceConfig,
)
from exporter.config.diag import DiagSourceConfig
from exporter.config.fabric import FabricSourceConfig
from exporter.config.host import CudaCheckpointSourceConfig, HostSourceConfig
from exporter.vendors import VENDORS


@dataclass(frozen=True)
class SourcesConfig:
    """Every source the daemon knows."""

    # A vendor's help and synonyms come with its entry in exporter.vendors.VENDORS.
    HELP: ClassVar[dict[str, str]] = {
        "host": "host CPU, memory, load and uptime from /proc",
        **{vendor.name: vendor.help for vendor in VENDORS},
        "ccl_ras": "NCCL/RCCL job health from the RAS service (port 28028)",
        "ccl_inspector": "NCCL/RCCL Inspector profiler plugin output (JSONL files)",
        "cuda_checkpoint": "CUDA checkpoint state of GPU processes (CUDA 12.8+)",
        "fabric": "InfiniBand/RoCE NICs and PCIe link training from sysfs, joined to GPUs",
        "diag": "diagnostic results (dcgmi diag --json, AGFHC, RVS) from a directory",
    }

    # Keys that are not here but where a user looks for them: the loader adds the hint.
    HINTS: ClassVar[dict[str, str]] = {
        "workload": "workload attribution is the top-level section workload, not under sources",
        "enrich": "workload attribution is the top-level section workload",
    }
    # Sources are named for their library; the vendor's name suggests it ("did you mean").
    SYNONYMS: ClassVar[dict[str, str]] = {
        **{word: vendor.name for vendor in VENDORS for word in vendor.synonyms},
        "nccl": "ccl_ras",
        "rccl": "ccl_ras",
        "infiniband": "fabric",
        "rdma": "fabric",
        "pcie": "fabric",
    }

    # One typed field per vendor of exporter.vendors.VENDORS, in its order (mypy knows a
    # section by its name only from here; tests/unit/test_vendors.py checks the two agree).
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
    fabric: FabricSourceConfig = field(default_factory=FabricSourceConfig)
    diag: DiagSourceConfig = field(default_factory=DiagSourceConfig)
