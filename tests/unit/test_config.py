from __future__ import annotations

import functools

import pytest

from exporter.config import leaves, load_config
from exporter.config.addresses import parse_listen_address, split_host_port
from exporter.config.durations import format_duration, parse_duration
from exporter.errors import ConfigError


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("250ms", 0.25), ("15s", 15), ("1m", 60), ("1h30m", 5400), ("1.5s", 1.5), ("0s", 0)],
)
def test_durations(text, seconds):
    assert parse_duration(text) == seconds
    assert parse_duration(format_duration(seconds)) == seconds


@pytest.mark.parametrize("text", ["", "5", "s", "-1s", "1x", "1s2", "1 s", "ms"])
def test_bad_durations(text):
    with pytest.raises(ValueError):
        parse_duration(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (":9842", ("", 9842)),
        ("0.0.0.0:1", ("0.0.0.0", 1)),
        ("[::1]:28028", ("::1", 28028)),
        ("localhost:0", ("localhost", 0)),
    ],
)
def test_addresses(text, expected):
    assert parse_listen_address(text) == expected


@pytest.mark.parametrize("text", ["::1:28028", "host", "host:x", "[::1", "[::1]x", "h:65536"])
def test_bad_addresses(text):
    with pytest.raises(ValueError):
        split_host_port(text)


def test_defaults_need_no_file():
    config = load_config(None, env={})
    assert config.web.listen_address == ":9842"
    assert config.sources.host.enabled is True
    assert config.sources.host.poll_timeout == 5.0
    assert config.sources.host.stale_seconds == 15.0
    assert config.sources.nvml.enabled == "auto"


def test_every_leaf_is_settable_by_env_with_its_default(tmp_path):
    # Writing each leaf's own default back through the env must be accepted:
    # proves env names and text conversion exist for every key.
    from exporter.config.keys import format_default

    booleans = flips = 0
    for leaf in leaves():
        if leaf.default is None or leaf.dotted.startswith("web.tls") or "basic_auth" in leaf.dotted:
            continue
        text = format_default(leaf.default, leaf.type)
        if isinstance(leaf.default, dict):
            text = "{}"
        config = load_config(None, env={leaf.env: text})
        assert functools.reduce(getattr, leaf.path, config) == leaf.default, leaf.dotted
        if isinstance(leaf.default, bool):
            booleans += 1
            # The env value is read, not just accepted: the other boolean wins over the
            # default (unless a rule across keys refuses that value on its own).
            try:
                flipped = load_config(None, env={leaf.env: str(not leaf.default).lower()})
            except ConfigError:
                continue
            assert functools.reduce(getattr, leaf.path, flipped) is (not leaf.default), leaf.dotted
            flips += 1
    assert booleans and flips >= booleans // 2, (flips, booleans)


def test_all_problems_at_once(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "web:\n  max_requests: 0\nsources:\n  nvml:\n    slow_interval: 1s\n"
        "  ccl_ras:\n    stall_polls: 0\n    addresses: []\nwat: 1\n"
    )
    with pytest.raises(ConfigError) as info:
        load_config(str(cfg), env={})
    text = "\n".join(info.value.problems)
    assert "web.max_requests: must be at least 1" in text
    assert "sources.nvml.slow_interval: must be at least interval" in text
    assert "sources.ccl_ras.stall_polls: must be at least 1" in text
    assert "sources.ccl_ras.addresses: needs at least one host:port" in text
    assert f"{cfg}:9: wat: unknown key" in text
    assert len(info.value.problems) == 5


def test_expected_devices_per_vendor_source():
    config = load_config(
        None,
        env={
            "ACCEL_EXPORTER_SOURCES__NVML__EXPECTED_DEVICES": "8",
            "ACCEL_EXPORTER_SOURCES__AMDSMI__EXPECTED_DEVICES": "null",
        },
    )
    assert config.sources.nvml.expected_devices == 8
    assert config.sources.amdsmi.expected_devices is None
    assert load_config(None, env={}).sources.nvml.expected_devices is None
    with pytest.raises(ConfigError, match=r"sources\.amdsmi\.expected_devices: must be at least 1"):
        load_config(None, env={"ACCEL_EXPORTER_SOURCES__AMDSMI__EXPECTED_DEVICES": "0"})
    with pytest.raises(ConfigError, match=r"sources\.nvml\.expected_devices"):
        load_config(None, env={"ACCEL_EXPORTER_SOURCES__NVML__EXPECTED_DEVICES": "eight"})


