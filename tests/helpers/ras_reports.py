"""Build RAS STATUS reports for a described job, in the formats NCCL's server writes.

The text writer follows ``rasClientRunInit``/``rasClientRunComms`` and the JSON
writer the ``json*`` helpers of ``src/ras/client_support.cc`` (printf formats,
grouping, sorting, outlier rule), as documented in shared/reference/rccl_ras.md.
Tests and the benchmark use it to produce reports for jobs no capture covers
(thousands of ranks, missing, dead or lagging ranks, op counts moving between
polls). ``style`` picks the wording of a release family:
``"2.24"`` (2.24/2.25), ``"2.26"`` (2.26-2.28.3) or ``"2.28.7"`` (3-decimal times).
"""

from __future__ import annotations

import ipaddress
from collections import Counter
from dataclasses import dataclass, field

FUNCS = ("Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce")
STATUS_WORDS = ("NOCOMM", "INIT", "RUNNING", "FINALIZE", "ABORT")
ERROR_WORDS = (
    "OK",
    "MISMATCH",
    "ERROR",
    "ERROR,MISMATCH",
    "INCOMPLETE",
    "INCOMPLETE,MISMATCH",
    "INCOMPLETE,ERROR",
    "INCOMPLETE,ERROR,MISMATCH",
)
RESULT_STRINGS = {
    1: "Unhandled CUDA error",
    2: "System error",
    3: "Internal error",
    4: "Invalid argument",
    5: "Invalid usage",
    6: "Remote process error",
    7: "NCCL operation in progress",
}
MISMATCH, ERROR, INCOMPLETE = 1, 2, 4
NOCOMM, INIT, RUNNING, FINALIZE, ABORT = 1, 2, 4, 8, 16


@dataclass
class FakeRank:
    rank: int
    host: str
    pid: int
    cuda_dev: int
    nvml_dev: int = -1
    counts: list[int] = field(default_factory=lambda: [0, 0, 0, 0, 0])
    init_state: int = 0
    async_error: int = 0
    finalize: bool = False
    destroy: bool = False
    abort: bool = False
    # ok | missing (process unreachable) | dead (declared dead) | nocomm (answered, not a member)
    fate: str = "ok"

    def __post_init__(self) -> None:
        if self.nvml_dev < 0:
            self.nvml_dev = self.cuda_dev

    @property
    def status_bit(self) -> int:
        if self.abort:
            return ABORT
        if self.finalize or self.destroy:
            return FINALIZE
        return RUNNING if self.init_state == 0 else INIT


@dataclass
class FakeComm:
    hash: int
    ranks: list[FakeRank]
    host_hash: int = 0x9E3779B97F4A7C15
    pid_hash: int = 0x1234ABCD

    @property
    def size(self) -> int:
        return len(self.ranks)


@dataclass
class FakeJob:
    comms: list[FakeComm]
    library: str = "nccl"
    version: str = "2.29.2"
    timeouts: int = 0
    collection: float = 0.012
    timestamp: str = "2025-12-19 13:07:07"

    def processes(self) -> dict[tuple[str, int], list[FakeRank]]:
        out: dict[tuple[str, int], list[FakeRank]] = {}
        for comm in self.comms:
            for rank in comm.ranks:
                out.setdefault((rank.host, rank.pid), []).append(rank)
        return out

    def set_fate(self, host: str, pid: int, fate: str) -> None:
        for comm in self.comms:
            for rank in comm.ranks:
                if (rank.host, rank.pid) == (host, pid):
                    rank.fate = fate

    def advance(
        self, ops: int = 1, func: str = "AllReduce", *, skip: set[int] = frozenset()
    ) -> None:
        """Every responding rank launches ``ops`` more operations (except ranks in ``skip``)."""
        index = FUNCS.index(func)
        for comm in self.comms:
            for rank in comm.ranks:
                if rank.fate in ("ok",) and rank.rank not in skip:
                    rank.counts[index] += ops


