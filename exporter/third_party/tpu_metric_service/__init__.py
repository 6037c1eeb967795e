"""Generated protobuf code for libtpu's runtime metric service (do not edit by hand).

``tpu_metric_service_pb2.py`` and ``.pyi`` are generated from
``tpu_metric_service.proto`` with grpcio-tools (protoc 35.1, protobuf gencode 7.35.1):

    cd exporter/third_party/tpu_metric_service && python -m grpc_tools.protoc -I. \\
        --python_out=. --pyi_out=. tpu_metric_service.proto

``tests/unit/test_tpu_proto.py`` regenerates them and fails when the committed
files differ, and checks every message and field against tpu-info's own
descriptors. No stub module is generated: the client calls the method by its path.

Origin: the service's published interface in tpu-info 0.14
(``tpu_info/proto/tpu_metric_service.proto``, Google, Apache-2.0), written out as far
as the exporter uses it (see the .proto's header). Its one reader is
exporter/backends/tpu.py, inside the TPU worker process.
"""
