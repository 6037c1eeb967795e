"""Generated protobuf code for the kubelet pod-resources v1 API (do not edit by hand).

``pod_resources_pb2.py`` and ``pod_resources_pb2.pyi`` are generated from
``pod_resources.proto`` with grpcio-tools (protoc 35.1, protobuf gencode 7.35.1):

    cd exporter/third_party/pod_resources && python -m grpc_tools.protoc -I. \\
        --python_out=. --pyi_out=. pod_resources.proto

``tests/unit/test_pod_resources_proto.py`` regenerates them and fails when the
committed files differ, so the .proto and the code cannot drift apart. No gRPC
stub module is generated: the client calls the one method by its path.

Origin: ``k8s.io/kubelet/pkg/apis/podresources/v1/api.proto`` (Kubernetes,
Apache-2.0), the same package, service, messages and field numbers (see the .proto's
header). Its one reader is exporter/enrich/pod_resources.py.
"""
