"""The installable artifact: scripts/build makes a wheel and an sdist that twine accepts;
the wheel installs into a fresh virtual environment and its console script works."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import venv
from pathlib import Path

from exporter import __version__
from tests.helpers.cli import REPO


def run(*args: str | Path, cwd: Path, env: dict[str, str] | None = None, timeout: float = 300):
    return subprocess.run(
        [str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


def test_wheel_builds_installs_and_runs(tmp_path):
    dist = tmp_path / "dist"
    env = {**os.environ, "DIST_DIR": str(dist), "PYTHON": sys.executable}
    built = run(REPO / "scripts" / "build", cwd=REPO, env=env, timeout=600)
    assert built.returncode == 0, built.stdout + built.stderr
    assert built.stdout.count("PASSED") == 2, built.stdout
    wheels = list(dist.glob("accel_exporter-*-py3-none-any.whl"))
    sdists = list(dist.glob("accel_exporter-*.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1, list(dist.iterdir())
    assert wheels[0].name == f"accel_exporter-{__version__}-py3-none-any.whl"

    fresh = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(fresh)
    # With an extra, as docs/deploy.md installs it: the binding comes along.
    spec = f"{wheels[0]}[nvidia]"
    # Without the test run's PYTHONPATH: with the checkout on it, pip takes the checkout's
    # accel_exporter.egg-info for an installed accel-exporter of the same version and
    # skips the wheel ("already installed"), leaving no console script.
    no_checkout = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    installed = run(fresh / "bin" / "pip", "install", "-q", spec, cwd=tmp_path, env=no_checkout)
    assert installed.returncode == 0, installed.stderr
    assert "already installed" not in installed.stdout + installed.stderr, installed.stderr
    # Run from elsewhere, with a clean environment: the checkout must not be what runs.
    clean = {"PATH": f"{fresh / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path)}
    exe = fresh / "bin" / "accel-exporter"
    version = run(exe, "--version", cwd=tmp_path, env=clean)
    assert version.returncode == 0 and version.stdout.strip() == f"accel-exporter {__version__}"
    where = run(
        fresh / "bin" / "python",
        "-c",
        "import exporter; print(exporter.__file__)",
        cwd=tmp_path,
        env=clean,
    )
    assert str(fresh) in where.stdout, where.stdout
    host_only = [
        f"--sources.{name}.enabled=false"
        for name in ("nvml", "amdsmi", "tpu", "neuron", "ccl_ras", "ccl_inspector")
    ] + ["--workload.enabled=false"]
    probe = run(exe, "probe", *host_only, cwd=tmp_path, env=clean)
    assert probe.returncode == 0, probe.stdout + probe.stderr
    assert probe.stdout.split()[:3] == ["host", "on", "ok"], probe.stdout
    once = run(exe, "once", *host_only, cwd=tmp_path, env=clean)
    assert once.returncode == 0, once.stderr
    assert "accel_host_load1" in once.stdout or "accel_host_" in once.stdout
    # The worker process starts from the installed package and reaches the binding.
    nvml = run(exe, "probe", "--sources.nvml.enabled=true", cwd=tmp_path, env=clean)
    assert nvml.returncode == 1 and "library_not_found" in nvml.stdout, nvml.stdout


def test_scripts_run_puts_the_command_on_path_and_reinstalls_only_on_change(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    link = bin_dir / "accel-exporter"
    env = {**os.environ, "ACCEL_EXPORTER_LINK": str(link)}
    first = run(REPO / "scripts" / "run", "--version", cwd=REPO, env=env)
    assert first.returncode == 0, first.stderr
    assert first.stdout.strip() == f"accel-exporter {__version__}"
    assert link.is_symlink() and link.resolve() == (REPO / ".venv/bin/accel-exporter").resolve()
    stamp = REPO / ".venv" / ".accel-exporter-installed"
    before = stamp.stat().st_mtime_ns
    # Nothing changed: no pip run (the stamp is not rewritten), no new link.
    second = run(REPO / "scripts" / "run", "--version", cwd=REPO, env=env)
    assert second.returncode == 0 and "linked" not in second.stderr, second.stderr
    assert stamp.stat().st_mtime_ns == before
    linked = run("accel-exporter", "--version", cwd=tmp_path, env={**env, "PATH": str(bin_dir)})
    assert linked.stdout.strip() == f"accel-exporter {__version__}"
    # Another program of that name is never replaced: the user is told what to do.
    link.unlink()
    link.write_text("#!/bin/sh\necho someone else's\n")
    third = run(REPO / "scripts" / "run", "--version", cwd=REPO, env=env)
    assert "put it on PATH" in third.stderr and "someone else" in link.read_text()


def test_the_docs_and_the_chart_say_the_same_build_and_push_of_the_image(tmp_path):
    # No registry publishes the image: the chart has no default and refuses to render
    # without one, naming the commands that build and push it; docs/deploy.md's
    # "Container image" gives the same commands (its $IMAGE and $VERSION filled in).
    import yaml

    from tests.helpers.deploy import CHART, helm_binary

    values = yaml.safe_load((CHART / "values.yaml").read_text())
    meta = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert meta["appVersion"] == __version__  # the tag the docs compute from the package
    assert not values["image"]["repository"]
    refused = run(helm_binary(), "template", "accel-exporter", CHART, cwd=tmp_path)
    assert refused.returncode != 0
    message = " ".join(refused.stderr.split())
    assert "image.repository is empty" in message, refused.stderr

    deploy = (REPO / "docs" / "deploy.md").read_text()
    section = deploy.split("## Container image", 1)[1].split("\n## ", 1)[0]
    image = "REGISTRY/accel-exporter"
    assert re.search(r"^IMAGE=\S+/accel-exporter\s", section, re.M), section
    commands = [
        line.split("#", 1)[0]
        .strip()
        .replace('"$IMAGE:$VERSION"', f"{image}:VERSION")
        .replace('"$IMAGE"', image)
        for line in section.splitlines()
        if line.startswith(("podman build", "podman push"))
    ]
    assert [c.split()[:2] for c in commands] == [["podman", "build"], ["podman", "push"]]
    for command in commands:
        assert command in message, (command, message)
    assert "helm install" in section and '--set image.repository="$IMAGE"' in section
    assert f"--set image.repository={image}" in message
    assert "./scripts/build" in deploy and "./scripts/build" in (REPO / "README.md").read_text()
