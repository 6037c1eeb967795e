"""Upstream protocol definitions copied into the exporter, and their generated code.

Each subpackage holds one upstream ``.proto`` (or a wire-compatible extract of one),
the protoc gencode made from it, and a note of where it comes from and under what
licence. Nothing here is ours to edit by hand or to fold into our own code:

- ``tpu_metric_service``: libtpu's runtime metric service, as tpu-info 0.14 publishes
  it (Google, Apache-2.0); read only by the TPU backend, inside its worker process.
- ``pod_resources``: the kubelet pod-resources v1 API (Kubernetes, Apache-2.0); read
  by the pod attribution in ``exporter/enrich/``.
- ``nvsentinel_health_event``: NVSentinel's health-event contract (NVIDIA,
  Apache-2.0); read by the NVSentinel output in ``exporter/outputs/``.

tests/unit/test_import_graph.py keeps each one to its one reader, and this package
importing nothing of the exporter's.
"""
