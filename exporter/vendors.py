"""Every device vendor the daemon knows: one entry each, the one place a vendor is registered.

Everything else is derived from :data:`VENDORS`: the source the daemon builds
for it (:mod:`exporter.sources.registry`), the help and "did you mean" words
of its config section (:class:`exporter.config.sources.SourcesConfig`), its
catalog module among the catalog's domains (:mod:`exporter.catalog`), the
``source`` values of ``accel_field_errors_total``
(:data:`exporter.catalog.vocabulary.DEVICE_BACKENDS`), its PCI vendor id
(:mod:`exporter.sources.pci`) and the vendors ``check devices`` accepts.
Besides its entry here, a vendor has a typed field on ``SourcesConfig`` (its
section, which mypy needs to know by name); tests/unit/test_vendors.py fails
when the two disagree. docs/architecture.md ("How to add a backend") lists
the files a new vendor writes.

This module imports nothing of the daemon's: the catalog, the lowest layer,
reads it, so every layer above may too. Names of modules and classes are
strings, imported by whoever needs them (the daemon never imports a backend).
The order of :data:`VENDORS` is the polling order of their sources and the
order of their catalog rows in the exposition.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Library:
    """A vendor library: its SONAME, its documented install paths, how to get it.

    For a binding that opens its library by one absolute path: the daemon looks
    for it (:mod:`exporter.host.libsearch`) before starting a worker.
    """

    soname: str
    documented: tuple[str, ...]
    key: str  # the config key that names it explicitly
    install: str  # the packages that install it


@dataclass(frozen=True)
class Vendor:
    """One device vendor: its source, its section, its catalog rows, its backend."""

    # The source's name: its config section (sources.<name>), the source label of its
    # series and of accel_field_errors_total. Named for the library it reads.
    name: str
    # The vendor label of accel_device_info (the backend's inventory says it too;
    # this one is exported before the library ever answers).
    label: str
    # What its devices are called in prose ("Intel Gaudi"): docs/metrics.md's section.
    title: str
    # The section's one-line help (--help, docs/configuration.md).
    help: str
    # Words a user may write for the section ("did you mean sources.nvml?").
    synonyms: tuple[str, ...]
    # Its catalog module, exporter.catalog.<catalog>: the vendor's own families.
    catalog: str
    # The worker's backend, "module:Class" (exporter.backends.base.Backend).
    backend: str = ""
    # Keys of its section handed to the backend as its config, by name.
    options: tuple[str, ...] = ()
    # The library looked for before a worker is started (None: the binding searches).
    library: Library | None = None
    # Where the binding searches by rules of its own (environment variables, its
    # package's directory): "module:function" returning (reason, detail) when no worker
    # could load it, else None; checked, like ``library``, before a worker is started.
    precheck: str = ""
    # The source class, "module:Class", taking (name, section, health=<the health
    # section>), when it is not a plain
    # exporter.sources.device.DeviceSource built from the fields above.
    source: str = ""
    # Its accelerators' PCI vendor id (accel_pci_devices counts them; 0: not counted).
    pci_vendor: int = 0
    # The key of its section naming where the daemon keeps its worker's record ledger
    # (what was consumed of each device's record stream); "": no ledger.
    ledger: str = ""
    # Its backend counts failed fields in accel_field_errors_total{source=<name>}.
    field_errors: bool = True
    # How far a reset of one of its devices reaches (an action scope of
    # exporter.catalog.vocabulary.ACTION_SCOPES): the health judge widens every
    # reset_device finding of its source to it. AMD: a GPU reset inside an XGMI hive
    # "can have effects beyond the selected device" (ROCm/rocm-systems
    # projects/amdsmi/docs/conceptual/gpu-reset-behavior.md @ c893fac3): peer_domain.
    reset_scope: str = "device"


# Debian/Ubuntu's multiarch path (pyzes's hard-coded one); RHEL, Fedora and SUSE
# package it in %{_libdir}, /usr/lib64; Arch-style distributions in /usr/lib.
LEVELZERO = Library(
    "libze_loader.so.1",
    (
        "/usr/lib/x86_64-linux-gnu/libze_loader.so.1",
        "/usr/lib64/libze_loader.so.1",
        "/usr/lib/libze_loader.so.1",
    ),
    "sources.levelzero.library_path",
    "the Level Zero loader (libze1 on Debian/Ubuntu, level-zero on RHEL/SUSE/Fedora)",
)
# habanalabs-firmware-tools installs it here on every distribution Habana supports.
HLML = Library(
    "libhlml.so",
    ("/usr/lib/habanalabs/libhlml.so",),
    "sources.hlml.library_path",
    "habanalabs-firmware-tools",
)

VENDORS: tuple[Vendor, ...] = (
    Vendor(
        "nvml",
        "nvidia",
        "NVIDIA",
        "NVIDIA GPUs through NVML (in a worker process)",
        ("nvidia", "dcgm"),
        "nvidia",
        "exporter.backends.nvml:NvmlBackend",
        options=("events", "processes"),
        pci_vendor=0x10DE,
    ),
    Vendor(
        "amdsmi",
        "amd",
        "AMD",
        "AMD GPUs through amdsmi (in a worker process)",
        ("amd", "rocm", "rocm_smi"),
        "amd",
        "exporter.backends.amdsmi:AmdSmiBackend",
        options=("events", "event_types", "sys_path", "dev_path", "cper_per_poll"),
        pci_vendor=0x1002,
        precheck="exporter.host.libsearch:amdsmi_absent",
        ledger="state_dir",
        reset_scope="peer_domain",
    ),
    Vendor(
        "levelzero",
        "intel",
        "Intel GPU",
        "Intel GPUs through Level Zero Sysman (pyzes, in a worker process)",
        ("intel", "xpu", "level_zero"),
        "intel",
        "exporter.backends.levelzero:LevelZeroBackend",
        options=("library_path",),
        library=LEVELZERO,
        pci_vendor=0x8086,
    ),
    Vendor(
        "hlml",
        "intel_gaudi",
        "Intel Gaudi",
        "Intel Gaudi through libhlml (habana-pyhlml, in a worker process)",
        ("gaudi", "habana"),
        "gaudi",
        "exporter.backends.hlml:HlmlBackend",
        options=("library_path", "nic_statistics"),
        library=HLML,
        pci_vendor=0x1DA3,
    ),
    # The TPU source names its worker and derives the worker's config (the gRPC
    # deadline from the poll's); it counts chips itself (exporter.host.tpu_chips),
    # not as accel_pci_devices.
    Vendor(
        "tpu",
        "google",
        "Google TPU",
        "Google TPUs: chips from the host, metrics from libtpu",
        ("google",),
        "tpu",
        source="exporter.sources.tpu:TpuSource",
    ),
    # neuron-monitor streams its reports to the daemon itself (no worker, no field reads).
    Vendor(
        "neuron",
        "aws",
        "AWS Neuron",
        "AWS Trainium / Inferentia through neuron-monitor",
        ("aws", "trainium", "inferentia"),
        "neuron",
        source="exporter.sources.neuron:NeuronSource",
        field_errors=False,
    ),
)
