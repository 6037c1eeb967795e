"""The series budget: how many label sets a family may have, per source, at most.

Every catalog row whose label values are not all enumerated declares one of these
as its ``max_series`` (a row whose labels are all enumerations is bounded by them).
The store enforces it per family and per source on every snapshot
(:mod:`exporter.series_budget`): past the budget a reading is dropped and counted in
``accel_exporter_series_dropped_total{source,family}``. Which series are kept is
the source's order: the first ``max_series`` distinct label sets it emits, so a
source that can exceed a budget emits its most important series first (RAS: the
worst communicators, see :mod:`exporter.ccl.ras_readings`).

The bounds are a ceiling far above any node seen, not a target: a node's usual
exposition never reaches them, and a source that goes wild (a job with ten
thousand communicators, a flood of processes) costs a bounded exposition and a
counter instead of a 30 MB scrape.
"""

from __future__ import annotations

DEVICES = 2048
"""One series per device of a source: GPUs, MIG instances, partitions, Neuron cores.

A row that also has enumerated labels (a one-hot over states, a value per sensor)
declares ``DEVICES`` times the number of their value combinations: every device may
have all of them (tests/unit/test_series_budget.py holds every such row to it)."""

DEVICE_PARTS = 32768
"""A device times one of its parts: links, engines, ports, cores, fans, error codes."""

PROCESSES = 8192
"""A device times the processes, pods or jobs using it."""

NICS = 256
"""RDMA NICs of a node (InfiniBand or RoCE devices in /sys/class/infiniband; 8-16 seen)."""

NIC_PORTS = NICS * 4
"""A NIC times its ports (one or two on the HCAs seen)."""

NIC_GPU_PAIRS = NICS * 64
"""A NIC joined to a GPU: every NIC under one switch or NUMA node with every GPU there."""

PCI_FUNCTIONS = 4096
"""PCI functions the fabric source reads: accelerators, NICs and the switch ports above."""

SMALL = 1024
"""Families keyed by a handful of things the daemon itself names: sources, reasons, vendors."""

RAS_ADDRESSES = 1024
"""RAS job-level families: one per configured RAS address (times a reason or an event)."""

RAS_COMMS = 256
"""RAS communicator families, per source: the worst 256 communicators of the report."""

RAS_COMM_COLLECTIVES = RAS_COMMS * 8
"""A RAS communicator times its collectives (five names, "Any", and a few more in text)."""

RAS_RANK_SERIES = 2048
"""RAS per-rank counters: the local ranks ``rank_series`` selects, times the collectives."""

RAS_RANK_DEVICES = 1024
"""``accel_ccl_rank_device_info``: the ranks whose GPU RAS names (ranks on one node)."""

INSPECTOR_COMMS = 1024
"""Inspector per-communicator families (the aggregator tracks ``max_comms``, 64 by default)."""

INSPECTOR_SERIES = 4096
"""Inspector (communicator, collective, size) histograms (``max_series``, 512 by default)."""

INSPECTOR_RANKS = 16384
"""Inspector per-rank and per-collective families (1024 ranks tracked per communicator)."""

SOURCE_FAMILIES = 8192
"""The daemon's own families keyed by a source and a family (every source, every row)."""
