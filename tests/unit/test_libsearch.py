"""Library discovery: the configured path, the vendors' documented paths, the loader's search."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from exporter.host import libsearch
from exporter.host.libsearch import HLML, LEVELZERO, find


def test_every_distribution_layout_the_vendors_document_is_tried():
    # Debian/Ubuntu's multiarch path, then RHEL/SUSE/Fedora's %{_libdir}.
    assert LEVELZERO.documented[:2] == (
        "/usr/lib/x86_64-linux-gnu/libze_loader.so.1",
        "/usr/lib64/libze_loader.so.1",
    )
    assert HLML.documented == ("/usr/lib/habanalabs/libhlml.so",)


def test_a_configured_path_is_the_only_place_looked(tmp_path):
    lib = tmp_path / "libze_loader.so.1"
    assert find(LEVELZERO, str(lib)).path == ""
    assert find(LEVELZERO, str(lib)).looked == (str(lib),)
    lib.write_bytes(b"")
    assert find(LEVELZERO, str(lib)).path == str(lib)


def test_a_documented_path_comes_before_the_loaders_search(tmp_path):
    rhel = tmp_path / "usr/lib64/libze_loader.so.1"
    rhel.parent.mkdir(parents=True)
    rhel.write_bytes(b"")
    library = dataclasses.replace(
        LEVELZERO, documented=(str(tmp_path / "debian/libze_loader.so.1"), str(rhel))
    )
    found = find(library, env={"LD_LIBRARY_PATH": str(tmp_path)}, cache="/nonexistent")
    assert found.path == str(rhel)
    assert found.looked == (str(tmp_path / "debian/libze_loader.so.1"), str(rhel))


def test_the_loaders_search_ld_library_path_then_its_cache(tmp_path):
    nowhere = dataclasses.replace(HLML, documented=(str(tmp_path / "habanalabs/libhlml.so"),))
    first, second = tmp_path / "a", tmp_path / "b"
    for d in (first, second):
        d.mkdir()
    (second / "libhlml.so").write_bytes(b"")
    env = {"LD_LIBRARY_PATH": f"{first}:{second}"}
    found = find(nowhere, env=env, cache="/nonexistent")
    assert found.path == str(second / "libhlml.so")
    assert found.looked[-2:] == (str(first / "libhlml.so"), str(second / "libhlml.so"))
    # ld.so.cache lists the path of each SONAME in its string table (as ldconfig -p shows).
    cached = tmp_path / "opt/habanalabs/lib/libhlml.so"
    cached.parent.mkdir(parents=True)
    cached.write_bytes(b"")
    cache = tmp_path / "ld.so.cache"
    cache.write_bytes(b"glibc-ld.so.cache1.1\0libhlml.so\0" + str(cached).encode() + b"\0x\0")
    assert libsearch.cached_paths("libhlml.so", str(cache)) == [str(cached)]
    assert find(nowhere, env={}, cache=str(cache)).path == str(cached)


def test_nowhere_says_where_it_looked(tmp_path):
    nowhere = dataclasses.replace(LEVELZERO, documented=(str(tmp_path / "x/libze_loader.so.1"),))
    found = find(nowhere, env={"LD_LIBRARY_PATH": str(tmp_path / "y")}, cache="/nonexistent")
    assert found.path == ""
    detail = found.detail
    assert detail.startswith(f"libze_loader.so.1 not found (looked in {tmp_path}/x/libze_loader")
    assert f"{tmp_path}/y/libze_loader.so.1" in detail and "/usr/lib64/libze_loader.so.1" in detail
    assert "and the dynamic loader's cache)" in detail
    assert detail.endswith("or set sources.levelzero.library_path")


def test_the_real_cache_is_read_where_there_is_one():
    if not Path("/etc/ld.so.cache").exists():
        pytest.skip("no /etc/ld.so.cache on this system")
    # libc is in every cache: a path ending in its SONAME.
    paths = libsearch.cached_paths("libc.so.6")
    assert paths and all(p.endswith("/libc.so.6") for p in paths), paths
