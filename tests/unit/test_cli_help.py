"""``--help`` a newcomer can read, flags described from the schema, one name per source."""

from __future__ import annotations

import pytest
import structlog

from exporter.cli import main
from exporter.commands.flags import flag_help, key_help, leaf_class, metavar, old_spellings
from exporter.config import leaves, load_config
from exporter.errors import ConfigError


@pytest.fixture(autouse=True)
def _restore_logging():
    # main() configures structlog onto the captured stderr; later tests must not
    # inherit a stream that pytest closes.
    yield
    structlog.reset_defaults()


def help_text(capsys, *args: str) -> str:
    with pytest.raises(SystemExit) as exit_:
        main(list(args))
    assert exit_.value.code == 0
    return capsys.readouterr().out


def test_top_level_help_is_short_and_lists_commands_first(capsys):
    text = help_text(capsys, "--help")
    lines = text.splitlines()
    assert len(lines) < 60, len(lines)
    commands = lines.index(next(line for line in lines if line.startswith("commands")))
    assert commands < 6
    for name in ("run", "once", "probe", "check", "record", "config"):
        assert any(line.split()[:1] == [name] for line in lines[commands:]), name
    assert "--help-all" in text and "derived" in text


def test_help_all_describes_every_flag_and_shows_choices(capsys):
    text = help_text(capsys, "--help-all")
    assert "(default )" not in text and "(default: )" not in text
    assert "--log.level {debug,info,warning,error}" in text
    assert "--sources.nvml.enabled {true,false,auto}" in text
    assert "--sources.ccl_ras.interval DURATION" in text
    assert "\nweb.tls:\n" in text and "\nsources.nvml:\n" in text
    assert "derived" in text


@pytest.mark.parametrize("leaf", list(leaves()), ids=lambda leaf: leaf.dotted)
def test_every_key_has_a_one_line_description(leaf):
    text = key_help(leaf_class(leaf), leaf.path[-1])
    assert text and "\n" not in text and len(text) <= 80, text
    assert metavar(leaf.type)
    assert not flag_help(leaf).endswith("(default: )")


def test_old_names_still_read_and_are_noted(tmp_path):
    notes: list[str] = []
    path = tmp_path / "c.yaml"
    path.write_text("enrich:\n  enabled: false\n")
    config = load_config(str(path), env={"ACCEL_EXPORTER_ENRICH__INTERVAL": "20s"}, notes=notes)
    assert config.workload.enabled is False and config.workload.interval == 20.0
    assert any("enrich: renamed to workload" in n for n in notes), notes
    assert any("ACCEL_EXPORTER_WORKLOAD__INTERVAL" in n for n in notes), notes
    assert old_spellings()["--sources.ccl-ras.interval"] == "--sources.ccl_ras.interval"
    assert old_spellings()["--enrich.k8s.socket"] == "--workload.k8s.socket"


def test_old_and_new_name_together_is_an_error(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("enrich:\n  enabled: false\nworkload:\n  enabled: true\n")
    with pytest.raises(ConfigError, match="renamed to workload, which is also given"):
        load_config(str(path), env={})


def test_workload_under_sources_gets_a_hint(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("sources:\n  workload:\n    enabled: false\n")
    with pytest.raises(ConfigError, match="top-level section workload"):
        load_config(str(path), env={})


def test_an_old_flag_spelling_works_and_is_logged(capsys):
    assert main(["config", "show", "--sources.ccl-ras.interval", "45s"]) == 0
    captured = capsys.readouterr()
    assert "interval: 45s" in captured.out
    assert "renamed to --sources.ccl_ras.interval" in captured.err


def test_a_config_flag_takes_either_spelling_of_its_key(capsys):
    # newcomer-4 F11: a key copied from the YAML file (snake case) works as a flag.
    argv = ["config", "show", "--outputs.prometheus.cluster_name=prod-a"]
    argv += ["--web.listen_address", "127.0.0.1:9"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert "cluster_name: prod-a" in captured.out and "listen_address: 127.0.0.1:9" in captured.out
    assert "renamed" not in captured.err
    # Every "-" may be "_" and the other way round; a key that is none stays unknown.
    with pytest.raises(SystemExit) as stop:
        main(["config", "show", "--outputs-prometheus.cluster-name=x"])
    assert stop.value.code == 2
    assert "unknown flag --outputs-prometheus.cluster-name" in capsys.readouterr().err


def test_help_into_a_closed_pipe_ends_quietly():
    # `accel-exporter --help-all | head -1`: the reader goes away before the writer.
    import os
    import subprocess
    import sys

    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "exporter", "--help-all"],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
        )
    finally:
        os.close(write)
    assert "Traceback" not in done.stderr and "BrokenPipeError" not in done.stderr, done.stderr
    assert done.returncode == 141


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (
            ["--web.listen-adress", ":9854"],
            "unknown flag --web.listen-adress (did you mean --web.listen-address?)",
        ),
        (
            ["--sources.nvidia.enabled", "true"],
            "unknown flag --sources.nvidia.enabled (did you mean --sources.nvml.enabled?)",
        ),
        (
            ["--sources.nvml.intervall", "5s"],
            "unknown flag --sources.nvml.intervall (did you mean --sources.nvml.interval?)",
        ),
        (["once", "--sources.nvml.intervall=5s"], "did you mean --sources.nvml.interval?"),
        (["once", "--formt", "json"], "unknown flag --formt (did you mean --format?)"),
    ],
)
def test_a_mistyped_flag_gets_the_same_suggestion_as_a_key(capsys, argv, fragment):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert fragment in err, err
    assert "invalid choice" not in err and "unrecognized arguments" not in err, err


def test_a_mistyped_check_flag_is_unknown_with_a_suggestion(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["check", "gpu-count", "--expected", "2", "--vendr", "nvidia"])
    assert exit_.value.code == 3
    out = capsys.readouterr().out
    assert "unknown flag --vendr (did you mean --vendor?)" in out, out


def test_file_env_and_flag_typos_suggest_the_same_key(tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("sources:\n  nvml:\n    intervall: 5s\n")
    problems = []
    for kwargs in (
        {"path": str(cfg), "env": {}},
        {"path": None, "env": {"ACCEL_EXPORTER_SOURCES__NVML__INTERVALL": "5s"}},
    ):
        with pytest.raises(ConfigError) as raised:
            load_config(**kwargs)
        problems.append(" ".join(raised.value.problems))
    assert "did you mean 'interval'?" in problems[0], problems
    assert "did you mean ACCEL_EXPORTER_SOURCES__NVML__INTERVAL?" in problems[1], problems