def make_job(
    nodes: int = 1,
    gpus_per_node: int = 8,
    *,
    library: str = "nccl",
    version: str = "2.29.2",
    base_ip: str = "10.0.0.1",
    node_comms: bool = False,
    counts: int = 100,
) -> FakeJob:
    """A job with one process per GPU and a world communicator (plus one per node if asked)."""
    world: list[FakeRank] = []
    first = ipaddress.ip_address(base_ip)
    for node in range(nodes):
        host = str(first + node)
        for gpu in range(gpus_per_node):
            rank = node * gpus_per_node + gpu
            world.append(FakeRank(rank, host, 10000 + rank, gpu, counts=[0, 0, 0, 0, counts]))
    comms = [FakeComm(0x3B2FE521BF43BC04, world)]
    if node_comms:
        for node in range(nodes):
            members = world[node * gpus_per_node : (node + 1) * gpus_per_node]
            comms.append(
                FakeComm(
                    0x100000 + node,
                    [
                        FakeRank(i, r.host, r.pid, r.cuda_dev, counts=[0, 0, counts, 0, 0])
                        for i, r in enumerate(members)
                    ],
                )
            )
    return FakeJob(comms, library=library, version=version)


# -- JSON -----------------------------------------------------------------------------------


def json_report(job: FakeJob, *, missing_comma_bug: bool = False, runtime: int = 12040) -> str:
    """The document ``SET FORMAT json`` produces (2-space pretty print, NCCL's layout)."""
    out = [
        "{\n",
        f'  "nccl_version": "{job.version}",\n',
        f'  "cuda_runtime_version": {runtime},\n',
        f'  "cuda_driver_version": {runtime},\n',
        f'  "timestamp": "{job.timestamp}",\n',
        f'  "communicators_count": {len(job.comms)},\n',
        '  "communicators": [\n',
    ]
    for ci, comm in enumerate(job.comms):
        present = [r for r in comm.ranks if r.fate == "ok"]
        missing = [r for r in comm.ranks if r.fate != "ok"]
        if ci:
            out.append(",\n")
        out.append(
            "    {\n"
            f'      "hash": "0x{comm.hash:x}",\n'
            f'      "secondary_hash": "0x{comm.host_hash:x}:0x{comm.pid_hash:x}",\n'
            f'      "size": {comm.size},\n'
            f'      "ranks_count": {len(present)},\n'
            f'      "missing_ranks_count": {len(missing)},\n'
            '      "ranks": [\n'
        )
        for ri, r in enumerate(present):
            if ri:
                out.append(",\n")
            counts = ",\n".join(
                f'            "{name}": {value}' for name, value in zip(FUNCS, r.counts)
            )
            out.append(
                "        {\n"
                f'          "rank": {r.rank},\n'
                f'          "host": "{r.host}",\n'
                f'          "pid": {r.pid},\n'
                f'          "cuda_dev": {r.cuda_dev},\n'
                f'          "nvml_dev": {r.nvml_dev},\n'
                '          "status": {\n'
                f'            "init_state": {r.init_state},\n'
                f'            "async_error": {r.async_error},\n'
                f'            "finalize_called": {str(r.finalize).lower()},\n'
                f'            "destroy_flag": {str(r.destroy).lower()},\n'
                f'            "abort_flag": {str(r.abort).lower()}\n'
                "          },\n"
                '          "collective_counts": {\n'
                f"{counts}\n"
                "          }\n"
                "        }"
            )
        out.append('\n      ],\n      "missing_ranks": [\n')
        comma = "" if missing_comma_bug else ","
        for mi, r in enumerate(missing):
            if mi:
                out.append(",\n")
            out.append(
                "        {\n"
                f'          "rank": {r.rank},\n'
                f'          "host": "{r.host}",\n'
                f'          "pid": {r.pid},\n'
                f'          "cuda_dev": {r.cuda_dev},\n'
                f'          "nvml_dev": {r.nvml_dev}{comma}\n'
                '          "status": {\n'
                f'            "unresponsive": {str(r.fate != "nocomm").lower()},\n'
                f'            "considered_dead": {str(r.fate == "dead").lower()}\n'
                "          }\n"
                "        }"
            )
        out.append("\n      ]\n    }")
    out.append(
        "\n  ],\n"
        '  "ras": {\n'
        f'    "collection_time_sec": {job.collection:.3f},\n'
        f'    "timeouts_count": {job.timeouts}\n'
        "  }\n"
        "}\n"
    )
    return "".join(out)


