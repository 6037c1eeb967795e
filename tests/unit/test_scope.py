"""How far an action reaches: the members of each scope, and how an unknown one widens."""

from __future__ import annotations

from exporter import scope

A, B, C, D = ("0", "GPU-a"), ("1", "GPU-b"), ("2", "GPU-c"), ("3", "GPU-d")
# Two hives on one board; C and D are partitions of one physical GPU.
DOMAINS = {
    A: {"peer_domain": "hive-1", "baseboard": "ubb-0"},
    B: {"peer_domain": "hive-1", "baseboard": "ubb-0"},
    C: {"peer_domain": "hive-2", "baseboard": "ubb-0", "partition": "0000:c1:00.0"},
    D: {"peer_domain": "hive-2", "baseboard": "ubb-0", "partition": "0000:c1:00.0"},
}


def test_each_scope_names_its_devices() -> None:
    assert scope.members("device", A, DOMAINS) == ("GPU-a",)
    assert scope.members("partition", C, DOMAINS) == ("GPU-c", "GPU-d")
    assert scope.members("peer_domain", A, DOMAINS) == ("GPU-a", "GPU-b")
    assert scope.members("baseboard", A, DOMAINS) == ("GPU-a", "GPU-b", "GPU-c", "GPU-d")
    assert scope.members("node", B, {A: {}, B: {}}) == ("GPU-a", "GPU-b")


def test_an_unpartitioned_device_is_its_own_physical_device() -> None:
    assert scope.members("partition", A, DOMAINS) == ("GPU-a",)


def test_a_scope_not_named_widens_never_narrows() -> None:
    # No hive named: the baseboard; no baseboard either: the node.
    board_only = {A: {"baseboard": "b"}, B: {"baseboard": "b"}, C: {}}
    assert scope.members("peer_domain", A, board_only) == ("GPU-a", "GPU-b")
    assert scope.members("peer_domain", C, board_only) == ("GPU-a", "GPU-b", "GPU-c")
    assert scope.members("baseboard", C, board_only) == ("GPU-a", "GPU-b", "GPU-c")
    # A device the caller holds no domains of still reaches itself.
    assert scope.members("peer_domain", D, {}) == ("GPU-d",)
    # An unknown scope word is the node.
    assert scope.members("rack", A, {A: {}, B: {}}) == ("GPU-a", "GPU-b")


def test_widest() -> None:
    assert scope.widest([]) == "device"
    assert scope.widest(["device", "baseboard", "peer_domain"]) == "baseboard"
    assert scope.widest(["device", "rack"]) == "rack"
