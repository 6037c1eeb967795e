"""The query docs/fabric.md gives, from a flapping port to the GPUs and pods behind it, run by promtool."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

DOC = Path(__file__).resolve().parents[2] / "docs" / "fabric.md"


def doc_queries() -> list[str]:
    text = DOC.read_text()
    section = text[text.index("## From a flapping port") :]
    return re.findall(r"```promql\n(.*?)```", section, re.S)


def test_the_flap_to_pod_query_names_the_gpus_and_pods_behind_a_flapping_nic(
    tmp_path: Path,
) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool is required (apt-get install prometheus)")
    query = doc_queries()[0]
    where = 'instance="node-1:9842",job="accel-exporter"'
    gpu = [("0", "GPU-0", "0000:18:00.0"), ("1", "GPU-1", "0000:24:00.0")]
    series = [
        # mlx5_0 port 1 flaps three times half an hour in; its port 2 and mlx5_1 never.
        {"series": f'accel_nic_port_flaps_total{{{where},nic="mlx5_0",port="1"}}',
         "values": "0x30 3x40"},
        {"series": f'accel_nic_port_flaps_total{{{where},nic="mlx5_0",port="2"}}',
         "values": "0x70"},
        {"series": f'accel_nic_port_flaps_total{{{where},nic="mlx5_1",port="1"}}',
         "values": "0x70"},
    ]  # fmt: skip
    for (device, uuid, bus), nic in zip(gpu, ("mlx5_0", "mlx5_1"), strict=True):
        join = f'device="{device}",uuid="{uuid}",pci_bus_id="{bus}",via="pcie_switch"'
        series.append({"series": f'accel_nic_gpu_info{{{where},nic="{nic}",{join}}}',
                       "values": "1x70"})  # fmt: skip
        pod = f'device="{device}",uuid="{uuid}",namespace="ml",pod="trainer-{device}",container="main"'
        series.append({"series": f"accel_device_workload_info{{{where},{pod}}}", "values": "1x70"})
    rules = tmp_path / "rules.yaml"
    rules.write_text(
        yaml.safe_dump(
            {"groups": [{"name": "doc", "rules": [{"record": "doc:flap_pods", "expr": query}]}]}
        )
    )
    test = tmp_path / "test.yaml"
    test.write_text(
        yaml.safe_dump(
            {
                "rule_files": [str(rules)],
                "evaluation_interval": "1m",
                "tests": [
                    {
                        "interval": "1m",
                        "input_series": series,
                        "promql_expr_test": [
                            {
                                "expr": "doc:flap_pods > bool 0",
                                "eval_time": "61m",
                                "exp_samples": [
                                    {
                                        "labels": (
                                            '{instance="node-1:9842",'
                                            ' job="accel-exporter", nic="mlx5_0", device="0",'
                                            ' uuid="GPU-0", pci_bus_id="0000:18:00.0",'
                                            ' via="pcie_switch", namespace="ml",'
                                            ' pod="trainer-0", container="main"}'
                                        ),
                                        "value": 1,
                                    }
                                ],
                            },
                            # An hour after the flaps, nothing.
                            {"expr": "doc:flap_pods", "eval_time": "100m", "exp_samples": []},
                        ],
                    }
                ],
            }
        )
    )
    result = subprocess.run(
        [promtool, "test", "rules", str(test)], capture_output=True, timeout=60, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_query_of_the_page_parses(tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool is required (apt-get install prometheus)")
    queries = doc_queries()
    assert len(queries) == 4
    rules = tmp_path / "rules.yaml"
    rules.write_text(
        yaml.safe_dump(
            {
                "groups": [
                    {
                        "name": "doc",
                        "rules": [
                            {"record": f"doc:q{i}", "expr": q} for i, q in enumerate(queries)
                        ],
                    }
                ]
            }
        )
    )
    result = subprocess.run(
        [promtool, "check", "rules", str(rules)], capture_output=True, timeout=60, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
