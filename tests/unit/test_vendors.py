"""A device vendor is registered once (exporter/vendors.py); everything else agrees with it.

``missing`` lists what a vendor lacks elsewhere (a typed section on
SourcesConfig, a catalog module among the domains, a factory, the
``source`` value of accel_field_errors_total, ...); it is shown to find each
piece missing on a half-registered vendor, then run on the real table. The
daemon's sources are then compared with what the per-vendor factories built
before the table existed, argument by argument.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
from collections.abc import Iterable
from types import ModuleType

import pytest

from exporter import catalog
from exporter.catalog import device as device_catalog
from exporter.catalog.vocabulary import DEVICE_BACKENDS
from exporter.checks import devices as checks
from exporter.config import load_config
from exporter.config.devices import DeviceSourceConfig
from exporter.config.source import SourceConfig
from exporter.config.sources import SourcesConfig
from exporter.sources import cper_ledger, pci
from exporter.sources.base import Source
from exporter.sources.device import DeviceSource
from exporter.sources.registry import FACTORIES, build_sources
from exporter.vendors import HLML, LEVELZERO, VENDORS, Vendor

# Sources that are no vendor's: the host and the job / workload sources.
NOT_VENDORS = ("host", "ccl_ras", "ccl_inspector", "cuda_checkpoint", "diag", "fabric", "workload")


def section_types() -> dict[str, type]:
    """SourcesConfig's typed sections by name, in declaration order."""
    return {f.name: f.default_factory().__class__ for f in dataclasses.fields(SourcesConfig)}  # type: ignore[misc]


def missing(
    table: Iterable[Vendor],
    sections: dict[str, type],
    domains: Iterable[ModuleType],
    factories: Iterable[str],
    field_error_sources: Iterable[str],
) -> list[str]:
    """What each vendor of ``table`` lacks elsewhere; and sections no vendor registered."""
    table = list(table)
    domains, factories = list(domains), list(factories)
    out = []
    for v in table:
        if v.name not in sections:
            out.append(f"{v.name}: no typed section SourcesConfig.{v.name}")
        elif not issubclass(sections[v.name], DeviceSourceConfig if not v.source else SourceConfig):
            out.append(f"{v.name}: its section is not a device source's")
        module = importlib.util.find_spec(f"exporter.catalog.{v.catalog}")
        if module is None:
            out.append(f"{v.name}: no catalog module exporter.catalog.{v.catalog}")
        elif sum(d.__name__ == module.name for d in domains) != 1:
            out.append(f"{v.name}: catalog module {v.catalog} not once among the domains")
        if v.name not in factories:
            out.append(f"{v.name}: no source factory")
        if v.field_errors != (v.name in field_error_sources):
            out.append(f"{v.name}: accel_field_errors_total source values disagree")
        if not v.backend and not v.source:
            out.append(f"{v.name}: neither a backend nor a source class")
    names = [v.name for v in table]
    vendor_sections = [name for name in sections if name not in NOT_VENDORS]
    out += [
        f"{name}: a section no vendor registered" for name in vendor_sections if name not in names
    ]
    if [n for n in vendor_sections if n in names] != [n for n in names if n in sections]:
        out.append("sections are not in the vendors' order")
    return out


def test_a_half_registered_vendor_is_found_out():
    sections = section_types()
    new = Vendor("acme", "acme", "ACME", "ACME NPUs", ("npu",), "acme", "x.y:AcmeBackend")
    problems = missing(
        [*VENDORS, new], sections, catalog.DOMAINS, [*FACTORIES, "acme"], DEVICE_BACKENDS
    )
    assert problems == [
        "acme: no typed section SourcesConfig.acme",
        "acme: no catalog module exporter.catalog.acme",
        "acme: accel_field_errors_total source values disagree",
    ]
    # A section kept after its vendor's entry went, a domain or a factory dropped.
    nvml, rest = VENDORS[0], VENDORS[1:]
    assert missing(rest, sections, catalog.DOMAINS, FACTORIES, DEVICE_BACKENDS) == [
        "nvml: a section no vendor registered"
    ]
    no_nvidia = [d for d in catalog.DOMAINS if d.__name__ != "exporter.catalog.nvidia"]
    no_factory = [name for name in FACTORIES if name != "nvml"]
    assert missing([nvml], sections, no_nvidia, no_factory, ())[:3] == [
        "nvml: catalog module nvidia not once among the domains",
        "nvml: no source factory",
        "nvml: accel_field_errors_total source values disagree",
    ]


def test_every_vendor_is_registered_everywhere():
    assert missing(VENDORS, section_types(), catalog.DOMAINS, FACTORIES, DEVICE_BACKENDS) == []


