"""Label sets of the workload join families, and the enrich config the e2e tests use."""

from __future__ import annotations

from typing import Any

from exporter.catalog.workload import PROCESS_WORKLOAD_LABELS

# The daemon tests' other auto sources have nothing to find; keep them out of the way.
QUIET = {name: {"enabled": False} for name in ("amdsmi", "ccl_ras", "ccl_inspector")}


def process_row(device: str, uuid: str, pid: int | str, **labels: str) -> dict[str, str]:
    """Labels of one accel_process_workload_info series; labels not given are empty."""
    row = dict.fromkeys(PROCESS_WORKLOAD_LABELS, "")
    row.update(device=device, uuid=uuid, pid=str(pid), **labels)
    return row


def workload_row(
    device: str, uuid: str, namespace: str, pod: str, container: str
) -> dict[str, str]:
    """Labels of one accel_device_workload_info series."""
    return {
        "device": device,
        "uuid": uuid,
        "namespace": namespace,
        "pod": pod,
        "container": container,
    }


def job_row(device: str, uuid: str, job_id: str, user: str, partition: str) -> dict[str, str]:
    """Labels of one accel_device_job_info series."""
    return {"device": device, "uuid": uuid, "job_id": job_id, "user": user, "partition": partition}


def enrich(proc_path: str, socket: str, **k8s: Any) -> dict[str, Any]:
    """A ``workload`` section polling fast, with a kubelet socket and a /proc root."""
    return {
        "interval": "500ms",
        "proc_path": proc_path,
        "k8s": {"socket": socket, "interval": "1s", **k8s},
    }
