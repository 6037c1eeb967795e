"""Golden expositions: each vendor fake's /metrics at every profile, as a reviewable file.

One file per vendor fake and profile, ``tests/golden/<source>-<profile>.prom``. A change
that alters what a node exposes (a family, a label, a value, the order) fails here
and shows as a diff of these files in review. To accept the change, rewrite them::

    ACCEL_GOLDEN_UPDATE=1 python -m pytest -p no:cacheprovider -n 0 tests/golden

and commit the files with the change that made them.

How a file is made (in process, as ``accel-exporter once`` renders, no daemon): the
fake node of :mod:`tests.helpers.nodes` with every other source off (the host, RAS,
Inspector, checkpoint, workload attribution, and whatever source the config gains
later, such as a fabric reader: nothing of the build machine is in a file), one
poll, then the same store rendered through each profile's exposition.

What varies between runs is normalized (:func:`normalize`), so a file changes only
when the exposition does:

- ``accel_exporter_build_info``: the ``version`` and ``python`` label values are
  written ``<version>`` and ``<python>``;
- a fake service's loopback port (the TPU runtime's ``address``, any port the test
  was given) is written ``127.0.0.1:<port>``;
- every sample of a family whose value is a time or a duration (Unix timestamps,
  ``*_duration_seconds`` and ``*_collection_seconds``: gauges, and histogram buckets and
  sums, whose bucket depends on how long a poll took) is written with the value
  ``<varies>``; a histogram's ``_count`` (how many polls) is kept;
- nothing else: values the fakes fix (temperatures, counters, pids of the fake
  processes) are compared as they are.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from exporter.catalog import CATALOG, Kind
from exporter.commands.once import poll_all
from exporter.config.loader import load_config
from exporter.config.sources import SourcesConfig
from exporter.outputs.prometheus_setup import exposition_for
from exporter.sources.registry import build_sources, catalog_for
from exporter.store import Store
from tests.helpers.daemon import REPO
from tests.helpers.nodes import node

GOLDEN = Path(__file__).resolve().parent
UPDATE_ENV = "ACCEL_GOLDEN_UPDATE"
PROFILES = ("minimal", "default", "full")
# Device source -> the fake node of tests.helpers.nodes that serves it.
NODES = {
    "nvml": "nvidia",
    "amdsmi": "amd",
    "levelzero": "intel",
    "hlml": "gaudi",
    "tpu": "tpu",
    "neuron": "neuron",
}
_SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?P<labels>\{.*\})? (?P<value>\S+)$")
_BUILD_INFO = re.compile(r'\b(version|python)="[^"]*"')
_LOOPBACK_PORT = re.compile(r'(="127\.0\.0\.1:)\d+"')


def _varying() -> frozenset[str]:
    """The families whose values are times or durations (see the module docstring)."""
    out = set()
    for name, row in CATALOG.items():
        if name.endswith(("_timestamp_seconds", "_duration_seconds", "_collection_seconds")):
            out.add(row.family_name)
    return frozenset(out)


VARYING = _varying()


def _family(sample: str) -> str:
    """The family a sample line belongs to (a histogram's _bucket/_sum/_count folded)."""
    for suffix in ("_bucket", "_sum", "_count"):
        if sample.endswith(suffix) and sample[: -len(suffix)] in VARYING:
            return sample[: -len(suffix)]
    return sample


def normalize(text: str) -> str:
    """The exposition with what varies between runs written as placeholders."""
    out = []
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match is None:  # HELP, TYPE, blank
            out.append(line)
            continue
        name, labels, value = match["name"], match["labels"] or "", match["value"]
        if name == "accel_exporter_build_info":
            labels = _BUILD_INFO.sub(r'\1="<\1>"', labels)
        labels = _LOOPBACK_PORT.sub(r'\1<port>"', labels)
        family = _family(name)
        if family in VARYING and not name.endswith("_count"):
            value = "<varies>"
        out.append(f"{name}{labels} {value}")
    return "\n".join(out) + "\n"


def _config(work: Path, base: dict[str, Any], source: str, profile: str) -> Any:
    """The node's config with every other source off and this profile, loaded as the daemon does."""
    sources = {f.name: {"enabled": False} for f in dataclasses.fields(SourcesConfig)}
    sources[source] = base["sources"][source]
    document = {
        **base,
        "sources": sources,
        "workload": {"enabled": False},
        "outputs": {"prometheus": {"profile": profile}},
    }
    path = work / f"config-{profile}.json"
    path.write_text(json.dumps(document))
    return load_config(str(path), os.environ)


def expositions(source: str, work: Path) -> dict[str, str]:
    """profile -> the normalized exposition of ``source``'s fake node after one poll."""
    with node(NODES[source], work) as fake:
        saved = {key: os.environ.get(key) for key in (*fake.env, "PYTHONPATH")}
        # The workers inherit this process's environment: the fake's, and this tree.
        os.environ.update(fake.env)
        os.environ["PYTHONPATH"] = str(REPO)
        try:
            configs = {p: _config(work, fake.config, source, p) for p in PROFILES}
            store = Store(catalog=catalog_for(configs["full"]))
            results = asyncio.run(poll_all(build_sources(configs["full"]), store))
        finally:
            for key, old in saved.items():
                if old is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = old
    assert [(r.source, r.ok) for r in results] == [(source, True)], results
    out = {}
    for profile, config in configs.items():
        body, _ = exposition_for(store, config, process_metrics=False).render(None, None)
        out[profile] = normalize(body.decode())
    return out


def test_normalize_writes_what_varies_as_placeholders() -> None:
    text = (
        "# TYPE accel_exporter_build_info gauge\n"
        'accel_exporter_build_info{version="1.2.3",python="3.11.9"} 1.0\n'
        'accel_exporter_source_poll_duration_seconds_bucket{source="nvml",le="0.1"} 1.0\n'
        'accel_exporter_source_poll_duration_seconds_count{source="nvml"} 1.0\n'
        'accel_exporter_source_last_success_timestamp_seconds{source="nvml"} 1.7e9\n'
        'accel_temperature_celsius{device="0",uuid="GPU-0"} 41.0\n'
        'accel_tpu_runtime_attached{address="127.0.0.1:40273"} 1.0\n'
    )
    assert normalize(text).splitlines() == [
        "# TYPE accel_exporter_build_info gauge",
        'accel_exporter_build_info{version="<version>",python="<python>"} 1.0',
        'accel_exporter_source_poll_duration_seconds_bucket{source="nvml",le="0.1"} <varies>',
        'accel_exporter_source_poll_duration_seconds_count{source="nvml"} 1.0',
        'accel_exporter_source_last_success_timestamp_seconds{source="nvml"} <varies>',
        'accel_temperature_celsius{device="0",uuid="GPU-0"} 41.0',
        'accel_tpu_runtime_attached{address="127.0.0.1:<port>"} 1.0',
    ]
    assert CATALOG["accel_exporter_source_poll_duration_seconds"].kind is Kind.HISTOGRAM


@pytest.mark.parametrize("source", sorted(NODES))
def test_the_exposition_of_each_vendor_fake_is_its_golden_file(source: str, tmp_path: Path) -> None:
    got = expositions(source, tmp_path)
    update = os.environ.get(UPDATE_ENV) == "1"
    differ = []
    for profile, text in got.items():
        path = GOLDEN / f"{source}-{profile}.prom"
        if update:
            path.write_text(text)
        elif not path.exists() or path.read_text() != text:
            differ.append(path.name)
    if update:
        return
    # A set of files, not one assertion each: a change shows every profile it touches.
    assert differ == [], (
        f"{', '.join(differ)} differ from this tree's exposition; if the change is meant, "
        f"rewrite them with {UPDATE_ENV}=1 and review the diff"
    )
