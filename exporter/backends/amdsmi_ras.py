"""AMD RAS inside the worker: CPER records decoded to AFIDs, and bad pages.

CPER (the UEFI Common Platform Error Record) entries sit in a ring per GPU;
``amdsmi_get_gpu_cper_entries`` returns them from a cursor (the index of the
next entry) and advances it. The daemon owns the :class:`Ledger` (cursor and
AFID counts) and passes it in every poll, so a new worker goes on where the
last reply left off: an entry read by a worker whose reply never reached the
daemon is read again by the next one, and counted once.

The entries are read through the ctypes function of the amdsmi package, not
its convenience wrapper: the wrapper allocates 4 MiB per call and walks the
buffer by each header's ``record_length``, so one record with a bad length
would misplace every record after it. The C API also returns a pointer to
each header; each record is checked against the buffer on its own, and a bad
one is skipped and counted while the rest are used. Reads are bounded per
poll, so a burst of records is drained over several polls without stalling
the fast poll.

Before AMD SMI 26.5.0 the library did not decode the AFIDs of corrected errors
(its changelog: "AFIDs for correctable errors were not decoded", a count mix-up in
``aca_decode_corrected_error``). The version is read from the library
(``amdsmi_get_lib_version``); on an older one a corrected record is counted as
skipped (``corrected_afids_not_decoded``) instead of by AFID, and
``accel_amd_corrected_afids_decoded`` is 0: its corrected-AFID counts are unknown,
never a zero.
"""

from __future__ import annotations

import ctypes
import time
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from exporter import afids as afid_table
from exporter.backend_api.cper import Ledger
from exporter.backends.amdsmi_fields import CODES, LOST, DeviceReader, status_name
from exporter.backends.contract import U32_MAX, DeviceGone
from exporter.family_names import (
    ACCEL_AMD_AFID_ERRORS_TOTAL,
    ACCEL_AMD_AFID_INFO,
    ACCEL_AMD_AFID_LAST_TIMESTAMP_SECONDS,
    ACCEL_AMD_BAD_PAGE_THRESHOLD,
    ACCEL_AMD_BAD_PAGES,
    ACCEL_AMD_CORRECTED_AFIDS_DECODED,
    ACCEL_AMD_CPER_RECORDS_SKIPPED_TOTAL,
    ACCEL_RETIRED_PAGES,
    ACCEL_RETIRED_PAGES_PENDING,
)

# Severity of a CPER record (amdsmi_cper_sev_t) -> label.
SEVERITIES = {0: "non_fatal_uncorrected", 1: "fatal", 2: "non_fatal_corrected"}
# Every severity: a record of any kind advances the cursor and is counted.
SEVERITY_MASK = (1 << 0) | (1 << 1) | (1 << 2)
# Headers and bytes per call; a record larger than the buffer grows it up to MAX_BUFFER.
HEADERS_PER_CALL = 32
BUFFER = 64 * 1024
MAX_BUFFER = 4 * 1024 * 1024
# Statuses meaning "no CPER here": the ring is not offered, or (before amdsmi 7.1)
# it is empty, which older releases report as FILE_ERROR.
NO_CPER = frozenset({"not_supported", "not_yet_implemented", "file_not_found", "file_error"})
SUCCESS, MORE_DATA = 0, 39
# AFIDs one record can name (amdsmi's MAX_NUMBER_OF_AFIDS_PER_RECORD).
MAX_AFIDS = 12
TIMESTAMP_VALID = 1 << 1
SIGNATURE = b"CPER"
# The first amdsmi (major, minor, release) that decodes the AFIDs of corrected records.
CORRECTED_AFIDS_FROM = (26, 5, 0)
CORRECTED = 2  # amdsmi_cper_sev_t of a corrected record
NOT_DECODED = "corrected_afids_not_decoded"


def lib_version(api: Any) -> tuple[int, int, int] | None:
    """The amdsmi library's (major, minor, release), from the library; None if unsaid."""
    try:
        v = api.amdsmi_get_lib_version()
        return (int(v["major"]), int(v["minor"]), int(v["release"]))
    except Exception:  # a binding without it, or an answer of another shape
        return None


def decodes_corrected(version: tuple[int, int, int] | None) -> bool:
    """Whether a library of ``version`` decodes corrected AFIDs (unknown version: no)."""
    return version is not None and version >= CORRECTED_AFIDS_FROM


def cper_timestamp(ts: Any) -> float | None:
    """Unix time of a CPER header's timestamp (UTC), None when it is not a date."""
    century = int(ts.century)
    year = century * 100 + int(ts.year) if century else 2000 + int(ts.year)
    try:
        when = datetime(
            year,
            int(ts.month),
            int(ts.day),
            int(ts.hours),
            int(ts.minutes),
            int(ts.seconds),
            tzinfo=timezone.utc,
        )
    except (ValueError, OverflowError):
        return None
    return when.timestamp()


