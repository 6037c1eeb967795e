"""Metric profiles: membership against the catalog, config errors, thinning and totals."""

from __future__ import annotations

import time

import pytest

from exporter.catalog import CATALOG, with_rows
from exporter.catalog.profiles import FULL_ONLY, MINIMAL, PROFILES, members, problems, select
from exporter.catalog.workload import WORKLOAD_LABELS, pod_labels_row, stampable, stamped
from exporter.config import load_config
from exporter.config.workload import MAX_POD_LABEL_KEYS, MAX_SERIES_LABELS
from exporter.errors import ConfigError
from exporter.model import OK, Reading, Snapshot
from exporter.outputs.otlp_batch import BatchBuilder
from exporter.outputs.profile import Profile
from exporter.outputs.prometheus import Exposition
from exporter.store import Store
from tests.helpers.daemon import samples, value
from tests.helpers.series import measure

ID = ("0", "GPU-0")
TYPES = ("crc_flit", "crc_data", "replay", "recovery")


def test_profiles_name_only_catalog_families_and_nest():
    assert problems() == []
    minimal, default, full = (members(p) for p in PROFILES)
    assert minimal < default < full == frozenset(CATALOG)
    assert full - default == FULL_ONLY
    assert minimal == MINIMAL


def nvlink_store(errors: dict[tuple[int, str], float], links: int = 4) -> Store:
    """One GPU with ``links`` NVLinks; ``errors[(link, type)]`` non-zero, the rest zero."""
    readings = [Reading("accel_device_up", ID, 1.0), Reading("accel_power_watts", ID, 300.0)]
    for link in range(links):
        readings.append(Reading("accel_nvlink_up", (*ID, str(link)), 1.0))
        readings.append(Reading("accel_nvlink_tx_bytes_total", (*ID, str(link)), 1e6 * link))
        for kind in TYPES:
            count = errors.get((link, kind), 0.0)
            readings.append(Reading("accel_nvlink_errors_total", (*ID, str(link), kind), count))
    store = Store()
    now = time.time()
    store.put(Snapshot("nvml", tuple(readings), OK, now, now, time.monotonic(), 0.01, 1e9))
    return store


def render(store: Store, profile: str, **lists: list[str]) -> dict:
    expo = Exposition(store, process_metrics=False, profile=Profile.named(profile, **lists))
    return samples(expo.render(None, None)[0].decode())


def per_link(got: dict, name: str = "accel_nvlink_errors_total") -> set[str]:
    return {dict(labels)["link"] for (metric, labels) in got if metric == name}


def test_a_link_with_errors_is_shown_per_link_in_default_and_a_clean_one_is_not():
    store = nvlink_store({(2, "replay"): 3.0, (2, "crc_flit"): 1.0})
    got = render(store, "default")
    assert per_link(got) == {"2"}
    # Every type of that link, so its rows sum to the device's total by type.
    assert (
        value(got, "accel_nvlink_errors_total", device="0", uuid="GPU-0", link="2", type="crc_data")
        == 0
    )
    assert (
        value(got, "accel_nvlink_device_errors_total", device="0", uuid="GPU-0", type="replay") == 3
    )
    # Per-link state and traffic are full-only; their per-device totals stay.
    assert per_link(got, "accel_nvlink_up") == set()
    assert value(got, "accel_nvlink_links_up", device="0", uuid="GPU-0") == 4
    assert value(got, "accel_nvlink_device_tx_bytes_total", device="0", uuid="GPU-0") == 6e6
    clean = render(nvlink_store({}), "default")
    assert per_link(clean) == set()
    assert (
        value(clean, "accel_nvlink_device_errors_total", device="0", uuid="GPU-0", type="replay")
        == 0
    )


def test_the_device_total_is_the_sum_of_the_links_in_full():
    errors = {(0, "replay"): 5.0, (1, "replay"): 7.0, (3, "crc_data"): 2.0, (3, "recovery"): 1.0}
    got = render(nvlink_store(errors), "full")
    assert per_link(got) == {"0", "1", "2", "3"}
    for kind in TYPES:
        links = [
            v
            for (metric, labels), v in got.items()
            if metric == "accel_nvlink_errors_total" and dict(labels)["type"] == kind
        ]
        total = value(got, "accel_nvlink_device_errors_total", device="0", uuid="GPU-0", type=kind)
        assert total == sum(links)
    assert total == 1.0  # recovery: link 3 only


def test_minimal_writes_a_device_error_total_only_once_it_counted():
    got = render(nvlink_store({(1, "replay"): 2.0}), "minimal")
    names = {metric for metric, _ in got}
    assert names <= MINIMAL | {"accel_exporter_series"}
    assert [
        dict(labels)["type"] for m, labels in got if m == "accel_nvlink_device_errors_total"
    ] == ["replay"]
    assert "accel_power_watts" in names and "accel_nvlink_errors_total" not in names


