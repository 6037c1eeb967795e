"""AMD's config.json read as shipped (compat_fields.amd), the self-count with compat, OTLP compat."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.resources import Resource
from structlog.testing import capture_logs

from exporter.config import load_config
from exporter.errors import ConfigError
from exporter.model import Reading
from exporter.outputs import prometheus_setup, stamp
from exporter.outputs.compat import Compat, amd_fields
from exporter.outputs.compat.amd_unserved import PROF_REASON as _PROF_REASON
from exporter.outputs.otlp_batch import BatchBuilder
from exporter.outputs.profile import Profile
from exporter.outputs.prometheus import Exposition
from exporter.store import Store
from tests.helpers.daemon import samples
from tests.unit.test_compat import AMD, NV, amd, nvidia

SHIPPED = (
    Path(__file__).parents[1] / "fixtures" / "compat" / "device-metrics-exporter" / "config.json"
)


def config_with(tmp_path: Path, doc: Any, **prometheus: Any) -> Any:
    path = tmp_path / "config.json"
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return load_config(
        overrides={
            "outputs.prometheus.compat": "amd",
            "outputs.prometheus.compat_fields.amd": str(path),
            **{f"outputs.prometheus.{k}": v for k, v in prometheus.items()},
        }
    )


def body(store: Store, config: Any) -> str:
    return (
        prometheus_setup.exposition_for(store, config, process_metrics=False)
        .render(None, None)[0]
        .decode()
    )


def lines(text: str, name: str) -> list[str]:
    return [x for x in text.splitlines() if x.startswith(name + "{") or x.startswith(name + " ")]


def test_shipped_config_json_is_read_as_amd_reads_it():
    found = amd_fields.read(str(SHIPPED))
    assert len(found.fields) == 194 and found.fields[0] == "GPU_NODES_TOTAL"
    assert found.prefix == "amd_"
    assert found.custom == (("cluster_name", "amdgpu-k8s-metrics-exporter"),)
    assert {"gpu_uuid", "card_series", "card_vendor", "driver_version", "vbios_version"} <= set(
        found.labels
    )
    # What it asks that we cannot write, said once each.
    assert any(n.startswith("label pod_uuid:") for n in found.notes)
    assert any(n.startswith("label kfd_process_id:") for n in found.notes)


def test_shipped_config_json_served_names_units_and_labels(tmp_path):
    store = Store()
    store.put(amd())
    config = config_with(tmp_path, SHIPPED.read_text())
    with capture_logs() as logs:
        text = body(store, config)
        again = body(store, config)  # a second load of the same file says nothing new
    assert text == again
    # MetricsFieldPrefix "amd_" on every name; units as AMD's (MB, uJ, Mb/s).
    got = samples(text)
    of = lambda name: [v for k, v in got.items() if k[0] == name]  # noqa: E731
    assert of("amd_gpu_used_vram") == [1.5]  # MB
    assert of("amd_gpu_energy_consumed") == [2e6]  # uJ
    assert of("amd_pcie_bandwidth") == [4000]  # Mb/s
    assert of("amd_gpu_health") == [1] and of("amd_gpu_nodes_total") == [1]
    assert not lines(text, "gpu_used_vram")
    labels = dict(next(k for k in samples(text) if k[0] == "amd_gpu_used_vram")[1])
    assert labels == {
        "gpu_id": "0",
        "gpu_uuid": AMD,
        "serial_number": "S1",
        "card_model": "102-G30211-00",
        "card_vendor": "AMD",
        "gpu_partition_id": "0",
        "gpu_compute_partition_type": "spx",
        "hostname": labels["hostname"],
        "cluster_name": "amdgpu-k8s-metrics-exporter",  # CustomLabels
    }
    # An unservable field named once, with its reason, in the log and the info family.
    unserved = [e for e in logs if e["event"] == "compat field not served"]
    prof = [e for e in unserved if e["field"] == "GPU_PROF_SQ_WAVES"]
    assert len(prof) == 1 and prof[0]["reason"] == _PROF_REASON and prof[0]["peer"] == "amd"
    assert len({e["field"] for e in unserved}) == len(unserved)
    info = [k for k in samples(text) if k[0] == "accel_compat_field_unserved_info"]
    fields = [dict(k[1])["field"] for k in info]
    assert "GPU_PROF_SQ_WAVES" in fields and "GPU_USED_VRAM" not in fields
    assert len(fields) == len(set(fields)) == len(unserved)


def test_a_short_list_twice_listed_unknown_and_mandatory_labels(tmp_path):
    store = Store()
    store.put(amd())
    doc = {
        "GPUConfig": {
            "Fields": ["GPU_USED_VRAM", "gpu_used_vram", "GPU_NOT_A_FIELD", "GPU_VOLTAGE"],
            "CustomLabels": {"SITE": "fra1", "GPU_UUID": "x"},
        }
    }
    text = body(store, config_with(tmp_path, doc, cluster_name="prod"))
    served = {k[0] for k in samples(text) if not k[0].startswith("accel_")}
    assert served == {"gpu_used_vram"}  # listed twice, served once
    assert len(lines(text, "gpu_used_vram")) == 1
    labels = dict(next(k for k in samples(text) if k[0] == "gpu_used_vram")[1])
    # No Labels: AMD's mandatory ones only (no gpu_uuid, card_vendor), our cluster_name,
    # the custom label SITE; GPU_UUID cannot be a custom label.
    assert set(labels) == {
        "gpu_id", "serial_number", "card_model", "gpu_partition_id",
        "gpu_compute_partition_type", "hostname", "cluster_name", "site",
    }  # fmt: skip
    assert labels["site"] == "fra1" and labels["cluster_name"] == "prod"
    info = {
        dict(k[1])["field"]: dict(k[1])["reason"]
        for k in samples(text)
        if k[0] == "accel_compat_field_unserved_info"
    }
    assert info == {
        "GPU_NOT_A_FIELD": amd_fields.UNKNOWN,
        "GPU_VOLTAGE": "deprecated: AMD's exporter serves it on no platform",
    }


def test_an_empty_field_list_is_the_default_set(tmp_path):
    store = Store()
    store.put(amd())
    default = body(store, load_config(overrides={"outputs.prometheus.compat": "amd"}))
    text = body(store, config_with(tmp_path, {"GPUConfig": {"Fields": [], "Labels": ["GPU_UUID"]}}))
    names = lambda t: {k[0] for k in samples(t)}  # noqa: E731
    assert names(text) == names(default)
    assert "accel_compat_field_unserved_info" not in text


@pytest.mark.parametrize(
    ("doc", "line", "problem"),
    [
        ('{\n  "GPUConfig": {\n    "Fields": ["GPU_USED_VRAM",]\n  }\n}', 3, "malformed JSON"),
        ('{\n  "GPUConfig": {\n    "Fields": "GPU_USED_VRAM"\n  }\n}', 3, "list of strings"),
        ('{"GPUConfig": {"CustomLabels": {"A": 1}}}', 1, "map names to strings"),
    ],
)
def test_bad_file_is_a_config_error_naming_file_and_line(tmp_path, doc, line, problem):
    path = tmp_path / "config.json"
    path.write_text(doc)
    with pytest.raises(amd_fields.FieldFileError) as err:
        amd_fields.read(str(path))
    assert err.value.line == line
    with pytest.raises(ConfigError) as config_err:
        config_with(tmp_path, doc)
    message = str(config_err.value)
    assert f"outputs.prometheus.compat_fields.amd: {path}:{line}: " in message
    assert problem in message


def test_a_file_broken_after_the_check_keeps_the_last_good_set(tmp_path):
    good = config_with(tmp_path, {"GPUConfig": {"Fields": ["GPU_USED_VRAM"]}})
    store = Store()
    store.put(amd())
    exposition = prometheus_setup.exposition_for(store, good, process_metrics=False)
    (tmp_path / "config.json").write_text('{"GPUConfig": {"Fields": [}')
    with capture_logs() as logs:
        prometheus_setup.reconfigure(exposition, good)
    assert [e["event"] for e in logs if e["log_level"] == "error"] == [
        "compat field file unusable, previous selection kept"
    ]
    assert "config.json:1:" in logs[0]["problem"]
    text = exposition.render(None, None)[0].decode()
    assert {k[0] for k in samples(text) if k[0].startswith("gpu_")} == {"gpu_used_vram"}


def test_unknown_peer_in_compat_fields_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError) as err:
        load_config(overrides={"outputs.prometheus.compat_fields.nvidia": str(SHIPPED)})
    assert "compat_fields.nvidia: not a compat peer" in str(err.value)


@pytest.mark.parametrize("profile", ["minimal", "default", "full"])
def test_self_count_adds_up_with_compat_on(profile):
    store = Store()
    store.put(nvidia())
    store.put(amd())
    config = load_config(
        overrides={
            "outputs.prometheus.compat": "dcgm,amd",
            "outputs.prometheus.profile": profile,
            "outputs.prometheus.workload_labels": "true",
            "outputs.prometheus.cluster_name": "lab",
        }
    )
    text = body(store, config)
    got = samples(text)
    by_source = {dict(k[1])["source"]: v for k, v in got.items() if k[0] == "accel_exporter_series"}
    assert sum(by_source.values()) == len(got)
    assert by_source["compat_dcgm"] == sum(1 for k in got if k[0].startswith("DCGM_"))
    assert by_source["compat_amd"] == sum(1 for k in got if k[0].startswith(("gpu_", "pcie_")))


def test_otlp_carries_the_compat_families_as_metrics_serves_them():
    store = Store()
    store.put(nvidia())
    store.put(amd())
    compat = Compat(("dcgm", "amd"), "node-1", "lab")
    builder = BatchBuilder(
        resource=Resource({}),
        profile=Profile.named("default"),
        compat=compat,
    )
    batch = builder.build(store.view())
    metrics = {m.name: m for m in batch.resource_metrics[0].scope_metrics[0].metrics}
    text = Exposition(store, process_metrics=False, compat=compat).render(None, None)[0].decode()
    served = {
        (k[0].removesuffix("_total") if k[0].startswith("DCGM_") else k[0], k[1]): v
        for k, v in samples(text).items()
        if k[0].startswith(("DCGM_", "gpu_", "pcie_"))
    }
    pushed = {
        (name, tuple(sorted(p.attributes.items()))): p.value
        for name, m in metrics.items()
        if name.startswith(("DCGM_", "gpu_", "pcie_"))
        for p in m.data.data_points
    }
    assert pushed == {(n, tuple(sorted(labels))): v for (n, labels), v in served.items()}
    energy = metrics["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"]
    assert energy.data.is_monotonic and energy.unit == ""
    assert type(metrics["gpu_used_vram"].data).__name__ == "Gauge"
    assert [p.attributes["UUID"] for p in energy.data.data_points] == [NV]


def test_unserved_readings_are_catalog_rows():
    # The family the info readings go to exists with exactly these labels.
    from exporter.catalog import CATALOG

    assert CATALOG["accel_compat_field_unserved_info"].labels == ("peer", "field", "reason")
    assert prometheus_setup.compat_readings(None) == []


def test_otlp_carries_workload_labels_as_metrics_stamps_them():
    store = Store()
    snap = nvidia()
    pod = Reading("accel_device_workload_info", ("0", NV, "ml", "train", "main"), 1.0)
    store.put(dataclasses.replace(snap, readings=(*snap.readings, pod)))
    config = load_config(overrides={"outputs.prometheus.workload_labels": "true"})
    factory = stamp.from_config(config)
    assert factory is not None
    builder = BatchBuilder(resource=Resource({}), stamp=factory)
    metrics = builder.build(store.view()).resource_metrics[0].scope_metrics[0].metrics
    (util,) = [m for m in metrics if m.name == "hw.gpu.utilization"]
    attributes = [dict(p.attributes) for p in util.data.data_points]
    # The pod's labels where /metrics has them; job_id is empty here, so no attribute.
    assert all(a["namespace"] == "ml" and a["pod"] == "train" for a in attributes)
    assert all(a["container"] == "main" and "job_id" not in a for a in attributes)
    (info,) = [m for m in metrics if m.name == "accel.device.workload.info"]
    assert dict(info.data.data_points[0].attributes)["pod"] == "train"  # not stamped twice
    plain = BatchBuilder(resource=Resource({})).build(store.view())
    (util,) = [m for m in plain.resource_metrics[0].scope_metrics[0].metrics
               if m.name == "hw.gpu.utilization"]  # fmt: skip
    assert all("pod" not in dict(p.attributes) for p in util.data.data_points)
