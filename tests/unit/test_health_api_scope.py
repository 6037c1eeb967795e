"""/v1/devices names each action's scope, its devices and escalation; the schema follows
the vocabulary (a word added to exporter.catalog.vocabulary fails here until it is in)."""

from __future__ import annotations

import json

import jsonschema
import pytest

from exporter import health_api
from exporter.catalog.vocabulary import ACTION_PROVENANCES, ACTION_SCOPES, RECOMMENDED_ACTIONS
from exporter.health_api import DeviceReport, SourceReport
from exporter.verdict import DeviceHealth, Finding, Reason
from tests.helpers.daemon import REPO

SCHEMA = json.loads((REPO / "docs/health-api.schema.json").read_text())


def test_the_schema_enums_are_the_vocabulary():
    defs = SCHEMA["$defs"]
    assert defs["action"]["enum"] == list(RECOMMENDED_ACTIONS)
    assert defs["scope"]["enum"] == list(ACTION_SCOPES)
    assert defs["escalation"]["enum"] == ["", *RECOMMENDED_ACTIONS]
    assert defs["provenance"]["enum"] == list(ACTION_PROVENANCES)


def record(i: int, **kw) -> DeviceHealth:
    base = dict(
        device=str(i),
        uuid=f"GPU-{i}",
        state="ok",
        reasons=(),
        findings=(),
        action="none",
        since=1.7e9,
        updated=1.7e9,
    )
    return DeviceHealth(**{**base, **kw})


def test_a_hive_reset_lists_its_devices_with_their_labels_and_the_finding_why():
    finding = Finding(
        "afid_30",
        "reset_device",
        at=1.7e9,
        severity="fatal",
        scope="peer_domain",
        escalation="replace_device",
        detail="reset every GPU of the hive",
        provenance="vendor_inferred",
        reference="AMD SAG (test)",
    )
    failed = record(
        1,
        state="failed",
        reasons=(Reason("afid_30", "failed"),),
        findings=(finding,),
        action="reset_device",
        scope="peer_domain",
        scope_uuids=("GPU-0", "GPU-1", "GPU-9"),
        escalation="replace_device",
    )
    reports = [
        DeviceReport("amd", i, str(i), f"GPU-{i}", "", r) for i, r in enumerate([record(0), failed])
    ]
    doc = health_api.document([SourceReport("amdsmi", "ok", "", reports)], 1.7e9, "node-a")
    jsonschema.validate(doc, SCHEMA, format_checker=jsonschema.FormatChecker())
    ok, dev = doc["devices"]
    assert (ok["action_scope"], ok["action_scope_devices"], ok["escalation"]) == ("device", [], "")
    assert dev["action_scope"] == "peer_domain" and dev["escalation"] == "replace_device"
    # GPU-9 is no device this source lists: no label to give it.
    assert dev["action_scope_devices"] == [
        {"uuid": "GPU-0", "device": "0"},
        {"uuid": "GPU-1", "device": "1"},
        {"uuid": "GPU-9", "device": None},
    ]
    (reason,) = dev["reasons"]
    assert {k: reason[k] for k in ("scope", "escalation", "detail", "provenance", "reference")} == {
        "scope": "peer_domain",
        "escalation": "replace_device",
        "detail": "reset every GPU of the hive",
        "provenance": "vendor_inferred",
        "reference": "AMD SAG (test)",
    }


def test_a_reason_without_a_finding_has_no_scope_and_the_schema_refuses_devices_without_action():
    degraded = record(0, state="degraded", reasons=(Reason("link_down", "degraded"),))
    doc = health_api.document(
        [SourceReport("nvml", "ok", "", [DeviceReport("nvidia", 0, "0", "GPU-0", "", degraded)])],
        1.7e9,
        "node-a",
    )
    jsonschema.validate(doc, SCHEMA, format_checker=jsonschema.FormatChecker())
    (reason,) = doc["devices"][0]["reasons"]
    assert (reason["scope"], reason["provenance"], reason["escalation"]) == (None, None, "")
    doc["devices"][0]["action_scope_devices"] = [{"uuid": "GPU-0", "device": "0"}]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, SCHEMA)  # a device asking no action reaches no device