# -- text -------------------------------------------------------------------------------------


def _ip_key(host: str) -> tuple[int, int]:
    ip = ipaddress.ip_address(host)
    return (ip.version, int(ip))


def _outlier(count: int, verbose: bool, total: int = -1) -> bool:
    if count == 1:
        return True
    if verbose:
        return count < total * 0.5 if total != -1 else True
    return count <= 10 and (total == -1 or count <= total * 0.25)


def _plural(n: int, word: str = "s") -> str:
    return word if n > 1 else ""


def _gpu(rank: FakeRank) -> str:
    if rank.cuda_dev != rank.nvml_dev:
        return f"{rank.cuda_dev} (NVML {rank.nvml_dev})"
    return str(rank.cuda_dev)


def _gpus(ranks: list[FakeRank]) -> tuple[int, str]:
    cuda = sorted({r.cuda_dev for r in ranks})
    nvml = sorted({r.nvml_dev for r in ranks})
    text = ",".join(map(str, cuda))
    if cuda != nvml:
        text += " (NVML " + ",".join(map(str, nvml)) + ")"
    return len(cuda), text


def _where(rank: FakeRank) -> str:
    return f"GPU {_gpu(rank)} managed by process {rank.pid} on node {rank.host}"


@dataclass
class _Aux:
    comm: FakeComm
    present: list[FakeRank]
    status: int = 0
    errors: int = 0
    incomplete: list[FakeRank] = field(default_factory=list)
    nocomm: list[FakeRank] = field(default_factory=list)
    nodes: int = 0
    per_node: tuple[int, int] = (0, 0)


def _aux(comm: FakeComm, processes_missing: bool) -> _Aux:
    present = sorted(
        (r for r in comm.ranks if r.fate == "ok"), key=lambda r: (_ip_key(r.host), r.pid, r.rank)
    )
    aux = _Aux(comm, present)
    for r in comm.ranks:
        if r.fate == "ok":
            continue
        if r.fate == "nocomm" or not processes_missing:
            aux.errors |= MISMATCH
            aux.status |= NOCOMM
            aux.nocomm.append(r)
        else:
            aux.errors |= INCOMPLETE
            aux.incomplete.append(r)
    per_host = Counter(r.host for r in present)
    aux.nodes = len(per_host)
    aux.per_node = (min(per_host.values()), max(per_host.values())) if per_host else (0, 0)
    first = present[0].counts if present else None
    for r in present:
        aux.status |= r.status_bit
        if first is not None and r.counts != first:
            aux.errors |= MISMATCH
        if r.init_state not in (0, 7) or r.async_error not in (0, 7):
            aux.errors |= ERROR
    if bin(aux.status).count("1") > 1:
        aux.errors |= MISMATCH
    return aux


def _status_word(index: int, old: bool) -> str:
    return "UNKNOWN" if old and index == 0 else STATUS_WORDS[index]


def _top(status: int) -> int:
    return status.bit_length() - 1 if status else 0


