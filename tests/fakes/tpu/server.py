"""A fake libtpu runtime metric service, built from the real proto (tpu-info's generated code).

Run as ``python -m tests.fakes.tpu.server SCENARIO PORT_FILE``: it listens on a
free loopback port, writes the port to PORT_FILE, and answers
``GetRuntimeMetric`` from the JSON file SCENARIO, read again on every request
so a test changes the service's behaviour by rewriting it:

``{"mode": "normal" | "hang" | "unavailable" | "garbage" | "string_gauge",
   "device_attr": "int" | "kvlist_string" | "kvlist_int",
   "devices": {"<runtime device id>": {"total": B, "usage": B, "duty": %, "bw": %}},
   "duty_per_chip": {"<chip id>": %}   (v2/v3: duty cycle reported once per chip),
   "missing": ["<metric name>", ...]   (answered NOT_FOUND),
   "failing": {"<metric name>": "<grpc.StatusCode name>"}   (answered with that status),
   "distributions": {"<megascale metric name>": [{"buffer_size": str, "counts": [n, ...],
       "mean": us, "exponential": [n, growth, scale] | "explicit": [bound, ...],
       "count": n (default: the sum of counts)}]}}``

It runs in its own process because tpu-info's descriptors and the exporter's
own (identical wire format, other file) cannot share one protobuf pool.
"""

from __future__ import annotations

import json
import signal
import sys
import time
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
from tpu_info.proto import tpu_metric_service_pb2 as pb

FIELDS = {
    "tpu.runtime.hbm.memory.total.bytes": ("total", "as_int"),
    "tpu.runtime.hbm.memory.usage.bytes": ("usage", "as_int"),
    "tpu.runtime.tensorcore.dutycycle.percent": ("duty", "as_double"),
    "tpu.runtime.hbm.utilization.percent": ("bw", "as_double"),
}
SERVICE = pb.DESCRIPTOR.services_by_name["RuntimeMetricService"]


def _attribute(device: int, how: str) -> Any:
    if how == "kvlist_string":
        inner = pb.Attribute(key="device_ordinal", value=pb.AttrValue(string_attr=str(device)))
        return pb.Attribute(
            key="device", value=pb.AttrValue(kvlist_attr=pb.KeyValueList(attributes=[inner]))
        )
    if how == "kvlist_int":
        inner = pb.Attribute(key="device_ordinal", value=pb.AttrValue(int_attr=device))
        return pb.Attribute(
            key="device", value=pb.AttrValue(kvlist_attr=pb.KeyValueList(attributes=[inner]))
        )
    return pb.Attribute(key="device-id", value=pb.AttrValue(int_attr=device))


class Service:
    def __init__(self, scenario: Path) -> None:
        self.scenario = scenario

    def load(self) -> dict[str, Any]:
        try:
            return json.loads(self.scenario.read_text())
        except (OSError, ValueError):
            return {}

    def get(self, request: Any, context: Any) -> Any:
        s = self.load()
        mode = s.get("mode", "normal")
        deadline = time.monotonic() + 60
        while mode == "hang" and time.monotonic() < deadline and context.is_active():
            time.sleep(0.05)
            mode = self.load().get("mode", "normal")
        if mode == "unavailable":
            context.abort(grpc.StatusCode.UNAVAILABLE, "no TPU workload")
        if mode == "garbage":
            return b"\xff\xff\xff\xff not a MetricResponse"
        name = request.metric_name
        failing = s.get("failing", {}).get(name)
        if failing:
            context.abort(grpc.StatusCode[failing], f"metric {name} could not be read")
        if name.startswith("megascale."):
            return self.distribution(name, s, context)
        if name not in FIELDS or name in s.get("missing", []):
            context.abort(grpc.StatusCode.NOT_FOUND, f"metric {name} not found")
        key, kind = FIELDS[name]
        how = s.get("device_attr", "int")
        points = []
        source = s.get("devices", {})
        if key == "duty" and "duty_per_chip" in s:
            source = {c: {"duty": v} for c, v in s["duty_per_chip"].items()}
        for device, values in sorted(source.items(), key=lambda kv: int(kv[0])):
            if key not in values:
                continue
            value = values[key]
            if mode == "string_gauge":
                gauge = pb.Gauge(as_string=str(value))
            elif kind == "as_int":
                gauge = pb.Gauge(as_int=int(value))
            else:
                gauge = pb.Gauge(as_double=float(value))
            points.append(pb.Metric(attribute=_attribute(int(device), how), gauge=gauge))
        return pb.MetricResponse(metric=pb.TPUMetric(name=name, metrics=points))

    def distribution(self, name: str, s: dict[str, Any], context: Any) -> Any:
        wanted = s.get("distributions", {}).get(name)
        if wanted is None:
            context.abort(grpc.StatusCode.NOT_FOUND, f"metric {name} not found")
        points = []
        for d in wanted:
            options = pb.Distribution.BucketOptions()
            if "explicit" in d:
                options.explicit_buckets.bounds.extend(d["explicit"])
            else:
                n, growth, scale = d["exponential"]
                options.exponential_buckets.num_finite_buckets = n
                options.exponential_buckets.growth_factor = growth
                options.exponential_buckets.scale = scale
            dist = pb.Distribution(
                count=d.get("count", sum(d["counts"])),
                mean=d["mean"],
                bucket_options=options,
                bucket_counts=d["counts"],
            )
            size = pb.Attribute(key="buffer-size", value=pb.AttrValue(string_attr=d["buffer_size"]))
            attribute = pb.Attribute(
                key="labels", value=pb.AttrValue(kvlist_attr=pb.KeyValueList(attributes=[size]))
            )
            points.append(pb.Metric(attribute=attribute, distribution=dist))
        return pb.MetricResponse(metric=pb.TPUMetric(name=name, metrics=points))


def _serialize(reply: Any) -> bytes:
    return reply if isinstance(reply, bytes) else reply.SerializeToString()


def main(scenario: str, port_file: str) -> int:
    service = Service(Path(scenario))
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=32))
    method = SERVICE.methods_by_name["GetRuntimeMetric"]
    handler = grpc.method_handlers_generic_handler(
        SERVICE.full_name,
        {
            method.name: grpc.unary_unary_rpc_method_handler(
                service.get,
                request_deserializer=pb.MetricRequest.FromString,
                response_serializer=_serialize,
            )
        },
    )
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    Path(port_file).write_text(str(port))
    signal.signal(signal.SIGTERM, lambda *_: server.stop(0))
    server.wait_for_termination()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1], sys.argv[2]))
