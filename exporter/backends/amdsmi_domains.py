"""The domain an AMD GPU belongs to: its XGMI hive (exporter.scope).

Read at the slow poll (``amdsmi_get_xgmi_info``), as an ``accel_device_domain_info``
row (the daemon keeps it as identity: :mod:`exporter.sources.device_domains`).

- ``peer_domain``: the XGMI hive, ``xgmi_hive_id`` (0: the GPU is in no hive, and
  names none). AMD: a reset inside a hive "can have effects beyond the selected
  device"; every partition of a GPU reports its GPU's hive.
- ``baseboard``: amdsmi names none. On MI300X-class platforms one UBB carries the
  node's 8 OAMs (docs/health.md, "Scope"), which is what the widening to the node
  gives; naming the board after the hive would be an inference that a node with a
  split hive would get wrong, so none is named.
"""

from __future__ import annotations

from exporter.backends.amdsmi_fields import DeviceReader
from exporter.family_names import ACCEL_DEVICE_DOMAIN_INFO

FAMILY = ACCEL_DEVICE_DOMAIN_INFO


def hive(info: object) -> str:
    """The ``peer_domain`` of an ``amdsmi_get_xgmi_info`` answer; "" for none."""
    if not isinstance(info, dict):
        return ""
    hive_id = info.get("xgmi_hive_id")
    if type(hive_id) is not int or hive_id <= 0:
        return ""
    return f"xgmi-hive:{hive_id:#x}"


def read_domains(r: DeviceReader) -> None:
    """The GPU's hive row, when it is in one."""
    domain = hive(r.call("xgmi_info", r.api.amdsmi_get_xgmi_info))
    if domain:
        r.add(FAMILY, 1, "peer_domain", domain)