def test_what_is_derived_from_the_vendors():
    names = [v.name for v in VENDORS]
    assert len(set(names)) == len(names)
    assert list(FACTORIES)[1 : 1 + len(VENDORS)] == names  # after host, in the table's order
    assert tuple(v.label for v in VENDORS) == checks.VENDORS
    assert {v.label: v.pci_vendor for v in VENDORS if v.pci_vendor} == pci.VENDOR_IDS
    for v in VENDORS:
        assert SourcesConfig.HELP[v.name] == v.help
        for word in v.synonyms:
            assert SourcesConfig.SYNONYMS[word] == v.name
            assert word not in section_types(), word
        section = section_types()[v.name]
        assert set(v.options) <= {f.name for f in dataclasses.fields(section)}, v.name
        if v.ledger:
            assert v.ledger in {f.name for f in dataclasses.fields(section)}
        module, _, cls = (v.backend or v.source).partition(":")
        assert importlib.util.find_spec(module) is not None, v.name
        if v.source:
            assert issubclass(getattr(importlib.import_module(module), cls), Source)
    # The accel_field_errors_total row's source values are the counting vendors, in order.
    (row,) = [r for r in device_catalog.ROWS if r.name == "accel_field_errors_total"]
    assert row.values["source"] == DEVICE_BACKENDS
    # The catalog's domains: the vendors' modules in their order, the totals after AMD's.
    order = [d.__name__.rpartition(".")[2] for d in catalog.DOMAINS]
    assert order == [
        "exporter_self",
        "host",
        "device",
        "nvidia",
        "amd",
        "totals",
        "intel",
        "gaudi",
        "tpu",
        "neuron",
        "ccl",
        "diag",
        "workload",
        "fabric",
    ]


# What the per-vendor factories of sources/registry.py passed before the table, for
# the config below: (class, backend, backend config, vendor label, library, ledger).
CONFIG = {
    "ACCEL_EXPORTER_SOURCES__NVML__PROCESSES": "true",
    "ACCEL_EXPORTER_SOURCES__AMDSMI__EVENT_TYPES": '["vmfault"]',
    "ACCEL_EXPORTER_SOURCES__AMDSMI__SYS_PATH": "/host/sys",
    "ACCEL_EXPORTER_SOURCES__AMDSMI__STATE_DIR": "/var/lib/x",
    "ACCEL_EXPORTER_SOURCES__LEVELZERO__LIBRARY_PATH": "/opt/ze.so",
    "ACCEL_EXPORTER_SOURCES__HLML__NIC_STATISTICS": "false",
}
BEFORE = {
    "nvml": (
        "DeviceSource",
        "exporter.backends.nvml:NvmlBackend",
        {"events": True, "processes": True},
        "nvidia",
        None,
        "",
    ),
    "amdsmi": (
        "DeviceSource",
        "exporter.backends.amdsmi:AmdSmiBackend",
        {
            "events": True,
            "event_types": ["vmfault"],
            "sys_path": "/host/sys",
            "dev_path": "/dev",
            "cper_per_poll": 256,
        },
        "amd",
        None,
        "/var/lib/x",
    ),
    "levelzero": (
        "DeviceSource",
        "exporter.backends.levelzero:LevelZeroBackend",
        {"library_path": "/opt/ze.so"},
        "intel",
        LEVELZERO,
        "",
    ),
    "hlml": (
        "DeviceSource",
        "exporter.backends.hlml:HlmlBackend",
        {"library_path": "", "nic_statistics": False},
        "intel_gaudi",
        HLML,
        "",
    ),
    "tpu": (
        "TpuSource",
        "exporter.backends.tpu:TpuBackend",
        {
            "addresses": ["localhost:8431"],
            "host_root": "/",
            "max_message_bytes": 4194304,
            "call_timeout": pytest.approx(2.19),
        },
        "google",
        None,
        "",
    ),
}


def test_the_daemon_builds_each_vendor_source_as_its_factory_did():
    config = load_config(None, env=CONFIG)
    built = {s.name: s for s in build_sources(config)}
    for name, (cls, backend, options, label, library, ledger) in BEFORE.items():
        source = built[name]
        assert isinstance(source, DeviceSource)
        assert type(source).__name__ == cls
        assert (source.runner.backend, source.runner.config) == (backend, options), name
        assert source.device_config is getattr(config.sources, name)
        assert (source._default_vendor, source._library) == (label, library), name
        assert source.ledger is (cper_ledger.store_for(ledger) if ledger else None), name
    assert type(built["neuron"]).__name__ == "NeuronSource"
    assert built["neuron"].config is config.sources.neuron
