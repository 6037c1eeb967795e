"""README.md and the deploy docs say what the program, the image and the scripts do."""

from __future__ import annotations

import re

from exporter.checks.command import CHECKS
from tests.helpers.deploy import REPO

README = (REPO / "README.md").read_text()


def _containerfile_extras() -> list[str]:
    text = (REPO / "Containerfile").read_text()
    match = re.search(r'pip install "\.\[([a-z0-9_,]+)\]"', text)
    assert match, "the Containerfile installs the package with its extras"
    return match.group(1).split(",")


def test_the_readme_lists_every_check():
    usage = README[README.index("accel-exporter check NAME") :]
    usage = usage[: usage.index("docs/checks.md")]
    for name in CHECKS:
        assert re.search(rf"\b{re.escape(name)}\b", usage), name


def test_the_image_header_and_the_deploy_docs_name_every_extra_the_image_installs():
    header = "".join(
        line for line in (REPO / "Containerfile").read_text().splitlines() if line.startswith("#")
    )
    deploy = (REPO / "docs/deploy.md").read_text()
    installing = deploy[deploy.index("Two ways to install it") :][:400]
    for extra in _containerfile_extras():
        assert re.search(rf"\b{extra}\b", header), extra
        assert f"`{extra}`" in installing, extra


def test_the_readme_says_what_scripts_test_downloads_and_how_to_avoid_it():
    script = (REPO / "scripts/test").read_text()
    package = re.search(r"registry\.npmjs\.org/(@[\w.-]+/[\w.-]+)/", script)
    assert package, "scripts/test downloads helm and kubectl from the npm registry"
    assert package.group(1) in README
    variable = re.search(r'TOOLS="\$\{(\w+):-', script)
    assert variable, "scripts/test takes a directory of local helm and kubectl"
    assert variable.group(1) in README


def test_the_readme_does_not_call_the_gpm_equivalents_of_dcgm_profiling_unexported():
    nvidia = (REPO / "docs/nvidia.md").read_text()
    assert "DCGM_FI_PROF_SM_ACTIVE" in nvidia and "GPM" in nvidia  # the mapping exists
    paragraph = README[README.index("**DCGM profiling") :].split("\n- ")[0]
    assert "not exported" not in paragraph, paragraph
    assert "GPM" in paragraph and "Hopper" in paragraph, paragraph
