"""The pod-resources client against a fake kubelet speaking the real v1 proto over a unix socket."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import grpc
import pytest

from exporter.enrich.errors import AttributionError
from exporter.enrich.pod_resources import Assignment, list_assignments, resource_filter
from tests.fakes.kubelet import FakeContainer, FakeKubelet, FakePod
from tests.helpers.privileges import NOBODY, run_as

WANTED = resource_filter(["nvidia.com/gpu", "amd.com/gpu"], [r"^nvidia\.com/mig-.*$"])
MiB = 1024 * 1024


@pytest.fixture
def kubelet(tmp_path):
    with FakeKubelet(str(tmp_path / "kubelet.sock")) as fake:
        yield fake


def call(path, timeout=5.0, limit=64 * MiB):
    return list_assignments(str(path), timeout, limit, WANTED)


def test_lists_wanted_resources(kubelet):
    kubelet.pods = [
        FakePod(
            "ml",
            "train-0",
            [
                FakeContainer(
                    "trainer",
                    {"nvidia.com/gpu": ["GPU-a", "GPU-b"], "example.com/nic": ["eth9"]},
                ),
                FakeContainer("sidecar"),
            ],
        ),
        FakePod("ml", "mig-user", [FakeContainer("main", {"nvidia.com/mig-1g.10gb": ["MIG-x"]})]),
        FakePod("rocm", "amd", [FakeContainer("main", {"amd.com/gpu": ["0000:c1:00.0"]})]),
    ]
    assert call(kubelet.socket_path) == [
        Assignment("ml", "train-0", "trainer", "nvidia.com/gpu", "GPU-a"),
        Assignment("ml", "train-0", "trainer", "nvidia.com/gpu", "GPU-b"),
        Assignment("ml", "mig-user", "main", "nvidia.com/mig-1g.10gb", "MIG-x"),
        Assignment("rocm", "amd", "main", "amd.com/gpu", "0000:c1:00.0"),
    ]
    assert kubelet.calls == 1


def reason_of(fn) -> str:
    with pytest.raises(AttributionError) as info:
        fn()
    return info.value.reason


def test_missing_socket(tmp_path):
    assert reason_of(lambda: call(tmp_path / "absent.sock")) == "socket_missing"


def test_stale_socket_file(tmp_path):
    path = tmp_path / "stale.sock"
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(path))
    sock.close()  # the file stays, nobody listens
    assert reason_of(lambda: call(path)) == "connect_failed"


def test_slow_kubelet_times_out(kubelet):
    kubelet.delay = 3.0
    assert reason_of(lambda: call(kubelet.socket_path, timeout=0.3)) == "timeout"


@pytest.mark.parametrize(
    ("code", "reason"),
    [
        (grpc.StatusCode.UNIMPLEMENTED, "unsupported_api"),
        (grpc.StatusCode.INTERNAL, "grpc_error"),
        (grpc.StatusCode.PERMISSION_DENIED, "permission_denied"),
    ],
)
def test_grpc_failures(kubelet, code, reason):
    kubelet.fail = code
    assert reason_of(lambda: call(kubelet.socket_path)) == reason


def test_large_replies(kubelet):
    # Busy nodes exceed gRPC's default 4 MiB (dcgm-exporter#509); 20 MiB must pass.
    kubelet.pods = [FakePod("ml", "p", [FakeContainer("c", {"nvidia.com/gpu": ["GPU-a"]})])]
    kubelet.padding_pods = 85_000
    size = kubelet.reply().ByteSize()
    assert 20 * MiB < size < 30 * MiB
    assert call(kubelet.socket_path, timeout=30) == [
        Assignment("ml", "p", "c", "nvidia.com/gpu", "GPU-a")
    ]
    assert reason_of(lambda: call(kubelet.socket_path, timeout=30, limit=16 * MiB)) == (
        "message_too_large"
    )


def connect_as_nobody(path: str) -> str:
    """The client's failure reason when an unprivileged user runs it."""

    def connect() -> str:
        try:
            list_assignments(path, 2.0, 64 * MiB, WANTED)
        except AttributionError as exc:
            return exc.reason
        return "ok"

    return str(run_as(NOBODY, connect))


@pytest.mark.serial  # forks (run_as): never beside the parallel runner's threads
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to drop to another user")
def test_permission_denied_on_the_socket():
    with tempfile.TemporaryDirectory(prefix="accel-kubelet-") as name:
        os.chmod(name, 0o755)
        path = str(Path(name) / "kubelet.sock")
        server = socket.socket(socket.AF_UNIX)
        server.bind(path)
        server.listen(1)
        os.chmod(path, 0o600)  # the kubelet's socket is root-only
        try:
            assert connect_as_nobody(path) == "permission_denied"
        finally:
            server.close()


CHILD = """
import json, sys
from exporter.enrich.pod_resources import list_assignments, resource_filter
status = dict(line.split(":\\t", 1) for line in open("/proc/self/status").read().splitlines()
              if ":\\t" in line)
found = list_assignments(sys.argv[1], 5.0, 64 << 20, resource_filter(["nvidia.com/gpu"], []))
print(json.dumps({"uid": status["Uid"].split()[0], "cap_eff": status["CapEff"].strip(),
                  "cap_bnd": status["CapBnd"].strip(), "no_new_privs": status["NoNewPrivs"].strip(),
                  "pods": [a.pod for a in found]}))
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to start a root-owned socket")
@pytest.mark.skipif(shutil.which("setpriv") is None, reason="needs util-linux setpriv")
def test_uid_0_without_any_capability_reads_a_root_only_socket():
    # What the chart's attribution mode runs as: UID 0, every capability dropped (bounding
    # set empty, so none can come back), no new privileges. Connecting needs write
    # permission on the socket; root owns it, so owner permission is enough and no
    # capability (CAP_DAC_OVERRIDE) is needed.
    with tempfile.TemporaryDirectory(prefix="accel-kubelet-") as name:
        path = str(Path(name) / "kubelet.sock")
        with FakeKubelet(path) as fake:
            os.chmod(path, 0o600)
            fake.pods = [FakePod("ml", "train-0", [FakeContainer("c", {"nvidia.com/gpu": ["G"]})])]
            command = [
                "setpriv",
                "--inh-caps=-all",
                "--ambient-caps=-all",
                "--bounding-set=-all",
                "--no-new-privs",
                "--",
                sys.executable,
                "-c",
                CHILD,
                path,
            ]
            env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
            out = subprocess.run(command, capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout)
    assert seen["uid"] == "0"
    assert int(seen["cap_eff"], 16) == 0 and int(seen["cap_bnd"], 16) == 0
    assert seen["no_new_privs"] == "1"
    assert seen["pods"] == ["train-0"]
