"""The ``outputs.nvsentinel`` section: the health verdict as NVSentinel HealthEvents.

Off by default. NVSentinel's platform connector listens on a unix socket on the host
(``/var/run/nvsentinel/nvsentinel.sock``: its chart mounts the host directory
``/var/run/nvsentinel``); the output sends it one HealthEvent per device whose verdict
changed (docs/nvsentinel.md). In shadow mode, the default, every event asks
NVSentinel to store it only (``processingStrategy: STORE_ONLY``): nothing is
quarantined, drained or remediated until an operator turns shadow off.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from exporter.catalog.vocabulary import RECOMMENDED_ACTIONS
from exporter.config.fields import Duration, positive, timing_problems

DEFAULT_SOCKET = "/var/run/nvsentinel/nvsentinel.sock"
# The RecommendedAction names of NVSentinel's health_event.proto (exporter/outputs/
# _proto/health_event.proto; a unit test keeps the two equal): what an ``actions``
# override may name. Kept here, not read from the gencode: loading a config must not
# need grpc and protobuf.
NVSENTINEL_ACTIONS = (
    "NONE",
    "COMPONENT_RESET",
    "CONTACT_SUPPORT",
    "RUN_FIELDDIAG",
    "RESTART_VM",
    "RESTART_BM",
    "REPLACE_VM",
    "RUN_DCGMEUD",
    "RESTART_APP",
    "UNKNOWN",
)


@dataclass(frozen=True)
class NvsentinelOutputConfig:
    """The verdict as HealthEvents on NVSentinel's socket (docs/nvsentinel.md); off by default."""

    HELP: ClassVar[dict[str, str]] = {
        "enabled": "send the health verdict to NVSentinel's platform connector",
        "socket": "the platform connector's unix socket",
        "shadow": "ask NVSentinel to store the events only (STORE_ONLY), not act on them",
        "agent": "the events' agent (what NVSentinel's rules match on)",
        "node_name": "the events' nodeName (empty: kubernetes.node_name, $NODE_NAME, host name)",
        "interval": "time between two comparisons of the verdict with what was sent",
        "timeout": "deadline of one call to the platform connector",
        "resend": "send the events of bad devices again this often (0: never)",
        "backoff_min": "wait after the first failed call",
        "backoff_max": "longest wait between two calls while they fail",
        "actions": "NVSentinel RecommendedAction by our action, over the default mapping",
    }

    enabled: bool = False
    socket: str = DEFAULT_SOCKET
    # STORE_ONLY until the operator has watched what the events would do.
    shadow: bool = True
    agent: str = "accel-exporter"
    node_name: str = ""
    interval: Duration = 5.0
    # NVSentinel's own monitors give a call 5 s (gpu-health-monitor).
    timeout: Duration = 5.0
    # NVSentinel keeps what it was told: its own monitors send changes only.
    resend: Duration = 0.0
    backoff_min: Duration = 1.0
    backoff_max: Duration = 60.0
    actions: dict[str, str] = field(default_factory=dict)

    def check(self) -> list[tuple[str, str]]:
        """Positive timings, min <= max backoff, overrides naming our words and theirs."""
        out = timing_problems(self.interval, self.timeout)
        out += positive(self, "backoff_min")
        if self.backoff_max < self.backoff_min:
            out.append(("backoff_max", "must be at least backoff_min"))
        if self.resend < 0:
            out.append(("resend", "must not be negative (0: never)"))
        if not self.socket:
            out.append(("socket", "needs a path"))
        if not self.agent:
            out.append(("agent", "must not be empty"))
        for ours, theirs in self.actions.items():
            if ours not in RECOMMENDED_ACTIONS:
                out.append(
                    (f"actions.{ours}", f"is not an action: {', '.join(RECOMMENDED_ACTIONS)}")
                )
            if theirs not in NVSENTINEL_ACTIONS:
                out.append(
                    (f"actions.{ours}", f"{theirs!r} is not one of {', '.join(NVSENTINEL_ACTIONS)}")
                )
        return out
