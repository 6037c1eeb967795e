"""The daemon's CPER ledger store: adopt, persist, reload; a new boot, a bad file, a bad answer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from exporter.backend_api.cper import Ledger, LedgerError
from exporter.backends.amdsmi_ras import cper_timestamp
from exporter.sources.cper_ledger import FILE_NAME, LedgerStore, write_reason

LEDGER = {"cursor": 7, "counts": {"30/fatal": 3}, "last": {"30": 1.7e9}, "skipped": {}}


def test_adopted_ledgers_are_written_and_read_back_on_the_same_boot(tmp_path: Path) -> None:
    store = LedgerStore(str(tmp_path), boot="boot-a")
    assert store.update({"GPU-0": LEDGER}, {"GPU-0", "GPU-1"}) is True
    assert store.update({"GPU-0": LEDGER}, {"GPU-0"}) is False  # unchanged
    store.save(force=True)
    again = LedgerStore(str(tmp_path), boot="boot-a")
    assert again.ledgers == {"GPU-0": LEDGER}


def test_a_new_boot_restarts_the_cursors_and_keeps_the_counts(tmp_path: Path) -> None:
    store = LedgerStore(str(tmp_path), boot="boot-a")
    store.update({"GPU-0": LEDGER}, {"GPU-0"})
    store.save(force=True)
    rebooted = LedgerStore(str(tmp_path), boot="boot-b")
    assert rebooted.ledgers["GPU-0"] == {**LEDGER, "cursor": 0}


def test_without_a_directory_nothing_is_written(tmp_path: Path) -> None:
    store = LedgerStore("", boot="boot-a")
    store.update({"GPU-0": LEDGER}, {"GPU-0"})
    store.save(force=True)
    assert store.path is None and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "text",
    [
        "{not json",
        json.dumps({"format": 99, "devices": {}}),
        json.dumps([1, 2]),
    ],
)
def test_an_unreadable_file_starts_empty_and_is_replaced(tmp_path: Path, text: str) -> None:
    (tmp_path / FILE_NAME).write_text(text)
    store = LedgerStore(str(tmp_path), boot="boot-a")
    assert store.ledgers == {}
    assert store.errors == {"corrupt": 1}
    assert "ignored (corrupt" in store.describe()
    store.update({"GPU-0": LEDGER}, {"GPU-0"})
    store.save(force=True)
    assert json.loads((tmp_path / FILE_NAME).read_text())["devices"] == {"GPU-0": LEDGER}
    assert "counted again" in store.describe()  # what the lost file cost stays said


def test_a_bad_device_entry_in_the_file_loses_only_that_device(tmp_path: Path) -> None:
    doc = {"format": 1, "boot_id": "b", "devices": {"GPU-0": LEDGER, "GPU-1": {"cursor": -3}}}
    (tmp_path / FILE_NAME).write_text(json.dumps(doc))
    assert LedgerStore(str(tmp_path), boot="b").ledgers == {"GPU-0": LEDGER}


def test_an_unwritable_directory_keeps_counting_in_memory(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    store = LedgerStore(str(blocker / "sub"), boot="b")  # a directory under a file
    store.update({"GPU-0": LEDGER}, {"GPU-0"})
    store.save(force=True)  # logs, does not raise
    assert store.ledgers == {"GPU-0": LEDGER}
    assert store.errors == {"unreadable": 1, "write_failed": 1}  # ENOTDIR, read and write
    assert store.describe().startswith("not persisted: write_failed")
    store.update({"GPU-0": {**LEDGER, "cursor": LEDGER["cursor"] + 1}}, {"GPU-0"})
    store.save(force=True)
    assert store.errors["write_failed"] == 2  # each failed write counts
    store.path = tmp_path / "ok" / FILE_NAME  # the directory is usable again
    store.save(force=True)
    assert store.describe().startswith(f"persisted to {store.path};")  # and what start lost


@pytest.mark.parametrize(
    ("code", "reason"),
    [(30, "read_only"), (28, "no_space"), (13, "permission_denied"), (5, "write_failed")],
)
def test_write_reasons(code: int, reason: str) -> None:
    assert write_reason(OSError(code, "x")) == reason


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        ({"GPU-9": LEDGER}, "not in the inventory"),
        ({"GPU-0": {"cursor": "x"}}, "cursor"),
        ({"GPU-0": {"counts": {"1/fatal": -1}}}, "non-negative"),
        ({"GPU-0": {"counts": {"1/fatal": 1.5}}}, "integer"),
    ],
)
def test_a_bad_answer_from_the_worker_is_refused(answer: dict, why: str) -> None:
    store = LedgerStore("", boot="b")
    with pytest.raises(ValueError, match=why):
        store.update(answer, {"GPU-0"})
    assert store.ledgers == {}


def test_ledger_wire_round_trip_and_errors() -> None:
    assert Ledger.from_wire(LEDGER).to_wire() == LEDGER
    assert Ledger.from_wire({}).to_wire() == {"cursor": 0, "counts": {}, "last": {}, "skipped": {}}
    with pytest.raises(LedgerError):
        Ledger.from_wire([])
    with pytest.raises(LedgerError):
        Ledger.from_wire({"cursor": True})


class Stamp:
    def __init__(self, **fields: int) -> None:
        base = dict(seconds=5, minutes=4, hours=3, day=2, month=1, year=25, century=20)
        for k, v in {**base, **fields}.items():
            setattr(self, k, v)


def test_cper_timestamps_are_utc_and_nonsense_is_none() -> None:
    assert cper_timestamp(Stamp()) == 1735787045.0  # 2025-01-02T03:04:05Z
    assert cper_timestamp(Stamp(century=0)) == 1735787045.0  # no century: the 2000s
    assert cper_timestamp(Stamp(month=13)) is None
    assert cper_timestamp(Stamp(day=31, month=2)) is None
    assert cper_timestamp(Stamp(hours=24)) is None


def test_only_the_daemon_writes_unless_forced(tmp_path: Path) -> None:
    from exporter.sources import cper_ledger

    store = LedgerStore(str(tmp_path), boot="b")
    store.update({"GPU-0": LEDGER}, {"GPU-0"})
    was = cper_ledger._WRITES["enabled"]
    cper_ledger._WRITES["enabled"] = False
    try:
        store.save()  # a one-shot command: reads the file, leaves it alone
        assert not (tmp_path / FILE_NAME).exists()
        cper_ledger.enable_writes()
        store.save()
        assert (tmp_path / FILE_NAME).exists()
    finally:
        cper_ledger._WRITES["enabled"] = was


def test_one_store_per_directory_and_process(tmp_path: Path) -> None:
    from exporter.sources.cper_ledger import store_for

    assert store_for(str(tmp_path)) is store_for(str(tmp_path))
    assert store_for(str(tmp_path)) is not store_for(str(tmp_path / "other"))
