"""Opt-in stamping of workload labels onto device series, at render time."""

from __future__ import annotations

import pytest

from exporter.catalog import CATALOG
from exporter.catalog.workload import stampable, stamped
from exporter.config import load_config
from exporter.errors import ConfigError
from exporter.model import Reading
from exporter.outputs import stamp
from exporter.outputs.prometheus import Exposition
from exporter.store import Store
from tests.helpers.daemon import samples, value
from tests.helpers.devices import info, snapshot

G0, G1, G2 = "GPU-0", "GPU-1", "GPU-2"


def store_with_workloads() -> Store:
    store = Store()
    readings = [info("0", G0), info("1", G1), info("2", G2)]
    for dev, uuid, util in (("0", G0, 0.5), ("1", G1, 0.25), ("2", G2, 1.0)):
        readings.append(Reading("accel_utilization_ratio", (dev, uuid), util))
        readings.append(Reading("accel_temperature_celsius", (dev, uuid, "gpu"), 50.0))
    readings.append(Reading("accel_process_memory_bytes", ("0", G0, "42"), 1e9))
    readings += [
        Reading("accel_device_workload_info", ("0", G0, "ml", "train", "main"), 1.0),
        # G1 is time-sliced between two pods: no single owner.
        Reading("accel_device_workload_info", ("1", G1, "ml", "a", "main"), 1.0),
        Reading("accel_device_workload_info", ("1", G1, "ml", "b", "main"), 1.0),
    ]
    store.put(snapshot("test", readings))
    return store


def render(store: Store, labels) -> str:
    factory = (lambda view: stamp.Stamping(view, labels)) if labels else None
    body, _ = Exposition(store, process_metrics=False, stamp=factory).render(None, None)
    return body.decode()


def test_device_series_get_allowlisted_labels():
    text = render(store_with_workloads(), ("pod", "namespace"))
    got = samples(text)
    assert (
        value(got, "accel_utilization_ratio", device="0", uuid=G0, namespace="ml", pod="train")
        == 0.5
    )
    assert value(got, "accel_utilization_ratio", device="1", uuid=G1, namespace="", pod="") == 0.25
    assert value(got, "accel_utilization_ratio", device="2", uuid=G2, namespace="", pod="") == 1.0
    assert (
        value(
            got,
            "accel_temperature_celsius",
            device="0",
            uuid=G0,
            sensor="gpu",
            namespace="ml",
            pod="train",
        )
        == 50.0
    )
    # Info families and per-process series are left alone; container was not allowlisted.
    assert value(got, "accel_process_memory_bytes", device="0", uuid=G0, pid="42") == 1e9
    assert "container=" not in text.split("accel_device_workload_info")[0]
    assert len([k for k in got if k[0] == "accel_utilization_ratio"]) == 3


def test_off_by_default_and_switchable():
    store = store_with_workloads()
    assert 'pod="train"' not in render(store, ()).split("accel_device_workload_info")[0]
    exposition = Exposition(store, process_metrics=False)
    before, _ = exposition.render(None, None)
    exposition.set_stamp(lambda view: stamp.Stamping(view, ("pod",)))
    after, _ = exposition.render(None, None)
    assert value(after.decode(), "accel_utilization_ratio", device="0", uuid=G0, pod="train") == 0.5
    assert value(before.decode(), "accel_utilization_ratio", device="0", uuid=G0) == 0.5


def test_catalog_contract():
    assert stampable(CATALOG["accel_power_watts"])
    assert stampable(CATALOG["accel_clock_hertz"])
    for name in (
        "accel_device_info",
        "accel_process_memory_bytes",
        "accel_devices",
        "accel_device_workload_info",
        "accel_host_load1",
    ):
        assert not stampable(CATALOG[name]), name
    row = stamped(CATALOG["accel_power_watts"], ("namespace", "pod"))
    assert row.labels == ("device", "uuid", "namespace", "pod") and not row.problems()
    with pytest.raises(ValueError):
        stamped(CATALOG["accel_device_info"], ("pod",))


def test_config():
    cfg = load_config(
        None,
        {},
        {
            "workload.k8s.stamp_device_series": "true",
            "workload.k8s.stamp_labels": "namespace,pod",
        },
    )
    assert stamp.from_config(cfg) is not None
    assert stamp.from_config(load_config(None, {}, {})) is None
    with pytest.raises(ConfigError) as info_:
        load_config(None, {}, {"workload.k8s.stamp_device_series": "true"})
    assert "stamp_labels" in str(info_.value)
    with pytest.raises(ConfigError) as info_:
        load_config(None, {}, {"workload.k8s.stamp_labels": "app"})
    assert "stamp_labels.0" in str(info_.value)


def test_the_old_allowlist_key_names_its_new_name(tmp_path):
    # pod_label_allowlist chose among namespace/pod/container: it is stamp_labels now,
    # and Kubernetes pod labels have their own allowlist (pod_labels.keys).
    old = tmp_path / "old.yaml"
    old.write_text("enrich:\n  k8s:\n    pod_label_allowlist: [pod]\n")
    for args in (
        (str(old), {}),
        (None, {"ACCEL_EXPORTER_WORKLOAD__K8S__POD_LABEL_ALLOWLIST": "pod"}),
    ):
        with pytest.raises(ConfigError) as info_:
            load_config(*args)
        (problem,) = info_.value.problems
        assert "workload.k8s.pod_label_allowlist" in problem
        assert "renamed to stamp_labels" in problem and "pod_labels.keys" in problem
