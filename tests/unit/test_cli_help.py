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
