"""The exporter's libtpu proto: committed gencode is fresh, and the wire format is tpu-info's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.helpers.proto import assert_gencode_fresh

PROTO_DIR = Path(__file__).resolve().parents[2] / "exporter" / "third_party" / "tpu_metric_service"

# Dump every message's fields as {message: {field: [number, type, label, message type]}}.
# Run in a subprocess for tpu-info: its descriptors and ours describe the same
# package from another file, and one protobuf pool cannot hold both.
_DUMP = """
import json, sys, importlib
pb = importlib.import_module(sys.argv[1])
out = {}
def walk(desc):
    out[desc.full_name] = {
        f.name: [f.number, f.type, getattr(f, "label", 0), f.message_type.full_name if f.message_type else ""]
        for f in desc.fields
    }
    for inner in desc.nested_types:
        walk(inner)
for m in pb.DESCRIPTOR.message_types_by_name.values():
    walk(m)
svc = pb.DESCRIPTOR.services_by_name["RuntimeMetricService"]
out["service"] = {m.name: [m.full_name, m.input_type.full_name, m.output_type.full_name] for m in svc.methods}
print(json.dumps(out))
"""


def _dump(module: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", _DUMP, module], capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def test_gencode_matches_proto(tmp_path: Path) -> None:
    assert_gencode_fresh(PROTO_DIR, "tpu_metric_service", tmp_path)


def test_every_message_and_field_is_tpu_infos() -> None:
    ours = _dump("exporter.third_party.tpu_metric_service.tpu_metric_service_pb2")
    theirs = _dump("tpu_info.proto.tpu_metric_service_pb2")
    # Ours leaves out GetTpuRuntimeStatus and the deprecated regular buckets; the
    # rest must be the same names, numbers and types (the wire format).
    assert set(ours) <= set(theirs)
    for message, fields in ours.items():
        if message == "service":
            continue
        for name, spec in fields.items():
            assert theirs[message].get(name) == spec, (message, name)
    for name, spec in ours["service"].items():
        assert theirs["service"][name] == spec
    used = {
        "tpu.monitoring.runtime.MetricRequest",
        "tpu.monitoring.runtime.MetricResponse",
        "tpu.monitoring.runtime.TPUMetric",
        "tpu.monitoring.runtime.Metric",
        "tpu.monitoring.runtime.Gauge",
        "tpu.monitoring.runtime.AttrValue",
        "tpu.monitoring.runtime.KeyValueList",
    }
    for message in used:  # the messages the client reads lack no field of tpu-info's
        assert set(ours[message]) == set(theirs[message]), message
