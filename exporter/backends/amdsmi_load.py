"""Importing the amdsmi package, and where it looks for libamd_smi.so when it cannot.

The amdsmi package loads the library itself while it is imported; what it does
when that fails (a ``KeyError``, an ``OSError``, an ``AttributeError`` for a
function the library lacks) is turned here into the backend's unavailable
reasons, naming the places it looked (:func:`amdsmi_search`).
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

from exporter.backends.base import BackendUnavailable
from exporter.host import libsearch


def load_amdsmi() -> Any:
    """Import amdsmi; BackendUnavailable when the package or its library is missing.

    The wrapper looks for ``libamd_smi.so`` while it is imported and, when it
    finds none, prints the error and then fails with ``KeyError``.
    """
    try:
        return importlib.import_module("amdsmi")
    except ImportError as exc:
        raise BackendUnavailable(
            "binding_missing",
            "the amdsmi package is not installed "
            f"(accel-exporter's 'amd' extra, docs/deploy.md): {exc}",
        ) from None
    except KeyError:
        # The wrapper's way of saying no library loaded (it printed why): say where it looked.
        found = amdsmi_search()
        detail = f"amdsmi could not load {found.path}" if found.path else found.detail
        raise BackendUnavailable("library_not_found", detail) from None
    except OSError as exc:
        raise BackendUnavailable(
            "library_not_found",
            f"amdsmi cannot load libamd_smi.so (install amd-smi-lib, or set ROCM_PATH): {exc}",
        ) from None
    except AttributeError as exc:
        # The wrapper binds every C function at import: a missing one means the
        # pip package is newer than the installed library.
        raise BackendUnavailable(
            "library_mismatch",
            "libamd_smi.so lacks a function the amdsmi package binds; install the amdsmi "
            f"package of the ROCm release on this node: {exc}",
        ) from None


# Where the package looks (moved to exporter.host.libsearch: the daemon runs the same
# search before it starts a worker).
AMDSMI = libsearch.AMDSMI
amdsmi_search = libsearch.amdsmi_search
