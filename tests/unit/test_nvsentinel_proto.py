"""NVSentinel's health_event.proto as committed: its gencode fresh, the names we rely on."""

from __future__ import annotations

import hashlib
from pathlib import Path

from exporter.config.nvsentinel import NVSENTINEL_ACTIONS
from tests.helpers.proto import assert_gencode_fresh

PROTO_DIR = (
    Path(__file__).resolve().parents[2] / "exporter" / "third_party" / "nvsentinel_health_event"
)


def test_gencode_matches_proto(tmp_path):
    assert_gencode_fresh(PROTO_DIR, "health_event", tmp_path)


def test_the_proto_is_nvidias_file_with_its_notice():
    text = (PROTO_DIR / "health_event.proto").read_text()
    assert text.startswith("// Copyright (c) 2025, NVIDIA CORPORATION.  All rights reserved.\n")
    assert "Licensed under the Apache License, Version 2.0" in text
    # The file as NVIDIA/NVSentinel holds it at 264bfab8 (a trailing newline added).
    assert hashlib.sha256(text.rstrip("\n").encode()).hexdigest() == (
        "09d25584ac101c50f101896eef72744ce287b281c7735935c0702b4aab96330b"
    )
    assert "264bfab85e3c490468f9239858fa52bb6b977e3f" in (PROTO_DIR / "__init__.py").read_text()


def test_service_fields_and_enums_are_the_platform_connectors():
    from exporter.outputs.nvsentinel_wire import method_path
    from exporter.third_party.nvsentinel_health_event import health_event_pb2 as pb

    assert method_path(pb) == "/datamodels.PlatformConnector/HealthEventOccurredV1"
    fields = {f.name: f.number for f in pb.HealthEvent.DESCRIPTOR.fields}
    assert fields == {
        "version": 1,
        "agent": 2,
        "componentClass": 3,
        "checkName": 4,
        "isFatal": 5,
        "isHealthy": 6,
        "message": 7,
        "recommendedAction": 8,
        "errorCode": 9,
        "entitiesImpacted": 10,
        "metadata": 11,
        "generatedTimestamp": 12,
        "nodeName": 13,
        "quarantineOverrides": 14,
        "drainOverrides": 15,
        "processingStrategy": 16,
    }
    # The config's list of RecommendedAction names (loaded without protobuf) is the enum's.
    assert tuple(pb.RecommendedAction.keys()) == NVSENTINEL_ACTIONS
    assert dict(pb.ProcessingStrategy.items()) == {
        "UNSPECIFIED": 0,
        "EXECUTE_REMEDIATION": 1,
        "STORE_ONLY": 2,
    }