def _summary(job: FakeJob, verbose: bool) -> list[str]:
    procs = sorted(job.processes().items(), key=lambda kv: (_ip_key(kv[0][0]), kv[0][1]))
    per_node: dict[str, list[tuple[tuple[str, int], int]]] = {}
    for (host, pid), ranks in procs:
        per_node.setdefault(host, []).append(((host, pid), _gpus(ranks)[0]))
    gpu_counts = [g for node in per_node.values() for _, g in node]
    total_gpus = sum(gpu_counts)
    nodes = list(per_node.values())
    consistent_gpus = len(set(gpu_counts)) == 1
    consistent_peers = len({len(n) for n in nodes}) == 1
    out = ["Job summary\n===========\n\n"]
    if consistent_gpus and consistent_peers:
        out.append(
            "  Nodes  Processes         GPUs  Processes     GPUs\n"
            "(total)   per node  per process    (total)  (total)\n"
            f"{len(nodes):7d}  {len(nodes[0]):9d}  {gpu_counts[0]:11d}  {len(procs):9d}  {total_gpus:7d}\n"
        )
        return out
    dist = Counter(len(n) for n in nodes)
    ordered = sorted(dist.items(), key=lambda kv: (-kv[1], -kv[0]))
    if consistent_gpus:
        out.append("  Nodes  Processes         GPUs\n          per node  per process\n")
        out.extend(f"{count:7d}  {value:9d}  {gpu_counts[0]:11d}\n" for value, count in ordered)
    else:
        out.append("  Nodes  Processes\n          per node\n")
        out.extend(f"{count:7d}  {value:9d}\n" for value, count in ordered)
        gdist = sorted(Counter(gpu_counts).items(), key=lambda kv: (-kv[1], -kv[0]))
        out.append("\n         Processes         GPUs\n                    per process\n")
        out.extend(f"         {count:9d}  {value:11d}\n" for value, count in gdist)
    out.append(
        "\n  Nodes  Processes         GPUs\n(total)    (total)      (total)\n"
        f"{len(nodes):7d}  {len(procs):9d}  {total_gpus:11d}\n"
    )
    if consistent_gpus:
        for value, count in ordered[1:]:
            if _outlier(count, verbose, len(nodes)):
                out.append(f"\nThe outlier node{_plural(count)}:\n")
                for host, members in per_node.items():
                    if len(members) == value:
                        pids = ",".join(str(pid) for (_, pid), _ in members)
                        out.append(f"  Node {host} running process{_plural(value, 'es')} {pids}\n")
    return out


def _process_lines(job: FakeJob, fate: str) -> list[str]:
    procs = job.processes()
    chosen = sorted(
        (key for key, ranks in procs.items() if all(r.fate == fate for r in ranks)),
        key=lambda k: (_ip_key(k[0]), k[1]),
    )
    lines = []
    for host, pid in chosen:
        n, gpus = _gpus(procs[(host, pid)])
        lines.append(f"  Process {pid} on node {host} managing GPU{_plural(n)} {gpus}\n")
    return lines


def _count_groups(values: list[tuple[int, FakeRank]]) -> list[tuple[int, list[FakeRank]]]:
    grouped: dict[int, list[FakeRank]] = {}
    for value, rank in sorted(values, key=lambda vr: (vr[0], vr[1].rank)):
        grouped.setdefault(value, []).append(rank)
    return sorted(grouped.items(), key=lambda kv: (-len(kv[1]), -kv[0]))


def text_report(job: FakeJob, *, verbose: bool = True, style: str = "2.26") -> str:
    """The text report (banner + summary + table + Errors + Warnings) as one string."""
    return "".join(text_chunks(job, verbose=verbose, style=style))


