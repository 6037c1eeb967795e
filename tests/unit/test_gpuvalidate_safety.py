"""gpu-validate must never change a GPU setting: no nvidia-smi option that sets
anything, no NVML setter, anywhere in the kit."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).parents[2]
KIT = [ROOT / "scripts" / "gpu-validate", *sorted((ROOT / "scripts" / "gpuvalidate").glob("*.py"))]

# nvidia-smi options that change state: persistence, power limits, clocks, ECC,
# compute mode, MIG, resets, accounting, driver model, GOM, drain.
FORBIDDEN_FLAGS = {
    "-pm",
    "--persistence-mode",
    "-pl",
    "--power-limit",
    "-lgc",
    "--lock-gpu-clocks",
    "-rgc",
    "--reset-gpu-clocks",
    "-lmc",
    "--lock-memory-clocks",
    "-rmc",
    "--reset-memory-clocks",
    "-ac",
    "--applications-clocks",
    "-rac",
    "--reset-applications-clocks",
    "-acp",
    "--applications-clocks-permission",
    "-e",
    "--ecc-config",
    "-p",
    "--reset-ecc-errors",
    "-c",
    "--compute-mode",
    "-mig",
    "--multi-instance-gpu",
    "-r",
    "--gpu-reset",
    "-am",
    "--accounting-mode",
    "-caa",
    "--clear-accounted-apps",
    "-dm",
    "--driver-model",
    "-fdm",
    "--force-driver-model",
    "--gom",
    "-cc",
    "--cuda-clocks",
    "-ppm",
    "--power-profile-mask",
    "drain",
    "-cgi",
    "-dgi",
    "-cci",
    "-dci",
    "--auto-boost-default",
    "--auto-boost-permission",
    "-mlcg",
}
# NVML entry points that change state (nvmlDeviceSet*, resets, clears, MIG instance
# creation and destruction, ...).
SETTER = re.compile(
    r"nvml\w*(Set|Reset|Clear|Create|Destroy|Modify|Freeze|Register\w*Callback|Remove)\w*"
)


def literals(path: Path, text: str) -> list[str]:
    """The string literals of a Python file; the lines of a shell script."""
    if path.suffix != ".py":
        return text.splitlines()
    return [
        node.value
        for node in ast.walk(ast.parse(text))
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    ]


def problems(path: Path, text: str) -> list[str]:
    """Every NVML setter named, and every forbidden nvidia-smi option among the words of
    the string literals. One-letter options (``-c``, ``-r``, ...) mean something else
    to other programs (``python -c``): they count in nvidia-smi's own module and in
    any literal (or shell line) that names nvidia-smi."""
    found = [f"{path.name}: {m.group(0)}" for m in SETTER.finditer(text)]
    everywhere = path.name == "smi.py"
    for literal in literals(path, text):
        strict = everywhere or "nvidia-smi" in literal
        for word in re.split(r"[\s=,\"']+", literal):
            if word in FORBIDDEN_FLAGS and (strict or len(word) > 2):
                found.append(f"{path.name}: {word}")
    return found


def test_the_kit_changes_no_gpu_setting():
    assert len(KIT) > 8
    found = [p for path in KIT for p in problems(path, path.read_text())]
    assert found == []


def test_the_check_finds_what_it_forbids():
    sample = Path("sample.py")
    assert problems(sample, 'subprocess.run(["nvidia-smi", "-pm", "1"])')
    assert problems(sample, 'cmd = "nvidia-smi --power-limit=300"')
    assert problems(sample, "n.nvmlDeviceSetPowerManagementLimit(h, 300000)")
    assert problems(sample, "n.nvmlDeviceResetGpuLockedClocks(h)")
    assert problems(Path("run"), "nvidia-smi -lgc 1000,1500\n")
    assert not problems(sample, 'Smi().query(["--query-gpu=power.draw", "--format=csv"])')


def test_the_only_nvidia_smi_invocations_are_read_only_queries():
    smi = (ROOT / "scripts" / "gpuvalidate" / "smi.py").read_text()
    calls = re.findall(r"self\._run\((\[.*\])\)", smi)
    assert calls == [
        '["--help-query-gpu"]',
        '[f"--query-gpu={\',\'.join(fields)}", "--format=csv,noheader,nounits"]',
    ]
    # Every other module reaches nvidia-smi through smi.Smi: none spells a command line.
    for path in KIT:
        if path.name == "smi.py" or path.suffix != ".py":
            continue
        for literal in literals(path, path.read_text()):
            assert not re.search(r"nvidia-smi\s+-", literal), (path.name, literal)
