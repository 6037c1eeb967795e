"""Inspector JSONL records exactly as the plugin's writer lays them out on disk.

Compact JSON, keys in the writer's order, doubles as ``%lf`` (6 decimals),
bandwidth computed with the plugin's formula (``inspectorComputeOpBw``), as
documented in shared/reference/rccl_ras.md section 4.3.
"""

from __future__ import annotations

BUS_FACTOR = {
    "AllReduce": lambda n: 2 * (n - 1) / n,
    "ReduceScatter": lambda n: (n - 1) / n,
    "AllGather": lambda n: (n - 1) / n,
    "Broadcast": lambda n: 1.0,
    "Reduce": lambda n: 1.0,
}
TRAFFIC_TIMES_N = {"ReduceScatter", "AllGather"}


def bandwidth(coll: str, msg: int, exec_us: int, n_ranks: int) -> tuple[float, float]:
    """(algobw, busbw) in GB/s as the plugin computes them."""
    if exec_us == 0 or coll not in BUS_FACTOR:
        return 0.0, 0.0
    traffic = msg * n_ranks if coll in TRAFFIC_TIMES_N else msg
    algo = traffic / 1e9 / (exec_us / 1e6)
    return algo, algo * BUS_FACTOR[coll](n_ranks)


def _header(comm: int, rank: int, n_ranks: int, nnodes: int, comm_name: str | None) -> str:
    name = f'"comm_name":"{comm_name}",' if comm_name is not None else ""
    return (
        f'"header":{{"id":"0x{comm:x}",{name}"rank":{rank},"n_ranks":{n_ranks},"nnodes":{nnodes}}}'
    )


def _metadata(hostname: str, pid: int, ts: int) -> str:
    return (
        '"metadata":{"inspector_output_format_version":"v4.0","git_rev":"75e61acda-dirty",'
        f'"rec_mechanism":"nccl_profiler_interface","dump_timestamp_us":{ts},'
        f'"hostname":"{hostname}","pid":{pid}}}'
    )


def coll_line(
    comm: int,
    rank: int,
    coll: str,
    sn: int,
    msg: int,
    exec_us: int,
    *,
    n_ranks: int = 8,
    nnodes: int = 1,
    timing: str = "kernel_gpu",
    scale: float = 1.0,
    hostname: str = "node-a",
    pid: int = 1000,
    ts: int = 1749490229087081,
    comm_name: str | None = None,
) -> bytes:
    """One coll_perf record (``scale`` multiplies the bandwidth, e.g. 10 for RCCL 2.28.3)."""
    algo, bus = bandwidth(coll, msg, exec_us, n_ranks)
    perf = (
        f'"coll_perf":{{"coll":"{coll}","coll_sn":{sn},"coll_msg_size_bytes":{msg},'
        f'"coll_exec_time_us":{exec_us},"coll_timing_source":"{timing}",'
        f'"coll_algobw_gbs":{algo * scale:.6f},"coll_busbw_gbs":{bus * scale:.6f}}}'
    )
    return (
        "{"
        + _header(comm, rank, n_ranks, nnodes, comm_name)
        + ","
        + _metadata(hostname, pid, ts)
        + ","
        + perf
        + "}\n"
    ).encode()


def p2p_line(
    comm: int,
    rank: int,
    op: str,
    sn: int,
    peer: int,
    msg: int,
    exec_us: int,
    *,
    n_ranks: int = 8,
    hostname: str = "node-a",
    pid: int = 1000,
) -> bytes:
    """One p2p_perf record (NCCL 2.30+)."""
    algo = msg / 1e9 / (exec_us / 1e6) if exec_us else 0.0
    perf = (
        f'"p2p_perf":{{"p2p":"{op}","p2p_sn":{sn},"p2p_peer":{peer},"p2p_msg_size_bytes":{msg},'
        f'"p2p_exec_time_us":{exec_us},"p2p_timing_source":"kernel_gpu",'
        f'"p2p_algobw_gbs":{algo:.6f},"p2p_busbw_gbs":{algo:.6f}}}'
    )
    return (
        "{"
        + _header(comm, rank, n_ranks, 1, "unknown")
        + ","
        + _metadata(hostname, pid, 1749490229087081)
        + ","
        + perf
        + "}\n"
    ).encode()