def text_chunks(job: FakeJob, *, verbose: bool = True, style: str = "2.26") -> list[str]:
    """The report in the chunks the server sends ('Communicators...' without newline)."""
    old = style == "2.24"
    if job.library == "rccl":
        banner = (
            f'RCCL version {job.version} compiled with ROCm "7.2.0.0-43-fc0010cf6a"\n'
            "HIP runtime version 70226015, amdgpu driver version 70226015\n\n"
        )
    else:
        banner = (
            f"NCCL version {job.version} compiled with CUDA 12.4\n"
            "CUDA runtime version 12040, driver version 12040\n\n"
        )
    chunks = [banner + "".join(_summary(job, verbose)), "\nCommunicators..."]
    procs = job.processes()
    missing_procs = [k for k, rs in procs.items() if all(r.fate == "missing" for r in rs)]
    dead_procs = [k for k, rs in procs.items() if all(r.fate == "dead" for r in rs)]
    auxes = [_aux(c, bool(missing_procs or dead_procs)) for c in job.comms]
    auxes.sort(key=lambda a: (-a.comm.size, -a.nodes, -_top(a.status), -a.errors, len(a.present)))
    groups: list[list[_Aux]] = []
    for a in auxes:
        prev = groups[-1][0] if groups else None
        if prev and (prev.comm.size, prev.nodes, _top(prev.status), prev.errors) == (
            a.comm.size,
            a.nodes,
            _top(a.status),
            a.errors,
        ):
            groups[-1].append(a)
        else:
            groups.append([a])
    fmt = "{:.2f}" if style in ("2.24", "2.26") else "{:.3f}"
    table = [" (" + fmt.format(job.collection) + "s)\n=============\n\n"]
    if groups:
        table.append(
            "Group     Comms     Nodes     Ranks     Ranks     Ranks    Status  Errors\n"
            "    #  in group  per comm  per node  per comm  in group\n"
        )
    else:
        table.append("No communicator data collected!\n")
    for gi, group in enumerate(groups):
        low = min(a.per_node[0] for a in group)
        high = max(a.per_node[1] for a in group)
        per_node = str(low) if low == high else f"{low}-{high}"
        unique = {(r.host, r.pid, r.nvml_dev) for a in group for r in a.present}
        first = group[0]
        table.append(
            f"{gi:5d}  {len(group):8d}  {first.nodes:8d}  {per_node:>8s}  {first.comm.size:8d}  "
            f"{len(unique):8d}  {_status_word(_top(first.status), old):>8s}  "
            f"{ERROR_WORDS[first.errors]:>6s}\n"
        )
    chunks.append("".join(table))
    errors = ["\nErrors\n======\n\n"]
    if missing_procs:
        n = len(missing_procs)
        errors.append(
            f"INCOMPLETE\n  Missing communicator data from {n} job process{_plural(n, 'es')}\n"
        )
        if _outlier(n, verbose):
            errors.extend(_process_lines(job, "missing"))
        errors.append("\n")
    if dead_procs:
        n = len(dead_procs)
        verb = "es are" if n > 1 else " is"
        errors.append(
            f"DEAD\n  {n} job process{verb} considered dead (unreachable via the RAS network)\n"
        )
        if _outlier(n, verbose):
            errors.extend(_process_lines(job, "dead"))
        errors.append("\n")
    for gi, group in enumerate(groups):
        for ci, a in enumerate(group):
            label = f"#{gi}-{ci} ({a.comm.hash:016x})"
            if a.errors & INCOMPLETE:
                n = len(a.incomplete)
                errors.append(
                    f"{label} INCOMPLETE\n  Missing communicator data from {n} rank{_plural(n)}\n"
                )
                if _outlier(n, verbose):
                    if old:
                        listed = ",".join(
                            str(r.rank) for r in sorted(a.incomplete, key=lambda r: r.rank)
                        )
                        errors.append(f"  The missing rank{_plural(n)}: {listed}\n")
                    else:
                        errors.extend(f"  Rank {r.rank} -- {_where(r)}\n" for r in a.incomplete)
                errors.append("\n")
            if a.errors & ERROR:
                errors.append(f"{label} ERROR\n")
                for attr, title in (
                    ("init_state", "Initialization"),
                    ("async_error", "Asynchronous"),
                ):
                    bad = [r for r in a.present if getattr(r, attr) not in (0, 7)]
                    if not bad:
                        continue
                    n = len(bad)
                    errors.append(f"  {title} error{_plural(n)} on {n} rank{_plural(n)}\n")
                    by_code = Counter(getattr(r, attr) for r in bad)
                    for code, count in sorted(by_code.items(), key=lambda kv: (-kv[1], kv[0])):
                        text = RESULT_STRINGS.get(code, "Unexpected error")
                        if count > 1:
                            errors.append(f"  {count} ranks reported {text}\n")
                        if _outlier(count, verbose):
                            for r in bad:
                                if getattr(r, attr) != code:
                                    continue
                                if count > 1:
                                    errors.append(f"  Rank {r.rank} -- {_where(r)}\n")
                                else:
                                    errors.append(
                                        f"  Rank {r.rank} reported {text} -- {_where(r)}\n"
                                    )
                errors.append("\n")
    chunks.append("".join(errors))
    warnings = ["Warnings\n========\n\n"]
    if job.timeouts:
        n = job.timeouts
        warnings.append(
            f"TIMEOUT\n  Encountered {n} communication timeout{_plural(n)} while gathering communicator data\n\n"
        )
    for gi, group in enumerate(groups):
        for ci, a in enumerate(group):
            if not a.errors & MISMATCH:
                continue
            size = a.comm.size
            warnings.append(f"#{gi}-{ci} ({a.comm.hash:016x}) MISMATCH\n")
            if bin(a.status).count("1") > 1:
                warnings.append("  Communicator ranks have different status\n")
                entries: list[tuple[int, list[FakeRank]]] = []
                by_status: dict[int, list[FakeRank]] = {}
                for r in sorted(a.present, key=lambda r: (r.status_bit, r.rank)):
                    by_status.setdefault(_top(r.status_bit), []).append(r)
                entries.extend(by_status.items())
                if a.nocomm:
                    entries.append((0, sorted(a.nocomm, key=lambda r: r.rank)))
                entries.sort(key=lambda kv: (-len(kv[1]), -kv[0]))
                for value, ranks in entries:
                    word = _status_word(value, old)
                    if len(ranks) > 1:
                        warnings.append(f"  {len(ranks)} ranks have status {word}\n")
                    if _outlier(len(ranks), verbose, size):
                        for r in ranks:
                            if len(ranks) > 1:
                                warnings.append(f"  Rank {r.rank} -- {_where(r)}\n")
                            else:
                                warnings.append(
                                    f"  Rank {r.rank} has status {word} -- {_where(r)}\n"
                                )
            if old:
                series = [("collective", [(sum(r.counts), r) for r in a.present])]
            else:
                series = [
                    (name, [(r.counts[i], r) for r in a.present]) for i, name in enumerate(FUNCS)
                ]
            for name, values in series:
                if len({v for v, _ in values}) <= 1:
                    continue
                warnings.append(f"  Communicator ranks have different {name} operation counts\n")
                for value, ranks in _count_groups(values):
                    n = len(ranks)
                    if n > 1:
                        if value > 0 or old:
                            warnings.append(f"  {n} ranks have launched up to operation {value}\n")
                        else:
                            warnings.append(f"  {n} ranks have not launched any operations\n")
                    if _outlier(n, verbose, size):
                        for r in ranks:
                            if n > 1:
                                warnings.append(f"  Rank {r.rank} -- {_where(r)}\n")
                            elif value > 0 or old:
                                warnings.append(
                                    f"  Rank {r.rank} has launched up to operation {value} -- {_where(r)}\n"
                                )
                            else:
                                warnings.append(
                                    f"  Rank {r.rank} has not launched any operations -- {_where(r)}\n"
                                )
                if not old:
                    warnings.append("\n")
            if old:
                warnings.append("\n")
    chunks.append("".join(warnings))
    return chunks