@dataclass
class _Chunk:
    status: str  # "" read (more may follow), "done" the ring is drained, else a status name
    cursor: int
    records: list[tuple[list[int], int, float | None]]  # (AFIDs, severity, timestamp)
    bad: Counter[str]


class CperReader:
    """Reads one GPU's new CPER records into its ledger, a bounded number per poll."""

    def __init__(self, api: Any, budget: int) -> None:
        self.api = api
        self.budget = budget
        w = api.amdsmi_wrapper
        self._entries = getattr(w, "amdsmi_get_gpu_cper_entries", None)
        # Not exported by the package's top level (7.0): its ctypes function, like the entries.
        self._decode = getattr(w, "amdsmi_get_afids_from_cper", None)
        self._hdr = getattr(w, "amdsmi_cper_hdr_t", None)
        self._size = BUFFER
        # Reused by every decoding (one worker thread polls).
        self._afid_out = (ctypes.c_uint64 * MAX_AFIDS)()
        self._afid_n = ctypes.c_uint32()
        self.version = lib_version(api)
        # False: corrected records' AFIDs are not decoded; their counts are unknown.
        self.decodes_corrected = decodes_corrected(self.version)

    @property
    def offered(self) -> bool:
        """False when the amdsmi package predates CPER."""
        return None not in (self._entries, self._decode, self._hdr)

    def read(self, r: DeviceReader, ledger: Ledger) -> Ledger:
        """The ledger after up to ``budget`` new records; failures go to ``r``."""
        out = Ledger.from_wire(ledger.to_wire())
        counts, last, skipped = Counter(out.counts), dict(out.last), Counter(out.skipped)
        left, restarted = self.budget, False
        while left > 0:
            chunk = self._chunk(r, out.cursor, min(left, HEADERS_PER_CALL))
            if chunk.status not in ("", "done"):
                if chunk.status not in NO_CPER:
                    r.failure("cper", chunk.status)
                break
            if chunk.cursor < out.cursor and not chunk.records:
                # The ring is shorter than our cursor: the driver was reloaded and
                # its ring started again (a reboot is caught by the daemon's boot id).
                # Its records are new: read it from the start, once.
                r.errors["cper_ring_restarted"] += 1
                if out.cursor == 0 or restarted:
                    break
                out.cursor, restarted = 0, True
                continue
            skipped.update(chunk.bad)
            moved = chunk.cursor != out.cursor
            out.cursor = chunk.cursor
            for afids, severity, when in chunk.records:
                if severity == CORRECTED and not self.decodes_corrected:
                    skipped[NOT_DECODED] += 1
                    continue
                label = SEVERITIES.get(severity, "unknown")
                for afid in afids:
                    counts[f"{afid}/{label}"] += 1
                    stamp = when if when is not None else time.time()
                    last[str(afid)] = max(last.get(str(afid), 0.0), stamp)
            left -= len(chunk.records) + sum(chunk.bad.values())
            if chunk.status == "done" or not moved:
                break
        out.counts, out.last, out.skipped = dict(counts), last, dict(skipped)
        return out

    def _chunk(self, r: DeviceReader, cursor: int, headers: int) -> _Chunk:
        api, hdr_type = self.api, self._hdr
        while True:
            buf = ctypes.create_string_buffer(self._size)
            size = ctypes.c_uint64(self._size)
            hdrs = (ctypes.POINTER(hdr_type) * headers)()
            count = ctypes.c_uint64(headers)
            cur = ctypes.c_uint64(cursor)
            code = int(
                self._entries(  # type: ignore[misc]
                    r.handle,
                    ctypes.c_uint32(SEVERITY_MASK),
                    buf,
                    ctypes.byref(size),
                    hdrs,
                    ctypes.byref(count),
                    ctypes.byref(cur),
                )
            )
            if code not in (SUCCESS, MORE_DATA):
                status = status_name(api.status_names, code)
                if status in LOST - NO_CPER:
                    raise DeviceGone(CODES.gone[status], f"cper: {status}")
                return _Chunk(status, cursor, [], Counter())
            r.successes += 1
            n = min(int(count.value), headers)
            if code == MORE_DATA and n == 0 and cur.value == cursor:
                # The next record does not fit: a larger buffer, else give up this poll.
                if self._size >= MAX_BUFFER:
                    return _Chunk("record_too_large", cursor, [], Counter())
                self._size = min(self._size * 4, MAX_BUFFER)
                continue
            records, bad = self._records(buf, min(int(size.value), self._size), hdrs, n)
            return _Chunk("done" if code == SUCCESS else "", int(cur.value), records, bad)

    def _records(
        self, buf: Any, used: int, hdrs: Any, n: int
    ) -> tuple[list[tuple[list[int], int, float | None]], Counter[str]]:
        """Each well-formed record's AFIDs, severity and time; the others counted by reason."""
        base = ctypes.addressof(buf)
        header_size = ctypes.sizeof(self._hdr)  # type: ignore[arg-type]
        records: list[tuple[list[int], int, float | None]] = []
        bad: Counter[str] = Counter()
        for k in range(n):
            ptr = hdrs[k]
            if not ptr:
                bad["bad_header"] += 1
                continue
            start = ctypes.addressof(ptr.contents) - base
            if start < 0 or start + header_size > used:
                bad["bad_header"] += 1
                continue
            hdr = ptr.contents
            length = int(hdr.record_length)
            if length < header_size or start + length > used:
                bad["bad_length"] += 1
                continue
            if bytes(hdr.signature) != SIGNATURE:
                bad["bad_signature"] += 1
                continue
            valid = int(hdr.cper_valid_bits.valid_mask)
            when = cper_timestamp(hdr.timestamp) if valid & TIMESTAMP_VALID else None
            afids = self._afids(ctypes.cast(base + start, ctypes.POINTER(ctypes.c_char)), length)
            if isinstance(afids, str):
                bad[afids] += 1
                continue
            records.append((afids, int(hdr.error_severity), when))
        return records, bad

    def _afids(self, record: Any, length: int) -> list[int] | str:
        """The AFIDs of one record (decoded in place), or why they cannot be."""
        n = self._afid_n
        n.value = MAX_AFIDS
        code = int(
            self._decode(  # type: ignore[misc]
                record, ctypes.c_uint32(length), self._afid_out, ctypes.byref(n)
            )
        )
        if code != SUCCESS:
            return "afid_" + status_name(self.api.status_names, code)
        return list(self._afid_out[: min(int(n.value), MAX_AFIDS)])


