"""What the Kubernetes API's clients share: service account paths, label key syntax, key help."""

from __future__ import annotations

SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
# A Kubernetes label key: an optional DNS-subdomain prefix and "/", then a name.
_LABEL_NAME = r"[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_LABEL_PREFIX = r"[a-z0-9](?:[-a-z0-9.]{0,251}[a-z0-9])?"
LABEL_KEY = rf"^(?:{_LABEL_PREFIX}/)?{_LABEL_NAME}$"
# The keys of every section that talks to the API server, described once.
API_ACCESS_HELP = {
    "api_server": "API server URL (empty: in-cluster)",
    "node_name": "this node's name (empty: $NODE_NAME)",
    "token_file": "service account token",
    "ca_file": "CA bundle of the API server",
}
