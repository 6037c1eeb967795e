"""The GPU phases' own logic, on synthetic samples: the load phase's figures and loose
bounds, the power integral, the GPU a workload ran on, the RAS job state read back."""

from __future__ import annotations

import pytest

from scripts.gpuvalidate.expo import Scrape, parse
from scripts.gpuvalidate.phase_ccl import _job, state
from scripts.gpuvalidate.phase_load import Series, _checks, figures, integral
from scripts.gpuvalidate.report import Phase
from scripts.gpuvalidate.smi import parse_csv
from scripts.gpuvalidate.workloads import gpu_of

U = "GPU-5d0b8c7e-1d2f-3a4b-5c6d-7e8f90a1b2c3"
GIB = 1 << 30


def page(util: float, power: float, energy: float, used: float, gpm: float | None = None) -> str:
    ident = f'device="0",uuid="{U}"'
    lines = [
        f"accel_utilization_ratio{{{ident}}} {util}",
        f"accel_power_watts{{{ident}}} {power}",
        f"accel_energy_joules_total{{{ident}}} {energy}",
        f"accel_memory_used_bytes{{{ident}}} {used}",
    ]
    if gpm is not None:
        lines += [
            f"accel_sm_active_ratio{{{ident}}} {gpm}",
            f'accel_pipe_active_ratio{{{ident},pipe="tensor"}} {gpm / 2}',
            f'accel_pipe_active_ratio{{{ident},pipe="fp64"}} 0',
        ]
    return "\n".join(lines) + "\n"


def series(
    watts: float, util: float, used: float, seconds: int = 10, gpm: float | None = None
) -> Series:
    s = Series()
    for t in range(seconds):
        s.times.append(float(t))
        s.exporter.append(parse(page(util, watts, 1000.0 + watts * t, used, gpm)))
        s.smi_times.append(t + 0.5)
        s.smi.append(
            {
                row["uuid"].text: row
                for row in parse_csv(
                    f"{U}, {watts:.2f}, {util * 100:.0f}, {used // (1 << 20):.0f}\n",
                    ["uuid", "power.draw", "utilization.gpu", "memory.used"],
                )
            }
        )
    return s


def run_checks(busy: Series, idle: Series, base: Series) -> dict[str, str]:
    phase = Phase("load")
    _checks(phase, figures(base, U), figures(busy, U), figures(idle, U))
    return {c.name: c.verdict for c in phase.checks}


def test_integral_is_the_trapezoid_rule():
    assert integral([0, 1, 3], [100, 300, 300]) == pytest.approx(200 + 600)
    assert integral([5], [100]) == 0


def test_figures_of_a_window():
    f = figures(series(600.0, 0.98, 3 * GIB), U)
    assert f["utilization_mean"] == pytest.approx(0.98)
    assert f["energy_joules"] == pytest.approx(600 * 9)  # exporter counter, 10 samples 1 s apart
    assert f["smi_energy_joules"] == pytest.approx(600 * 9)
    assert f["smi_utilization_percent_mean"] == pytest.approx(98)
    assert f["sm_active_mean"] is None and f["tensor_active_mean"] is None


def test_a_load_that_shows_is_passed_and_gpm_absent_is_skipped():
    verdicts = run_checks(
        busy=series(650.0, 1.0, 3 * GIB), idle=series(90.0, 0.0, GIB), base=series(90.0, 0.0, GIB)
    )
    assert verdicts.pop("SM active under load (GPM)") == "skip"
    assert verdicts.pop("tensor pipe active under load (GPM)") == "skip"
    assert set(verdicts.values()) == {"pass"}, verdicts


def test_gpm_families_are_checked_when_exported():
    verdicts = run_checks(
        busy=series(650.0, 1.0, 3 * GIB, gpm=0.9),
        idle=series(90.0, 0.0, GIB, gpm=0.0),
        base=series(90.0, 0.0, GIB, gpm=0.0),
    )
    assert verdicts["SM active under load (GPM)"] == "pass"
    assert verdicts["tensor pipe active under load (GPM)"] == "pass"
    assert verdicts["SM active idle (GPM)"] == "pass"
    flat = run_checks(
        busy=series(650.0, 1.0, 3 * GIB, gpm=0.01),
        idle=series(90.0, 0.0, GIB, gpm=0.01),
        base=series(90.0, 0.0, GIB, gpm=0.01),
    )
    assert flat["SM active under load (GPM)"] == "fail"


def test_a_family_that_does_not_move_or_is_off_by_a_unit_fails():
    # Power that does not rise, utilization stuck, memory that does not grow.
    verdicts = run_checks(
        busy=series(90.0, 0.0, GIB), idle=series(90.0, 0.0, GIB), base=series(90.0, 0.0, GIB)
    )
    assert verdicts["power rises under load"] == "fail"
    assert verdicts["utilization under load"] == "fail"
    assert verdicts["memory used rises by the workload's allocations"] == "fail"
    assert verdicts["energy grows faster under load"] == "fail"
    # An energy counter in kJ instead of J disagrees with nvidia-smi's power integral.
    busy = series(650.0, 1.0, 3 * GIB)
    busy.exporter = [
        parse(page(1.0, 650.0, (1000.0 + 650.0 * t) / 1000, 3 * GIB)) for t in range(10)
    ]
    verdicts = run_checks(busy=busy, idle=series(90.0, 0.0, GIB), base=series(90.0, 0.0, GIB))
    assert verdicts["energy counter vs nvidia-smi power integral (load)"] == "fail"


def test_gpu_of_matches_torch_uuid_without_prefix():
    uuids = ["GPU-aaaa", "GPU-5d0b8c7e-1d2f"]
    assert gpu_of(uuids, {"uuid": "5d0b8c7e-1d2f"}) == "GPU-5d0b8c7e-1d2f"
    assert gpu_of(uuids, {}) == "GPU-aaaa"


def test_ras_job_state_and_job_figures():
    text = "\n".join(
        [
            'accel_ccl_job_state{address="127.0.0.1:1",state="no_job"} 0',
            'accel_ccl_job_state{address="127.0.0.1:1",state="healthy"} 1',
            'accel_ccl_job_info{address="127.0.0.1:1",library="NCCL",version="2.27.5"} 1',
            'accel_ccl_job_processes{address="127.0.0.1:1"} 1',
            'accel_ccl_comm_ranks{address="127.0.0.1:1",comm="0x1"} 1',
            "",
        ]
    )
    scrape = Scrape(parse(text), 0.0)
    assert state(scrape.samples) == "healthy"
    job = _job(scrape)
    assert (job["library"], job["version"], job["job_processes"]) == ("NCCL", "2.27.5", 1.0)
    assert job["comm_ranks"] == [1.0] and job["job_gpus"] is None
    assert state(parse('accel_ccl_job_state{address="a",state="healthy"} 0\n')) is None


def test_the_workload_programs_compile():
    from scripts.gpuvalidate import workloads

    for source in (workloads.TORCH, workloads.NCCL, workloads.NCCL_VERSION):
        compile(source, "<workload>", "exec")
    assert "def nccl_version()" in workloads.NCCL
