"""The ccl_ras and ccl_inspector config sections: every mistake names its key."""

from __future__ import annotations

import pytest

from exporter.config import load_config
from exporter.errors import ConfigError


def test_defaults_match_the_documented_yaml():
    ras = load_config(None, env={}).sources.ccl_ras
    assert ras.enabled == "auto" and ras.addresses == ["localhost:28028"]
    assert (ras.interval, ras.timeout, ras.follower_interval) == (30.0, 15.0, 300.0)
    assert (ras.format, ras.rank_series, ras.role, ras.stall_polls) == ("auto", "local", "auto", 3)


def test_every_mistake_is_reported_with_its_key(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(
        "sources:\n"
        "  ccl_ras:\n"
        '    addresses: ["::1:28028", "localhost:99999", "[::1]:28028", "[::1]:28028", "h:0"]\n'
        "    stall_polls: 0\n"
        '    local_addresses: ["node1"]\n'
        "    follower_interval: 1s\n"
        "  ccl_inspector:\n"
        "    max_read_bytes: 10\n"
        "    max_comms: 0\n"
        "    max_series: 0\n"
    )
    with pytest.raises(ConfigError) as err:
        load_config(str(path), env={})
    text = "\n".join(err.value.problems)
    for key in (
        "sources.ccl_ras.addresses.0: IPv6 addresses must be bracketed",
        "sources.ccl_ras.addresses.1: invalid port",
        "sources.ccl_ras.addresses: lists an address twice",
        "sources.ccl_ras.addresses.4: port 0",
        "sources.ccl_ras.stall_polls",
        "sources.ccl_ras.local_addresses.0",
        "sources.ccl_ras.follower_interval",
        "sources.ccl_inspector.max_read_bytes",
        "sources.ccl_inspector.max_comms",
        "sources.ccl_inspector.max_series",
    ):
        assert key in text, text


def test_environment_overrides():
    config = load_config(
        None,
        env={
            "ACCEL_EXPORTER_SOURCES__CCL_RAS__ADDRESSES": '["[::1]:29000", "10.0.0.5:28028"]',
            "ACCEL_EXPORTER_SOURCES__CCL_RAS__ROLE": "follower",
            "ACCEL_EXPORTER_SOURCES__CCL_INSPECTOR__DIR": "/tmp/insp",
        },
    )
    assert config.sources.ccl_ras.addresses == ["[::1]:29000", "10.0.0.5:28028"]
    assert config.sources.ccl_ras.role == "follower"
    assert config.sources.ccl_inspector.dir == "/tmp/insp"


def test_follower_interval_defaults_to_ten_intervals():
    from exporter.config.ccl import CclRasSourceConfig

    assert CclRasSourceConfig(interval=600.0).check() == []
    assert CclRasSourceConfig(interval=600.0).follower_seconds == 6000.0
    assert CclRasSourceConfig(interval=5.0, follower_interval=7.0).follower_seconds == 7.0
    ras = load_config(
        None, env={"ACCEL_EXPORTER_SOURCES__CCL_RAS__INTERVAL": "10m"}
    ).sources.ccl_ras
    assert (ras.interval, ras.follower_interval, ras.follower_seconds) == (600.0, 6000.0, 6000.0)
    with pytest.raises(ConfigError) as err:
        load_config(
            None,
            env={
                "ACCEL_EXPORTER_SOURCES__CCL_RAS__INTERVAL": "10m",
                "ACCEL_EXPORTER_SOURCES__CCL_RAS__FOLLOWER_INTERVAL": "5m",
            },
        )
    assert "sources.ccl_ras.follower_interval: must be at least interval" in str(err.value)
