"""Where a vendor library is: the configured path, the vendor's documented paths, the loader's.

Some bindings open their library by one absolute path (pyzes: Debian's Level
Zero loader; pyhlml: ``/usr/lib/habanalabs/libhlml.so``), so on another
distribution they find nothing although the library is installed. Unless a path
is configured, :func:`find` tries the paths each vendor's packages install to on
the distributions we support, then the places the dynamic loader itself would
search for the library's SONAME (``LD_LIBRARY_PATH``, ``/etc/ld.so.cache``, the
default directories), without loading anything: the daemon decides whether a
worker is worth starting, and only a worker loads vendor code. Whatever it finds
or not, it says where it looked, so ``probe`` can tell.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
from collections.abc import Mapping
from dataclasses import dataclass

# Each vendor's library is part of its entry in exporter.vendors (where it is registered).
from exporter.vendors import HLML as HLML
from exporter.vendors import LEVELZERO as LEVELZERO
from exporter.vendors import Library as Library

LD_SO_CACHE = "/etc/ld.so.cache"
# glibc's trusted directories on x86_64 (searched after the cache), 64-bit first.
DEFAULT_DIRS = ("/lib64", "/usr/lib64", "/lib", "/usr/lib")


@dataclass(frozen=True)
class Found:
    """The library's path ("" when none) and every place looked at, in order."""

    path: str
    looked: tuple[str, ...]
    library: Library

    @property
    def detail(self) -> str:
        """Why it is missing, with where it was looked for (the unavailable reason's text)."""
        places = ", ".join(self.looked)
        return (
            f"{self.library.soname} not found (looked in {places}, and the dynamic loader's"
            f" cache); install "
            f"{self.library.install}, or set {self.library.key}"
        )


def cached_paths(soname: str, cache: str = LD_SO_CACHE) -> list[str]:
    """The paths ``/etc/ld.so.cache`` maps ``soname`` to (its string table holds them)."""
    try:
        with open(cache, "rb") as fh:
            data = fh.read()
    except OSError:
        return []
    out = []
    tail = ("/" + soname).encode() + b"\0"
    start = data.find(tail)
    while start >= 0:
        begin = data.rfind(b"\0", 0, start) + 1
        path = data[begin : start + len(tail) - 1].decode("utf-8", "replace")
        if path.startswith("/") and path not in out:
            out.append(path)
        start = data.find(tail, start + 1)
    return out


def loader_candidates(
    soname: str, env: Mapping[str, str] | None = None, cache: str = LD_SO_CACHE
) -> list[str]:
    """Where the dynamic loader would look for ``soname``, in its order."""
    env = os.environ if env is None else env
    dirs = [d for d in env.get("LD_LIBRARY_PATH", "").split(":") if d]
    out = [os.path.join(d, soname) for d in dirs]
    out += cached_paths(soname, cache)
    out += [os.path.join(d, soname) for d in DEFAULT_DIRS]
    return out


def find(
    library: Library,
    configured: str = "",
    env: Mapping[str, str] | None = None,
    cache: str = LD_SO_CACHE,
) -> Found:
    """The configured path if set (and only it), else the first documented or loader path."""
    if configured:
        return Found(configured if os.path.exists(configured) else "", (configured,), library)
    looked: list[str] = []
    for path in [*library.documented, *loader_candidates(library.soname, env, cache)]:
        if path in looked:
            continue
        looked.append(path)
        if os.path.exists(path):
            return Found(path, tuple(looked), library)
    return Found("", tuple(looked), library)


AMDSMI = Library("libamd_smi.so", (), "ROCM_PATH", "amd-smi-lib")


def amdsmi_search(env: Mapping[str, str] | None = None) -> Found:
    """Where the amdsmi package looks for libamd_smi.so, in its order (amdsmi_wrapper.py).

    ROCM_HOME (else ROCM_PATH)/lib, the dynamic loader's search, the package's own
    directory, ROCM_PATH (else /opt/rocm)/lib. The package does the loading (in the
    worker); this names the places, without importing the package.
    """
    env = os.environ if env is None else env
    rocm = env.get("ROCM_HOME") or env.get("ROCM_PATH")
    spec = importlib.util.find_spec("amdsmi")
    package = os.path.dirname(spec.origin) if spec is not None and spec.origin else ""
    places = [os.path.join(rocm, "lib", AMDSMI.soname)] if rocm else []
    places += loader_candidates(AMDSMI.soname, env)
    places += [os.path.join(package, AMDSMI.soname)] if package else []
    places.append(os.path.join(env.get("ROCM_PATH", "/opt/rocm"), "lib", AMDSMI.soname))
    library = dataclasses.replace(AMDSMI, documented=tuple(places))
    return find(library, env={}, cache="")


def amdsmi_absent(env: Mapping[str, str] | None = None) -> tuple[str, str] | None:
    """(reason, detail) when an amdsmi worker could not load, as its backend would say.

    Checked by the daemon before it starts the worker: on the many nodes with the
    ``amd`` extra installed (the container image has every extra) and no AMD GPU, a
    worker's interpreter would start only to find no library, competing with the
    other workers' start. None: the package and a library are there; the worker decides.
    """
    if importlib.util.find_spec("amdsmi") is None:
        return (
            "binding_missing",
            "the amdsmi package is not installed (accel-exporter's 'amd' extra, docs/deploy.md)",
        )
    found = amdsmi_search(env)
    return None if found.path else ("library_not_found", found.detail)
