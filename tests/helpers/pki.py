"""A throwaway certificate authority for TLS tests (openssl, like an operator would)."""

from __future__ import annotations

import subprocess
from pathlib import Path


def openssl(*args: str, cwd: Path) -> None:
    """Run ``openssl ARGS`` in ``cwd``; fail loudly."""
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_pki(directory: Path, *names: tuple[str, str]) -> Path:
    """``ca.pem``/``ca.key`` and, per (file name, CN), ``<name>.pem``/``<name>.key``.

    Every certificate is valid for IP 127.0.0.1 (loopback servers) and two days.
    """
    common = ("-newkey", "rsa:2048", "-nodes")
    openssl(
        "req", "-x509", *common, "-days", "2", "-subj", "/CN=test-ca",
        "-keyout", "ca.key", "-out", "ca.pem", cwd=directory,
    )  # fmt: skip
    (directory / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    for name, cn in names:
        openssl(
            "req", *common, "-subj", f"/CN={cn}", "-keyout", f"{name}.key", "-out", f"{name}.csr",
            cwd=directory,
        )  # fmt: skip
        openssl(
            "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-days", "2", "-extfile", "san.ext", "-out", f"{name}.pem",
            cwd=directory,
        )  # fmt: skip
    return directory