def export_ledger(r: DeviceReader, ledger: Ledger, corrected_decoded: bool = True) -> None:
    """The ledger as readings: AFID counts, what each AFID is, last times, skipped records.

    ``corrected_decoded``: whether the library decodes corrected AFIDs (the gauge saying
    so; on an older library no corrected count is made up, see the module).
    """
    r.add(ACCEL_AMD_CORRECTED_AFIDS_DECODED, 1 if corrected_decoded else 0)
    described: set[str] = set()
    for key, n in ledger.counts.items():
        afid, _, severity = key.partition("/")
        r.add(ACCEL_AMD_AFID_ERRORS_TOTAL, n, afid, severity)
        if afid not in described:
            described.add(afid)
            info = afid_table.describe(afid)
            labels = (afid, info.category, info.type, info.severity, info.classified)
            r.add(ACCEL_AMD_AFID_INFO, 1, *labels)
    for afid, when in ledger.last.items():
        r.add(ACCEL_AMD_AFID_LAST_TIMESTAMP_SECONDS, when, afid)
    for reason, n in ledger.skipped.items():
        r.add(ACCEL_AMD_CPER_RECORDS_SKIPPED_TOTAL, n, reason)


# amdsmi_memory_page_status_t -> what the page is.
PAGE_STATUSES = {0: "reserved", 1: "pending", 2: "unreservable"}


def read_bad_pages(r: DeviceReader) -> None:
    """Retired (reserved) pages in the shared families; pending, unreservable; threshold."""
    pages = r.call("bad_pages", r.api.amdsmi_get_gpu_bad_page_info)
    if isinstance(pages, list):
        by_status: Counter[str] = Counter()
        for page in pages:
            status = page.get("status") if isinstance(page, dict) else None
            known = isinstance(status, int) and status in PAGE_STATUSES
            by_status[PAGE_STATUSES[status] if known else "unknown"] += 1  # type: ignore[index]
        # cause "": amdsmi does not say why a page was retired.
        r.add(ACCEL_RETIRED_PAGES, by_status["reserved"], "")
        r.add(ACCEL_RETIRED_PAGES_PENDING, 1 if by_status["pending"] else 0)
        for status in ("pending", "unreservable"):
            r.add(ACCEL_AMD_BAD_PAGES, by_status[status], status)
    threshold = r.call("bad_page_threshold", r.api.amdsmi_get_gpu_bad_page_threshold)
    if isinstance(threshold, int) and not isinstance(threshold, bool) and threshold != U32_MAX:
        r.add(ACCEL_AMD_BAD_PAGE_THRESHOLD, threshold)