def test_defaults_shown_for_null_keys():
    from exporter.config.fields import Duration
    from exporter.config.keys import format_default

    # A null duration is computed from the interval; any other null is just not set.
    assert format_default(None, Duration | None) == "derived"
    assert format_default(None, int | None) == "unset"


def test_list_and_dict_from_env():
    config = load_config(
        None,
        env={
            "ACCEL_EXPORTER_SOURCES__CCL_RAS__ADDRESSES": "[::1]:28028, 127.0.0.1:28029",
            "ACCEL_EXPORTER_OUTPUTS__OTLP__HEADERS": "{x-token: abc}",
            "ACCEL_EXPORTER_SOURCES__NVML__ENABLED": "false",
        },
    )
    assert config.sources.ccl_ras.addresses == ["[::1]:28028", "127.0.0.1:28029"]
    assert config.outputs.otlp.headers == {"x-token": "abc"}
    assert config.sources.nvml.enabled is False


def test_unrelated_env_is_ignored():
    load_config(None, env={"ACCEL_EXPORTER_PHASE_FILE": "/tmp/x", "PATH": "/bin"})


def test_stale_after_below_interval_is_rejected():
    with pytest.raises(ConfigError, match="stale_after: must be at least the interval"):
        load_config(None, env={"ACCEL_EXPORTER_SOURCES__HOST__STALE_AFTER": "1s"})


def test_default_resources_include_mig_profiles_and_shared_gpus():
    from exporter.config.workload import K8sEnrichConfig
    from exporter.enrich.pod_resources import resource_filter

    k8s = K8sEnrichConfig()
    wanted = resource_filter(k8s.resource_names, k8s.resource_patterns)
    for name in ("nvidia.com/gpu", "amd.com/gpu", "nvidia.com/mig-1g.10gb"):
        assert wanted(name), name
    # Time-slicing and MPS with renameByDefault advertise nvidia.com/gpu.shared.
    assert wanted("nvidia.com/gpu.shared")
    for name in ("nvidia.com/gpu.sharedx", "example.com/gpu.shared", "cpu"):
        assert not wanted(name), name


def test_single_underscore_env_is_a_typo():
    with pytest.raises(ConfigError, match="did you mean ACCEL_EXPORTER_WEB__LISTEN_ADDRESS"):
        load_config(None, env={"ACCEL_EXPORTER_WEB_LISTEN_ADDRESS": ":1"})
    load_config(None, env={"ACCEL_EXPORTER_WORKER_LOG_LEVEL": "info"})  # not a config key


def test_duplicate_yaml_keys_are_errors(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("web:\n  max_requests: 3\n  max_requests: 4\n")
    with pytest.raises(ConfigError, match=r"c.yaml:3: web.max_requests: key given twice"):
        load_config(str(cfg), env={})


def test_otlp_variables_come_from_the_env_given_only(tmp_path, monkeypatch):
    # `config check FILE` passes env={}: what the shell holds must not fail it.
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "not a url")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
    cfg = tmp_path / "c.yaml"
    cfg.write_text("outputs:\n  otlp:\n    enabled: true\n    endpoint: http://127.0.0.1:4318\n")
    assert load_config(str(cfg), env={}).outputs.otlp.enabled
    # Given to it, the same variable is checked and named.
    with pytest.raises(ConfigError) as info:
        load_config(
            None,
            env={
                "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json",
                "ACCEL_EXPORTER_OUTPUTS__OTLP__ENABLED": "true",
            },
        )
    assert any(
        "outputs.otlp" in p and "OTEL_EXPORTER_OTLP_PROTOCOL" in p for p in info.value.problems
    )


def test_web_connection_limits_name_the_key(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "web:\n  max_requests: 50\n  max_connections: 50\n  max_idle_connections: 51\n"
        "  idle_timeout: 0s\n  header_timeout: 0s\n"
    )
    with pytest.raises(ConfigError) as info:
        load_config(str(cfg), env={})
    text = "\n".join(info.value.problems)
    assert "web.max_connections: must be more than max_requests (50)" in text
    assert "web.max_idle_connections: must be between 0 and max_connections" in text
    assert "web.idle_timeout: must be positive" in text
    assert "web.header_timeout: must be positive" in text
    web = load_config(None, env={}).web
    assert (web.max_connections, web.max_idle_connections) == (256, 64)
    assert (web.idle_timeout, web.header_timeout) == (30.0, 5.0)


