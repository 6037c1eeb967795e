"""Every backend's fake, in one daemon: no label value outside its catalog enumeration.

NVIDIA (fake libnvidia-ml), AMD (fake libamd_smi), Intel (fake Level Zero loader),
Gaudi (fake libhlml), TPU (fake metric service) and Neuron (fake neuron-monitor)
are exported together; every sample of every family with enumerated labels must
carry listed values, and the ECC counters of every vendor that has them must use
one vocabulary. The daemon runs strict (tests/conftest.py): an unlisted value
would make its source's poll fail, so every source must also be up.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from exporter.catalog import CATALOG
from exporter.catalog.vocabulary import ECC_CORRECTION
from tests.fakes.amdsmi.state import FakeAmdSmi
from tests.fakes.hlml.control import FakeHlml
from tests.fakes.levelzero.control import FakeZe
from tests.fakes.neuron import control as neuron
from tests.fakes.tpu import control as tpu
from tests.helpers.daemon import samples, value

SOURCES = ("nvml", "amdsmi", "levelzero", "hlml", "tpu", "neuron")
# accel_devices{vendor} of each fake node below.
DEVICES = {"nvidia": 2, "amd": 8, "intel": 4, "intel_gaudi": 8, "google": 4, "aws": 2}
# The vendors whose library reports ECC counts (TPU's metric service has none).
ECC_VENDORS = {"nvidia", "amd", "intel", "intel_gaudi", "aws"}


def test_no_backend_emits_a_label_value_outside_its_enumeration(
    daemon_factory: Any,
    fake_nvml: Any,
    amdsmi_env: dict[str, str],
    amdsmi_fake: FakeAmdSmi,
    ze_lib: Path,
    ze_fake: FakeZe,
    hlml_lib: Path,
    hlml_fake: FakeHlml,
    tmp_path: Path,
) -> None:
    nv = fake_nvml(2)
    tpu_host = tpu.make_host(tmp_path / "tpu-host", 4)
    service = tpu.FakeService(tmp_path / "svc", {"devices": tpu.devices(4)}).start()
    try:
        monitor = neuron.FakeMonitor(tmp_path / "neuron.json")
        monitor.set(
            devices=2,
            cores_per_device=2,
            ecc=[{"neuron_device_index": 1, "mem_ecc_corrected": 2, "sram_ecc_uncorrected": 1}],
        )
        ze_fake.device(0).throttle[0] = 8 | 256  # two throttle reasons active
        timing = {"interval": "1s", "slow_interval": "1s"}
        workers = {**timing, "timeout": "3s", "bootstrap_timeout": "20s"}
        config = {
            "sources": {
                "host": {"enabled": False},
                "nvml": timing,
                "amdsmi": timing,
                "levelzero": {**workers, "library_path": str(ze_lib)},
                "hlml": {**workers, "library_path": str(hlml_lib)},
                "tpu": {**timing, "host_root": str(tpu_host), "addresses": [service.address]},
                "neuron": {
                    "interval": "1s",
                    "host_root": str(neuron.make_host(tmp_path / "neuron-host", 2)),
                    "command": monitor.command,
                },
            }
        }
        env = {**nv.env(), **amdsmi_env, **ze_fake.env, **hlml_fake.env}
        d = daemon_factory(config=config, env=env)

        def polled() -> bool:
            got = samples(d.metrics())
            return all(
                value(got, "accel_exporter_source_up", source=s) is not None for s in SOURCES
            )

        d.wait_for(polled, timeout=60, what="a poll of every source")
        refused = [line for line in d.lines if "LabelValueError" in line]
        assert refused == []
        for vendor, count in DEVICES.items():
            d.wait_metric("accel_devices", count, vendor=vendor, timeout=60)
        # The slow polls (ECC) and the neuron report have come in for every vendor.
        d.wait_for(
            lambda: ecc_vendors(samples(d.metrics())) >= ECC_VENDORS,
            timeout=40,
            what="ECC counters of every vendor",
        )
        got = samples(d.metrics())
    finally:
        service.stop()

    for source in SOURCES:
        assert value(got, "accel_exporter_source_up", source=source) == 1, source
    vendors = vendor_of(got)
    unlisted = []
    seen: dict[tuple[str, str], set[str]] = {}
    for (name, labels), _ in got.items():
        row = CATALOG.get(name)
        if row is None or not row.values:
            continue
        have = dict(labels)
        for label, allowed in row.values.items():
            # Prometheus leaves an empty label out of the text.
            word = have.get(label, "")
            seen.setdefault((name, label), set()).add(word)
            if word not in allowed:
                vendor = vendors.get(have.get("uuid", ""), "?")
                unlisted.append(f"{vendor}: {name}{{{label}={word!r}}}")
    assert unlisted == []
    # The test saw the labels it is about, from the vendors that have them.
    assert ecc_vendors(got) == ECC_VENDORS
    for vendor in ECC_VENDORS:
        types = {
            dict(labels)["type"]
            for (name, labels) in got
            if name == "accel_ecc_errors_total" and vendors[dict(labels)["uuid"]] == vendor
        }
        assert set(ECC_CORRECTION) & types, vendor
        assert types <= {*ECC_CORRECTION, "deferred"}, (vendor, types)
    assert len(seen[("accel_temperature_celsius", "sensor")]) > 5
    assert len(seen[("accel_clock_hertz", "clock")]) > 4
    assert len(seen[("accel_clock_throttle_active", "reason")]) > 10


def vendor_of(got: dict[tuple[str, tuple[tuple[str, str], ...]], float]) -> dict[str, str]:
    """uuid -> vendor, from accel_device_info."""
    out = {}
    for name, labels in got:
        if name == "accel_device_info":
            have = dict(labels)
            out[have["uuid"]] = have["vendor"]
    return out


def ecc_vendors(got: dict[tuple[str, tuple[tuple[str, str], ...]], float]) -> set[str]:
    vendors = vendor_of(got)
    return {
        vendors.get(dict(labels)["uuid"], "?")
        for name, labels in got
        if name == "accel_ecc_errors_total"
    }
