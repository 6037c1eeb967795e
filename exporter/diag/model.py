"""What a diagnostic run said, suite by suite: plain data, no I/O.

Every parser (:mod:`exporter.diag.dcgm`, :mod:`exporter.diag.amd`,
:mod:`exporter.diag.hv`) turns one result file into one :class:`Run`: the suite,
the version of the tool that wrote it, and a :class:`DeviceResult` per device and
test. A file that is not one is refused with a :class:`DiagError` whose ``reason``
is the word counted for it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from exporter.catalog.vocabulary import DIAG_FILE_REJECTIONS, DIAG_FILE_RESULTS, DIAG_RESULTS

# The result of one test on one device, in every suite's terms.
RESULTS = DIAG_RESULTS
PASS, WARN, FAIL, SKIP = RESULTS

# The suites read, by the name of their label value.
DCGM, AGFHC, RVS, HEALTH_VALIDATION = "dcgm", "agfhc", "rvs", "health_validation"
SUITES = (DCGM, AGFHC, RVS, HEALTH_VALIDATION)

# Why a file gave no run, counted once per file version by
# accel_diag_files_rejected_total{reason}: EXPIRED is a file older than the health
# window (not read), TOO_MANY_FILES one beyond sources.diag.max_files (the oldest).
REJECTIONS = DIAG_FILE_REJECTIONS
(
    TOO_LARGE,
    TRUNCATED,
    UNPARSEABLE,
    SYMLINK,
    NOT_REGULAR,
    UNREADABLE,
    UNKNOWN_FORMAT,
    TOO_MANY_FILES,
    EXPIRED,
) = REJECTIONS
# What became of a file of a known suite (accel_diag_files_total{suite, result}).
FILE_RESULTS = DIAG_FILE_RESULTS
ACCEPTED, SCHEMA_DRIFT, RUNTIME_ERROR = FILE_RESULTS


class DiagError(Exception):
    """A result file that gives no run: ``reason`` is its counted word, ``suite`` if known.

    ``version`` is the schema or tool version a drifted file named ("" when none).
    """

    def __init__(self, reason: str, detail: str, suite: str = "", version: str = "") -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail
        self.suite = suite
        self.version = version


@dataclass(frozen=True)
class Issue:
    """One error a test reported: its code, severity and category as the suite words them.

    DCGM: ``DCGM_FR_FAULTY_MEMORY``, ``isolate``, ``hardware_memory``; AGFHC: the
    suggested action's word as the code (``Service``); RVS: none.
    """

    code: str
    severity: str = ""
    category: str = ""
    message: str = ""


@dataclass(frozen=True)
class DeviceResult:
    """The result of one test on one device, as the suite names the device.

    ``entity`` is the suite's own device number (DCGM's GPU id, AGFHC's ``GPU-03``
    as ``3``, RVS's gpu_index), ``serial`` the serial number the run lists for it
    ("" when none), ``subject`` what AGFHC blamed (``GPU``, ``SYSTEM``, ``PROGRAM``,
    ``UNKNOWN``; "" elsewhere). ``uuid`` and ``pci_bus_id`` name the device where the
    suite names it so (Health Validation's entities). ``node`` marks a result about the
    node, not a device (Health Validation's own verdict and its node checks): it is
    shown, never matched to a device.
    """

    entity: str
    test: str
    result: str
    issues: tuple[Issue, ...] = ()
    serial: str = ""
    subject: str = ""
    uuid: str = ""
    pci_bus_id: str = ""
    node: bool = False


@dataclass(frozen=True)
class Run:
    """One result file's run: the suite, the vendor of its devices, the tool's version.

    ``runtime_error`` is set when the tool could not run its tests (DCGM's
    ``runtime_error``): then there are no results, and nothing about any device.
    ``whole_node`` is set when the run judged every device of the node and names only
    those it found wanting (Health Validation): it is then the newest run of every
    device of its vendor, the ones it does not name included.
    """

    suite: str
    vendor: str
    version: str
    results: tuple[DeviceResult, ...]
    runtime_error: str = ""
    whole_node: bool = False


_NOT_LABEL = re.compile(r"[^a-z0-9]+")


def label_for_test(name: str) -> str:
    """A test's name as a label value: lower case, runs of other characters as one ``_``.

    DCGM 3.x says ``Permissions and OS Blocks``, 4.x ``targeted stress``: both read
    alike in a query (``permissions_and_os_blocks``, ``targeted_stress``).
    """
    return _NOT_LABEL.sub("_", name.strip().lower()).strip("_")[:64] or "unnamed"
