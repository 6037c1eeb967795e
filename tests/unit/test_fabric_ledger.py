"""The fabric state file: round trip, another boot, a corrupt or unwritable file, a reload."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from exporter.config.fabric import FabricSourceConfig
from exporter.evidence import EvidenceBoard
from exporter.fabric.ledger import FILE_NAME, FabricLedger, NicMemory
from exporter.fabric.ports import observe
from exporter.sources.fabric import FabricSource
from tests.fakes.fabric_sysfs import FabricSysfs


def filled(state: Path, boot: str = "boot-1") -> FabricLedger:
    ledger = FabricLedger(str(state), boot=boot)
    port = ledger.port("mlx5_0/1")
    observe(port, True, 4, 100.0)
    observe(port, False, 5, 110.0)
    ledger.nics["mlx5_0"] = NicMemory(
        pci_bus_id="0000:19:00.0", served={"0000:18:00.0": "pcie_switch"}
    )
    ledger.nics["mlx5_1"] = NicMemory(present=False, disappearances=2, missing_since=50.0)
    ledger.save(force=True)
    ledger.close()
    return ledger


def test_what_is_written_is_read_back(tmp_path: Path) -> None:
    before = filled(tmp_path)
    after = FabricLedger(str(tmp_path), boot="boot-1")
    assert after.ports == before.ports
    assert after.nics == before.nics
    assert after.load_problem == "" and after.errors == {}
    assert after.describe() == f"persisted to {tmp_path / FILE_NAME}"
    after.close()


def test_another_boot_keeps_the_counts_and_drops_the_baselines(tmp_path: Path) -> None:
    filled(tmp_path)
    after = FabricLedger(str(tmp_path), boot="boot-2")
    port = after.ports["mlx5_0/1"]
    assert (port.flaps, port.link_downed, port.up, port.down_since) == (1, None, None, None)
    assert after.nics["mlx5_1"].disappearances == 2
    after.close()


def test_a_corrupt_file_is_counted_and_the_counts_start_again(tmp_path: Path) -> None:
    (tmp_path / FILE_NAME).write_text("{not json")
    ledger = FabricLedger(str(tmp_path), boot="b")
    assert ledger.errors == {"corrupt": 1}
    assert ledger.ports == {} and "ignored (corrupt" in ledger.describe()
    ledger.close()
    (tmp_path / FILE_NAME).write_text(json.dumps({"format": 99, "ports": {}}))
    assert FabricLedger(str(tmp_path), boot="b").errors == {"corrupt": 1}


def test_one_bad_entry_costs_only_itself(tmp_path: Path) -> None:
    doc = {
        "format": 1,
        "boot_id": "b",
        "ports": {"mlx5_0/1": {"flaps": -3}, "mlx5_1/1": {"flaps": 2}},
        "nics": {"mlx5_0": {"served": ["x"]}, "mlx5_1": {"disappearances": 1, "present": False}},
    }
    (tmp_path / FILE_NAME).write_text(json.dumps(doc))
    ledger = FabricLedger(str(tmp_path), boot="b")
    assert list(ledger.ports) == ["mlx5_1/1"] and ledger.ports["mlx5_1/1"].flaps == 2
    assert list(ledger.nics) == ["mlx5_1"] and ledger.nics["mlx5_1"].present is False
    ledger.close()


def test_an_unwritable_directory_is_counted_and_counting_goes_on(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    ledger = FabricLedger(str(blocker / "state"), boot="b")  # a directory under a file
    observe(ledger.port("mlx5_0/1"), True, 0, 0.0)
    ledger.save(force=True)
    ledger.save(force=True)
    # The read at start found no directory; each write since failed, and said so.
    assert ledger.errors == {"unreadable": 1, "write_failed": 2}
    assert ledger.describe().startswith("not persisted: ")
    assert ledger.ports["mlx5_0/1"].up is True


def test_only_the_daemon_writes(tmp_path: Path) -> None:
    ledger = FabricLedger(str(tmp_path), boot="b")
    observe(ledger.port("mlx5_0/1"), True, 0, 0.0)
    ledger.save()  # a one-shot command (once, probe) reads the file and leaves it alone
    assert not (tmp_path / FILE_NAME).exists()
    ledger.close()


def test_a_reload_goes_on_with_the_counts_of_the_source_it_replaces(tmp_path: Path) -> None:
    tree = FabricSysfs(tmp_path / "sys")
    tree.node(1)
    config = FabricSourceConfig(sys_path=str(tree.root))
    old = FabricSource("fabric", config, board=EvidenceBoard())
    asyncio.run(old.poll())
    tree.port_down("mlx5_0")
    asyncio.run(old.poll())
    new = FabricSource("fabric", config, board=EvidenceBoard())
    new.adopt(old)
    assert new.ledger is old.ledger
    readings = {(r.metric, r.labels): r.value for r in asyncio.run(new.poll())}
    assert readings[("accel_nic_port_flaps_total", ("mlx5_0", "1"))] == 1
