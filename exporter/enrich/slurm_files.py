"""Slurm prolog/epilog file mode: one JSON file per running job, written by the prolog.

For sites that prefer explicit bookkeeping to reading process cgroups. The
prolog writes ``<files_dir>/<job_id>.json`` atomically (write a temporary file,
then rename) and the epilog removes it::

    {"job_id": "4242", "user": "alice", "partition": "gpu", "gpus": "0,1"}

``gpus`` is ``SLURM_JOB_GPUS`` (device indices) or a list; UUIDs and PCI bus
IDs are accepted too. ``contrib/slurm/`` has the scripts. Files not ending in
``.json`` (such as the prolog's temporary file) are ignored.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

from exporter.enrich.errors import AttributionError

MAX_FILE_BYTES = 64 * 1024


@dataclass(frozen=True)
class JobFile:
    """One running job as its prolog recorded it."""

    job_id: str
    user: str
    partition: str
    gpus: tuple[str, ...]


def parse_job_file(text: str, name: str) -> JobFile:
    """Parse one file's text; AttributionError ``bad_job_file`` naming the problem."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise AttributionError("bad_job_file", f"{name}: not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise AttributionError("bad_job_file", f"{name}: not a JSON object")
    job_id = data.get("job_id")
    if isinstance(job_id, int) and not isinstance(job_id, bool):
        job_id = str(job_id)
    if not isinstance(job_id, str) or not job_id.strip():
        raise AttributionError("bad_job_file", f"{name}: job_id must be a non-empty string")
    raw_gpus = data.get("gpus", "")
    if isinstance(raw_gpus, str):
        gpus = tuple(g.strip() for g in raw_gpus.split(",") if g.strip())
    elif isinstance(raw_gpus, list) and all(isinstance(g, (str, int)) for g in raw_gpus):
        gpus = tuple(str(g).strip() for g in raw_gpus if str(g).strip())
    else:
        raise AttributionError("bad_job_file", f"{name}: gpus must be a string or a list")
    fields = {}
    for key in ("user", "partition"):
        value = data.get(key, "")
        if not isinstance(value, str):
            raise AttributionError("bad_job_file", f"{name}: {key} must be a string")
        fields[key] = value
    return JobFile(job_id.strip(), fields["user"], fields["partition"], gpus)


def read_job_files(directory: str) -> tuple[list[JobFile], list[AttributionError]]:
    """Every readable job file in ``directory``, and the problems with the others.

    A missing directory means no job has run yet: no files, no problem.
    """
    try:
        names = sorted(os.listdir(directory))
    except FileNotFoundError:
        return [], []
    except OSError as exc:
        return [], [AttributionError("job_dir_unreadable", f"{directory}: {exc.strerror or exc}")]
    jobs: list[JobFile] = []
    problems: list[AttributionError] = []
    for name in names:
        if not name.endswith(".json"):
            continue
        path = os.path.join(directory, name)
        try:
            with open(path, "rb") as fh:
                data = fh.read(MAX_FILE_BYTES + 1)
        except FileNotFoundError:
            continue  # the epilog removed it meanwhile
        except OSError as exc:
            problems.append(AttributionError("job_file_unreadable", f"{name}: {exc.strerror}"))
            continue
        if len(data) > MAX_FILE_BYTES:
            problems.append(AttributionError("bad_job_file", f"{name}: larger than 64 KiB"))
            continue
        try:
            jobs.append(parse_job_file(data.decode("utf-8", "replace"), name))
        except AttributionError as exc:
            problems.append(exc)
    return jobs, problems