def test_include_writes_a_family_in_full_and_exclude_drops_it():
    store = nvlink_store({(2, "replay"): 3.0})
    got = render(store, "minimal", include=["accel_nvlink_errors"], exclude=["accel_power_*"])
    assert per_link(got) == {"0", "1", "2", "3"}  # included: every link, not only counted ones
    assert not any(metric == "accel_power_watts" for metric, _ in got)
    assert any(metric == "accel_device_up" for metric, _ in got)


def test_series_counts_add_up_to_the_samples_served():
    store = nvlink_store({(2, "replay"): 3.0})
    for profile in PROFILES:
        expo = Exposition(store, profile=Profile.named(profile))
        figures = measure(expo.render(None, None)[0].decode())
        assert sum(figures["series_by_source"].values()) == figures["samples"], profile
        assert set(figures["series_by_source"]) == {"exporter", "nvml"}


def test_a_profile_change_drops_the_families_it_leaves_out_from_the_next_body():
    store = nvlink_store({})
    expo = Exposition(store, process_metrics=False, profile=Profile.named("full"))
    assert b"accel_nvlink_up{" in expo.render(None, None)[0]
    expo.set_stamp(None, profile=Profile.named("minimal"))
    body = expo.render(None, None)[0].decode()
    assert {metric for metric, _ in samples(body)} <= MINIMAL | {"accel_exporter_series"}


def test_otlp_batches_follow_their_profile():
    from opentelemetry.sdk.resources import Resource

    store = nvlink_store({(2, "replay"): 3.0})
    names = {}
    for profile in ("minimal", "full"):
        batch = BatchBuilder(Resource({}), profile=Profile.named(profile)).build(store.view())
        names[profile] = {
            m.name for rm in batch.resource_metrics for sm in rm.scope_metrics for m in sm.metrics
        }
    assert {"accel.nvlink.errors", "accel.nvlink.up", "accel.nvlink.device.errors"} <= names["full"]
    assert "accel.nvlink.device.errors" in names["minimal"]
    assert not {"accel.nvlink.errors", "accel.nvlink.up"} & names["minimal"]
    assert len(names["minimal"]) < len(names["full"])


def write(tmp_path, text: str):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    return str(path)


def test_an_unknown_profile_is_a_config_error_naming_the_choices(tmp_path):
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, "outputs:\n  prometheus:\n    profile: small\n"), env={})
    message = str(info.value)
    assert "outputs.prometheus.profile" in message
    assert all(name in message for name in PROFILES)


@pytest.mark.parametrize("section", ["prometheus", "otlp"])
def test_an_unknown_family_is_a_config_error_naming_the_near_miss(tmp_path, section):
    text = f"outputs:\n  {section}:\n    include: [accel_nvlink_error_total]\n    exclude: ['accel_zzz*']\n"
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, text), env={})
    message = str(info.value)
    assert f"outputs.{section}.include.0" in message
    assert "did you mean 'accel_nvlink_errors_total'" in message
    assert f"outputs.{section}.exclude.0" in message and "matches no catalog family" in message


def test_profile_and_lists_by_environment():
    config = load_config(
        None,
        env={
            "ACCEL_EXPORTER_OUTPUTS__PROMETHEUS__PROFILE": "minimal",
            "ACCEL_EXPORTER_OUTPUTS__PROMETHEUS__INCLUDE": "accel_nvlink_*",
        },
    )
    assert config.outputs.prometheus.profile == "minimal"
    assert config.outputs.prometheus.include == ["accel_nvlink_*"]
    assert select("minimal", ["accel_nvlink_*"]).families >= {"accel_nvlink_up"}


def test_no_series_carries_more_than_fifteen_labels():
    keys = [f"key{i}" for i in range(MAX_POD_LABEL_KEYS)]
    catalog = with_rows([pod_labels_row(keys)])
    widest = max(catalog.values(), key=lambda row: len(row.labels))
    assert len(widest.labels) <= MAX_SERIES_LABELS
    for row in catalog.values():
        if stampable(row):
            assert len(stamped(row, WORKLOAD_LABELS).labels) <= MAX_SERIES_LABELS, row.name
    assert len(CATALOG["accel_device_info"].labels) == max(len(r.labels) for r in CATALOG.values())


def test_more_pod_label_keys_than_the_label_limit_allows_is_a_config_error(tmp_path):
    keys = ", ".join(f"k{i}" for i in range(MAX_POD_LABEL_KEYS + 1))
    text = f"workload:\n  k8s:\n    pod_labels:\n      enabled: true\n      keys: [{keys}]\n"
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, text), env={})
    assert "workload.k8s.pod_labels.keys" in str(info.value)
    assert f"at most {MAX_POD_LABEL_KEYS} keys" in str(info.value)
