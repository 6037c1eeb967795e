"""The systemd unit: accepted by systemd, hardened (exposure <= 3.0), and consistent with
the sysusers/tmpfiles snippets, the environment file and the shipped config."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from configparser import ConfigParser
from pathlib import Path

import pytest

from exporter.cli import build_parser, overrides_from
from exporter.config import load_config
from tests.helpers.deploy import REPO, SYSTEMD, need

UNIT = SYSTEMD / "accel-exporter.service"
ENV_FILE = SYSTEMD / "accel-exporter.env"
CONFIG = SYSTEMD / "config.yaml"
DOC = REPO / "docs" / "deploy.md"
INSTALLED_BINARY = "/opt/accel-exporter/bin/accel-exporter"
INSTALLED_CONFIG = "/etc/accel-exporter/config.yaml"
MAX_EXPOSURE = 3.0
SYSTEMD_HINT = "the systemd package"


def directives() -> dict[str, list[str]]:
    """Service-section directives as key -> values (keys may repeat)."""
    out: dict[str, list[str]] = {}
    section = ""
    for line in UNIT.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        key, _, value = line.partition("=")
        out.setdefault(f"{section}.{key}", []).append(value)
    return out


def runnable_copy(tmp_path: Path) -> Path:
    """The unit with ExecStart pointing at this checkout's console script, which exists here:
    systemd-analyze verify rejects a unit whose binary is missing."""
    binary = Path(sys.executable).with_name("accel-exporter")
    assert binary.exists(), "install the package (pip install -e .) first"
    text = UNIT.read_text()
    assert f"ExecStart={INSTALLED_BINARY} " in text
    path = tmp_path / UNIT.name
    path.write_text(text.replace(f"ExecStart={INSTALLED_BINARY} ", f"ExecStart={binary} "))
    return path


def test_systemd_analyze_verify_accepts_the_unit(tmp_path: Path) -> None:
    result = subprocess.run(
        [need("systemd-analyze", SYSTEMD_HINT), "verify", str(runnable_copy(tmp_path))],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    # verify reports unknown keys and bad values as warnings with exit status 0.
    assert result.stdout.strip() == "" and result.stderr.strip() == "", (
        result.stdout + result.stderr
    )


def exposure(unit: Path) -> float:
    result = subprocess.run(
        [
            need("systemd-analyze", SYSTEMD_HINT),
            "security",
            "--offline=yes",
            "--no-pager",
            str(unit),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    match = re.search(r"Overall exposure level for \S+: (\d+\.\d)", result.stdout)
    assert match, result.stdout + result.stderr
    return float(match.group(1))


def test_exposure_is_at_most_3_and_the_docs_record_it(tmp_path: Path) -> None:
    score = exposure(runnable_copy(tmp_path))
    assert score <= MAX_EXPOSURE
    recorded = re.search(r"exposure level (\d+\.\d)", DOC.read_text())
    assert recorded, "docs/deploy.md must record the exposure level"
    assert float(recorded.group(1)) == score


def test_the_hardening_the_issue_asks_for() -> None:
    d = directives()
    expected = {
        "Service.User": ["accel-exporter"],
        "Service.ProtectSystem": ["strict"],
        "Service.ProtectHome": ["yes"],
        "Service.NoNewPrivileges": ["yes"],
        "Service.PrivateTmp": ["yes"],
        "Service.CapabilityBoundingSet": [""],
        "Service.Restart": ["on-failure"],
        "Service.DevicePolicy": ["closed"],
    }
    for key, value in expected.items():
        assert d.get(key) == value, key
    assert d["Service.EnvironmentFile"] == ["-/etc/default/accel-exporter"]
    assert d["Service.MemoryMax"] and d["Service.MemoryMax"][0].endswith(("M", "G"))
    allowed = {v.split()[0] for v in d["Service.DeviceAllow"]}
    # NVIDIA /dev/nvidia[0-9]*, nvidiactl (frontend), nvidia-uvm, MIG caps; AMD /dev/kfd, /dev/dri.
    assert {"char-nvidia-frontend", "char-nvidia-uvm", "char-kfd", "char-drm"} <= allowed
    assert d["Service.ExecStart"] == [f"{INSTALLED_BINARY} $ACCEL_EXPORTER_OPTS"]


def test_sysusers_creates_the_unit_user(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    result = subprocess.run(
        [
            need("systemd-sysusers", SYSTEMD_HINT),
            f"--root={root}",
            str(SYSTEMD / "accel-exporter.sysusers"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    passwd = {
        line.split(":")[0]: line.split(":")
        for line in (root / "etc/passwd").read_text().splitlines()
    }
    user = passwd[directives()["Service.User"][0]]
    assert user[6] == "/usr/sbin/nologin" and int(user[2]) != 0
    groups = {
        line.split(":")[0]: line.split(":")[3].split(",")
        for line in (root / "etc/group").read_text().splitlines()
    }
    for group in directives()["Service.SupplementaryGroups"][0].split():
        assert "accel-exporter" in groups[group], group


def test_tmpfiles_creates_the_directories_the_config_reads(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    result = subprocess.run(
        [
            need("systemd-tmpfiles", SYSTEMD_HINT),
            f"--root={root}",
            "--create",
            str(SYSTEMD / "accel-exporter.tmpfiles"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    config = load_config(str(CONFIG), env={})
    for path in (config.sources.ccl_inspector.dir, Path(INSTALLED_CONFIG).parent):
        assert (root / str(path).lstrip("/")).is_dir(), path


def env_assignments(include_examples: bool) -> dict[str, str]:
    out = {}
    for line in ENV_FILE.read_text().splitlines():
        line = line.strip()
        if include_examples and line.startswith("#ACCEL_EXPORTER_"):
            line = line[1:]
        if line.startswith("ACCEL_EXPORTER_"):
            key, _, value = line.partition("=")
            out[key] = shlex.split(value)[0] if value else ""
    return out


def test_environment_file_and_config_are_valid_for_the_daemon() -> None:
    env = env_assignments(include_examples=True)
    options = env.pop("ACCEL_EXPORTER_OPTS")
    args = build_parser().parse_args(shlex.split(options))
    assert args.config_file == INSTALLED_CONFIG
    # The shipped config stands in for its installed copy.
    config = load_config(str(CONFIG), env, overrides_from(args))
    assert config.log.format == "json"
    assert config.web.listen_address == ":9842"


@pytest.mark.parametrize(
    "name",
    [
        "accel-exporter.service",
        "accel-exporter.sysusers",
        "accel-exporter.tmpfiles",
        "accel-exporter.env",
        "config.yaml",
    ],
)
def test_install_steps_are_documented(name: str) -> None:
    assert f"systemd/{name}" in DOC.read_text()


def test_unit_file_parses_as_ini() -> None:
    parser = ConfigParser(strict=False, interpolation=None)
    parser.read_string(UNIT.read_text())
    assert set(parser.sections()) == {"Unit", "Service", "Install"}


def _pip_lines(text: str) -> list[str]:
    return [line.lstrip("# ").strip() for line in text.splitlines() if "bin/pip install" in line]


def test_unit_header_and_docs_install_the_same_extras():
    unit = _pip_lines(UNIT.read_text())
    doc = _pip_lines(DOC.read_text().split("## systemd", 1)[1])
    assert unit and doc and unit[0] == doc[0], (unit, doc)
    extras = re.search(r"\[([a-z0-9,]+)\]", unit[0])
    assert extras is not None
    import tomllib

    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    assert set(extras.group(1).split(",")) <= set(declared), extras.group(1)


def test_deploy_docs_systemd_section_points_at_the_slurm_scripts():
    section = DOC.read_text().split("## systemd", 1)[1].split("\n## ", 1)[0]
    for script in ("contrib/slurm/prolog.sh", "contrib/slurm/epilog.sh"):
        assert script in section
        assert (REPO / script).is_file()