@pytest.mark.parametrize(
    ("address", "fragment"),
    [
        ("http://localhost:9851", "is a URL: give host:port, as localhost:9851"),
        ("https://[::1]:9851/metrics", "is a URL: give host:port, as [::1]:9851"),
    ],
)
def test_a_url_as_listen_address_says_so(address, fragment):
    with pytest.raises(ConfigError) as raised:
        load_config(None, env={}, overrides={"web.listen_address": address})
    text = "; ".join(raised.value.problems)
    assert fragment in text and "bracketed" not in text, text


def test_host_port_is_written_back_as_it_is_read():
    from exporter.config.addresses import join_host_port, split_host_port

    for text in (":9842", "[::]:9842", "127.0.0.1:9842", "[fe80::1]:1"):
        host, port = split_host_port(text)
        assert split_host_port(join_host_port(host, port)) == (host, port)
    assert join_host_port("::", 9842) == "[::]:9842"
    assert join_host_port("", 9842) == ":9842"


def test_every_limit_names_its_key_and_minimum(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "web: {max_requests: 0, send_timeout: 0s}\n"
        "sources:\n"
        "  amdsmi: {cper_per_poll: 0, bootstrap_timeout: 0s}\n"
        "  tpu: {max_message_bytes: 100}\n"
        "  ccl_ras: {max_response_bytes: 100}\n"
        "  ccl_inspector: {max_files: 0, max_comms: 0, link_peak_bytes_per_second: 0}\n"
        "  cuda_checkpoint: {bootstrap_timeout: 0s}\n"
        "workload:\n"
        "  k8s:\n"
        "    max_message_bytes: 1024\n"
        "    pod_labels: {max_reply_bytes: 10}\n"
        "    dra: {timeout: 0s, max_reply_bytes: 10}\n"
    )
    with pytest.raises(ConfigError) as info:
        load_config(str(cfg), env={})
    problems = [p.split(": ", 1)[1] for p in info.value.problems]
    assert sorted(problems) == sorted(
        [
            "web.max_requests: must be at least 1",
            "web.send_timeout: must be positive",
            "sources.amdsmi.bootstrap_timeout: must be positive",
            "sources.amdsmi.cper_per_poll: must be at least 1",
            "sources.tpu.max_message_bytes: must be at least 4096",
            "sources.ccl_ras.max_response_bytes: must be at least 4096",
            "sources.ccl_inspector.max_files: must be at least 1",
            "sources.ccl_inspector.max_comms: must be at least 1",
            "sources.ccl_inspector.link_peak_bytes_per_second: must be positive",
            "sources.cuda_checkpoint.bootstrap_timeout: must be positive",
            "workload.k8s.max_message_bytes: must be at least 16 MiB (16777216)",
            "workload.k8s.pod_labels.max_reply_bytes: must be at least 64 KiB (65536)",
            "workload.k8s.dra.timeout: must be positive",
            "workload.k8s.dra.max_reply_bytes: must be at least 64 KiB (65536)",
        ]
    )


def test_numbers_from_text_and_their_mistakes(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "web: {max_requests: ' 12 '}\n"
        "sources:\n  ccl_inspector: {link_peak_bytes_per_second: 5, max_files: '9'}\n"
    )
    config = load_config(str(cfg), env={})
    inspector = config.sources.ccl_inspector
    assert config.web.max_requests == 12
    assert (inspector.link_peak_bytes_per_second, inspector.max_files) == (5.0, 9)
    assert type(inspector.link_peak_bytes_per_second) is float
    cfg.write_text(
        "web: {max_requests: many, max_connections: true}\n"
        "sources:\n  ccl_inspector: {link_peak_bytes_per_second: fast, max_files: 1.5}\n"
    )
    with pytest.raises(ConfigError) as info:
        load_config(str(cfg), env={})
    assert [p.split(": ", 1)[1] for p in info.value.problems] == [
        "web.max_requests: must be an integer, not 'many'",
        "web.max_connections: must be an integer, not True",
        "sources.ccl_inspector.link_peak_bytes_per_second: must be a number, not 'fast'",
        "sources.ccl_inspector.max_files: must be an integer, not 1.5",
    ]


