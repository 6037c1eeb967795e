"""The ``outputs.nvsentinel`` section: the health verdict as NVSentinel HealthEvents.

Off by default. NVSentinel's platform connector listens on a unix socket on the host
(``/var/run/nvsentinel/nvsentinel.sock``: its chart mounts the host directory
``/var/run/nvsentinel``); the output sends it one HealthEvent per device whose verdict
changed (docs/nvsentinel.md). In shadow mode, the default, every event asks
NVSentinel to store it only (``processingStrategy: STORE_ONLY``): nothing is
quarantined, drained or remediated until an operator turns shadow off.
"""

from __future__ import annotations

from dataclasses import dataclass

from exporter.catalog.vocabulary import RECOMMENDED_ACTIONS
from exporter.config.fields import Duration, positive, setting, timing_problems

DEFAULT_SOCKET = "/var/run/nvsentinel/nvsentinel.sock"
# The RecommendedAction names of NVSentinel's health_event.proto (exporter/third_party/
# nvsentinel_health_event/health_event.proto; a unit test keeps the two equal): what an ``actions``
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

    enabled: bool = setting(False, "send the health verdict to NVSentinel's platform connector")
    socket: str = setting(DEFAULT_SOCKET, "the platform connector's unix socket")
    # STORE_ONLY until the operator has watched what the events would do.
    shadow: bool = setting(
        True, "ask NVSentinel to store the events only (STORE_ONLY), not act on them"
    )
    agent: str = setting("accel-exporter", "the events' agent (what NVSentinel's rules match on)")
    node_name: str = setting(
        "", "the events' nodeName (empty: kubernetes.node_name, $NODE_NAME, host name)"
    )
    interval: Duration = setting(
        5.0, "time between two comparisons of the verdict with what was sent"
    )
    # NVSentinel's own monitors give a call 5 s (gpu-health-monitor).
    timeout: Duration = setting(5.0, "deadline of one call to the platform connector")
    # NVSentinel keeps what it was told: its own monitors send changes only.
    resend: Duration = setting(0.0, "send the events of bad devices again this often (0: never)")
    backoff_min: Duration = setting(1.0, "wait after the first failed call")
    backoff_max: Duration = setting(60.0, "longest wait between two calls while they fail")
    actions: dict[str, str] = setting(
        factory=dict, help="NVSentinel RecommendedAction by our action, over the default mapping"
    )

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
