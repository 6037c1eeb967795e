"""NVSentinel's health-event contract and its generated protobuf code (do not edit by hand).

``health_event.proto`` is NVIDIA's own file, copied unchanged (its Apache-2.0 notice
kept) from NVIDIA/NVSentinel ``data-models/protobufs/health_event.proto`` at commit
264bfab85e3c490468f9239858fa52bb6b977e3f: the ``PlatformConnector`` service its
platform connector serves on a unix socket, ``HealthEventOccurredV1(HealthEvents)``.
``health_event_pb2.py`` and ``health_event_pb2.pyi`` are generated from it with
grpcio-tools (protoc 35.1, protobuf gencode 7.35.1):

    cd exporter/third_party/nvsentinel_health_event && python -m grpc_tools.protoc -I. \\
        -I"$(python -c 'import grpc_tools, os; print(os.path.dirname(grpc_tools.__file__))')/_proto" \\
        --python_out=. --pyi_out=. health_event.proto

``tests/unit/test_nvsentinel_proto.py`` regenerates them and fails when the
committed files differ. No gRPC stub module is generated: the client calls the one
method by the path the descriptor names (exporter/outputs/nvsentinel_wire.py).
"""
