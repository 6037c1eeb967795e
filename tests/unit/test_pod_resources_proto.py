"""The committed pod-resources gencode is exactly what protoc makes of the committed .proto."""

from __future__ import annotations

import shutil
from pathlib import Path

from grpc_tools import protoc

PROTO_DIR = Path(__file__).resolve().parents[2] / "exporter" / "enrich" / "_proto"


def test_gencode_matches_proto(tmp_path):
    shutil.copy(PROTO_DIR / "pod_resources.proto", tmp_path)
    status = protoc.main(
        [
            "protoc",
            f"-I{tmp_path}",
            f"--python_out={tmp_path}",
            f"--pyi_out={tmp_path}",
            str(tmp_path / "pod_resources.proto"),
        ]
    )
    assert status == 0
    for name in ("pod_resources_pb2.py", "pod_resources_pb2.pyi"):
        assert (tmp_path / name).read_text() == (PROTO_DIR / name).read_text(), (
            f"{name} is stale: regenerate it (see exporter/enrich/_proto/__init__.py)"
        )


def test_service_and_fields_match_the_kubelet():
    from exporter.enrich._proto import pod_resources_pb2 as pb

    service = pb.DESCRIPTOR.services_by_name["PodResourcesLister"]
    assert service.full_name == "v1.PodResourcesLister"
    assert service.methods_by_name["List"].input_type.full_name == "v1.ListPodResourcesRequest"
    fields = pb.ContainerDevices.DESCRIPTOR.fields_by_name
    assert (fields["resource_name"].number, fields["device_ids"].number) == (1, 2)
    pod = pb.PodResources.DESCRIPTOR.fields_by_name
    assert (pod["name"].number, pod["namespace"].number, pod["containers"].number) == (1, 2, 3)
