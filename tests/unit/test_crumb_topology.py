"""The topology part of the breadcrumb page: what the worker writes, the daemon reads."""

from __future__ import annotations

import mmap

import pytest

from exporter.backend_api import crumb
from exporter.workers.crumb import Page


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("0000:0C:00.3", "0000:0c:00"),  # a partition: its GPU's address
        ("0000:0c:00", "0000:0c:00"),
        ("socket-2", "socket-2"),
        ("GPU-abc.1", "gpu-abc.1"),  # not an address: kept whole
    ],
)
def test_physical_key(text: str, key: str) -> None:
    assert crumb.physical_key(text) == key


def test_the_daemon_reads_what_the_worker_wrote_and_a_reset_forgets_it() -> None:
    page = Page()
    try:
        worker = mmap.mmap(page.fd, crumb.PAGE_BYTES)
        assert page.parents() == []
        parents = ["0000:0c:00"] * 8 + ["0000:22:00"] * 8
        saved = crumb._page
        crumb._page = worker
        try:
            crumb.topology(parents)
        finally:
            crumb._page = saved
        assert page.parents() == parents
        page.reset()
        assert page.parents() == []
        worker.close()
    finally:
        page.close()


def test_a_topology_too_long_for_the_page_is_left_out() -> None:
    saved = crumb._page
    crumb._page = bytearray(crumb.PAGE_BYTES)
    try:
        crumb.topology(["x" * 100] * 1000)
        assert crumb._page[crumb.CRUMB_BYTES : crumb.CRUMB_BYTES + 4] == b"\0\0\0\0"
    finally:
        crumb._page = saved


def test_the_daemon_reads_the_devices_identified_so_far_but_not_the_one_in_hand() -> None:
    page = Page()
    worker = mmap.mmap(page.fd, crumb.PAGE_BYTES)
    saved = crumb._page, crumb._slot, crumb._since
    crumb._page, crumb._slot, crumb._since = (
        worker,
        memoryview(worker)[0:4].cast("i"),
        memoryview(worker)[16:24].cast("q"),
    )
    try:
        crumb.device(0)
        crumb.identity("pci_bus_id=0000:0c:00.0")
        crumb.identity("pci_bus_id=0000:0c:00.0;uuid=a")
        crumb.device(1)
        crumb.identity("pci_bus_id=0000:0c:00.1")
        # Device 1 is in hand (it may be hanging): only what is done shows.
        assert page.learnt() == {0: "pci_bus_id=0000:0c:00.0;uuid=a"}
        crumb.device(2)  # device 2 hangs before anything is learnt of it
        assert page.learnt() == {0: "pci_bus_id=0000:0c:00.0;uuid=a", 1: "pci_bus_id=0000:0c:00.1"}
        crumb.device(crumb.LEARNT_DEVICES)  # beyond the slots: not recorded, nothing breaks
        crumb.identity("uuid=z")
        assert len(page.learnt()) == 2
        page.reset()
        assert page.learnt() == {}
    finally:
        crumb._page, crumb._slot, crumb._since = saved
        page.close()  # the worker's map goes with its views, at collection