def test_one_kubernetes_section_for_every_client(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "kubernetes:\n  api_server: https://api.example:6443\n  node_name: gpu-7\n"
        "  token_file: /run/t\n"
    )
    config = load_config(str(cfg), env={"ACCEL_EXPORTER_KUBERNETES__CA_FILE": "/run/ca.crt"})
    kube = config.kubernetes
    assert (kube.api_server, kube.node_name, kube.token_file, kube.ca_file) == (
        "https://api.example:6443",
        "gpu-7",
        "/run/t",
        "/run/ca.crt",
    )
    flagged = load_config(None, {}, {"kubernetes.node_name": "gpu-8"})
    assert flagged.kubernetes.node_name == "gpu-8"
    assert flagged.kubernetes.token_file.startswith("/var/run/secrets/kubernetes.io/")


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("http://api.example", "must be an https:// URL"),
        ("api.example:6443", "must be an https:// URL"),
        ("https://", "names no host"),
        ("https://u:p@api.example", "scheme, host, port and an optional path only"),
        ("https://api.example/?x=1", "scheme, host, port and an optional path only"),
        ("https://api.example:port", "is not a URL"),
    ],
)
def test_the_api_server_must_be_an_https_url(value, words):
    with pytest.raises(ConfigError) as info:
        load_config(None, {"ACCEL_EXPORTER_KUBERNETES__API_SERVER": value})
    (problem,) = info.value.problems
    assert "kubernetes.api_server" in problem and words in problem


def test_a_node_name_must_be_one():
    with pytest.raises(ConfigError, match=r"kubernetes\.node_name: is not a Kubernetes node name"):
        load_config(None, {"ACCEL_EXPORTER_KUBERNETES__NODE_NAME": "gpu-7/../x"})


@pytest.mark.parametrize("section", ["workload.k8s.pod_labels", "outputs.kubernetes"])
@pytest.mark.parametrize("key", ["api_server", "node_name", "token_file", "ca_file"])
def test_the_access_keys_of_old_sections_name_the_kubernetes_section(tmp_path, section, key):
    # Refused, not read: the two old sections could disagree, and which one wins
    # would be a guess. The error names the one key to set instead.
    old = tmp_path / "old.yaml"
    path = section.split(".")
    text = "".join(f"{'  ' * i}{part}:\n" for i, part in enumerate(path))
    old.write_text(text + f"{'  ' * len(path)}{key}: x\n")
    env_var = "ACCEL_EXPORTER_" + "__".join(p.upper() for p in [*path, key])
    for args in ((str(old), {}), (None, {env_var: "x"})):
        with pytest.raises(ConfigError) as info:
            load_config(*args)
        (problem,) = info.value.problems
        assert f"{section}.{key}" in problem
        assert f"renamed to kubernetes.{key}" in problem


def test_web_read_timeout_is_read_as_send_timeout(tmp_path, capsys):
    # newcomer-4 F18: the key bounds a write's progress (SO_SNDTIMEO), never a read.
    path = tmp_path / "c.yaml"
    path.write_text("web: {read_timeout: 7s}\n")
    notes: list[str] = []
    config = load_config(str(path), env={}, notes=notes)
    assert config.web.send_timeout == 7.0
    assert any("read_timeout: renamed to web.send_timeout" in n for n in notes), notes
    env = load_config(None, {"ACCEL_EXPORTER_WEB__READ_TIMEOUT": "3s"}, notes=[])
    assert env.web.send_timeout == 3.0
    from exporter.cli import main

    assert main(["config", "show", "--web.read-timeout", "4s"]) == 0
    captured = capsys.readouterr()
    assert "send_timeout: 4s" in captured.out
    assert "renamed to --web.send-timeout" in captured.err


def test_a_file_key_naming_a_device_says_so():
    # newcomer-4 F20: --web.config.file /dev/null said "permission denied" as root.
    with pytest.raises(ConfigError) as info:
        load_config(None, {"ACCEL_EXPORTER_WEB__CONFIG_FILE": "/dev/null"})
    (problem,) = info.value.problems
    assert "cannot read file '/dev/null': it is not a regular file" in problem, problem
    assert "permission denied" not in problem
