"""The committed pod-resources gencode is exactly what protoc makes of the committed .proto."""

from __future__ import annotations

import shutil
import sys
import types
from pathlib import Path

import pytest
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


def test_a_runtime_older_than_the_gencode_is_grpc_missing(monkeypatch, tmp_path):
    # Gencode checks the protobuf runtime at import and raises VersionError, an
    # Exception but not an ImportError, when the runtime is older than protoc was.
    import google.protobuf
    from google.protobuf import runtime_version as real

    import exporter.enrich._proto as package
    from exporter.enrich.errors import AttributionError
    from exporter.enrich.pod_resources import list_assignments

    class VersionError(Exception):
        pass

    def validate(domain, major, minor, patch, suffix, location):
        raise VersionError(f"gencode {major}.{minor}.{patch} is newer than the runtime 6.30.0")

    older = types.ModuleType("google.protobuf.runtime_version")
    older.Domain = real.Domain
    older.VersionError = VersionError
    older.ValidateProtobufRuntimeVersion = validate
    monkeypatch.setitem(sys.modules, "google.protobuf.runtime_version", older)
    monkeypatch.setattr(google.protobuf, "runtime_version", older)
    monkeypatch.delitem(sys.modules, "exporter.enrich._proto.pod_resources_pb2", raising=False)
    monkeypatch.delattr(package, "pod_resources_pb2", raising=False)
    with pytest.raises(AttributionError) as failed:
        list_assignments(str(tmp_path / "kubelet.sock"), 1.0, 16 << 20, lambda name: True)
    assert failed.value.reason == "grpc_missing"
    assert "VersionError" in failed.value.detail and "accel-exporter[k8s]" in failed.value.detail
