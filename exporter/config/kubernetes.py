"""The ``kubernetes`` section (the API server and credentials), and what its users share.

One section for every client of the Kubernetes API server: pod labels
(``workload.k8s.pod_labels``), DRA ResourceSlices (``workload.k8s.dra``) and the
health writer (``outputs.kubernetes``). Their own sections keep only what is
theirs (intervals, timeouts, reply limits); the four keys they once carried each
are named here, and a file that still sets one is refused with the new name
(:data:`MOVED`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from exporter.config.fields import setting

SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
# A Kubernetes label key: an optional DNS-subdomain prefix and "/", then a name.
_LABEL_NAME = r"[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_LABEL_PREFIX = r"[a-z0-9](?:[-a-z0-9.]{0,251}[a-z0-9])?"
LABEL_KEY = rf"^(?:{_LABEL_PREFIX}/)?{_LABEL_NAME}$"
# A Node's name is a DNS subdomain (RFC 1123): it goes into request paths unquoted.
NODE_NAME = re.compile(r"^[a-z0-9](?:[-a-z0-9.]{0,251}[a-z0-9])?$")
# The keys that moved here from workload.k8s.pod_labels and outputs.kubernetes: the
# RENAMED of those sections, so the loader names the new key in its error.
MOVED = {
    key: f"kubernetes.{key}: one section for pod labels, DRA and the health writer"
    for key in ("api_server", "node_name", "token_file", "ca_file")
}


def url_problem(url: str) -> str:
    """Why ``url`` cannot be the API server's ("" when it can): https, a host, nothing else."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (a port that is not a number raises here)
    except ValueError as exc:
        return f"is not a URL: {exc}"
    if parts.scheme != "https":
        return "must be an https:// URL (the bearer token never travels in clear)"
    if not parts.hostname:
        return "names no host"
    if parts.username is not None or parts.query or parts.fragment:
        return "must be scheme, host, port and an optional path only"
    return ""


@dataclass(frozen=True)
class KubernetesConfig:
    """The Kubernetes API server and how this daemon proves who it is (in-cluster defaults).

    Read by every client of the API server: pod labels, DRA ResourceSlices and
    the health writer. Empty ``api_server`` is the in-cluster service
    (``KUBERNETES_SERVICE_HOST``/``PORT``); empty ``node_name`` is ``$NODE_NAME``
    (the downward API's ``spec.nodeName``). The token is read again for every
    request (the kubelet rotates it); only ``ca_file`` is trusted.
    """

    api_server: str = setting("", "API server URL, https:// (empty: in-cluster)")
    node_name: str = setting("", "this node's name (empty: $NODE_NAME)")
    token_file: str = setting(
        f"{SERVICE_ACCOUNT_DIR}/token", "service account token (read for every request)"
    )
    ca_file: str = setting(
        f"{SERVICE_ACCOUNT_DIR}/ca.crt", "CA bundle of the API server (the only one trusted)"
    )

    def check(self) -> list[tuple[str, str]]:
        """An https URL; a node name that is one; the credential paths set."""
        out = []
        if self.api_server:
            problem = url_problem(self.api_server)
            if problem:
                out.append(("api_server", problem))
        if self.node_name and not NODE_NAME.match(self.node_name):
            out.append(("node_name", "is not a Kubernetes node name (a lower-case DNS subdomain)"))
        unset = [key for key in ("token_file", "ca_file") if not getattr(self, key)]
        return out + [(key, "needs a path") for key in unset]
