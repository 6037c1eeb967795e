"""The committed pod-resources gencode is exactly what protoc makes of the committed .proto."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

from tests.helpers.proto import assert_gencode_fresh

PROTO_DIR = Path(__file__).resolve().parents[2] / "exporter" / "third_party" / "pod_resources"


def test_gencode_matches_proto(tmp_path):
    assert_gencode_fresh(PROTO_DIR, "pod_resources", tmp_path)


def test_service_and_fields_match_the_kubelet():
    from exporter.third_party.pod_resources import pod_resources_pb2 as pb

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

    import exporter.third_party.pod_resources as package
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
    monkeypatch.delitem(
        sys.modules, "exporter.third_party.pod_resources.pod_resources_pb2", raising=False
    )
    monkeypatch.delattr(package, "pod_resources_pb2", raising=False)
    sock = tmp_path / "kubelet.sock"
    sock.touch()  # a kubelet is there: only the runtime is wrong
    with pytest.raises(AttributionError) as failed:
        list_assignments(str(sock), 1.0, 16 << 20, lambda name: True)
    assert failed.value.reason == "grpc_missing"
    assert "VersionError" in failed.value.detail and "accel-exporter[k8s]" in failed.value.detail


def test_dra_fields_match_the_kubelet():
    # k8s.io/kubelet/pkg/apis/podresources/v1/api.proto (Kubernetes 1.34).
    from exporter.third_party.pod_resources import pod_resources_pb2 as pb

    container = pb.ContainerResources.DESCRIPTOR.fields_by_name
    assert container["dynamic_resources"].number == 5
    dynamic = pb.DynamicResource.DESCRIPTOR.fields_by_name
    assert "class_name" not in dynamic  # field 1, removed in 1.31
    assert {n: f.number for n, f in dynamic.items()} == {
        "claim_name": 2,
        "claim_namespace": 3,
        "claim_resources": 4,
    }
    claim = pb.ClaimResource.DESCRIPTOR.fields_by_name
    assert {n: f.number for n, f in claim.items()} == {
        "cdi_devices": 1,
        "driver_name": 2,
        "pool_name": 3,
        "device_name": 4,
    }
