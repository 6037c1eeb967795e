"""Load ``ssl`` (libssl and libcrypto) only once something uses TLS, not at start.

``asyncio`` and ``http.client`` import ``ssl`` as they are imported, whether or not
anything will use TLS: it maps libssl and libcrypto, 4.3 MiB of a bare interpreter's
RSS (docs/performance.md), 12 % of an idle daemon's, on every node, for a web
listener and an HTTP client that by default never speak TLS. :func:`import_without_ssl`
imports those modules with ``ssl`` hidden, as on a Python built without it: both carry
on without (``asyncio`` looks its ``ssl`` global up when a TLS connection is made;
``http.client`` leaves out ``HTTPSConnection``, which the daemon never uses: its TLS
clients wrap their own sockets, ``exporter.kube_wire``, or bring their own,
urllib3 and gRPC). ``ssl`` itself is not blocked after that: the first ``import ssl``
anywhere (``web.tls`` applied at start or by a reload, an HTTPS output, the Kubernetes
client) loads it as usual and, through :class:`_Rebind`, hands it to the ``asyncio``
modules that found it missing, so TLS over asyncio works as if it had been there.

``http.client`` is completed the same way: its ``HTTPSConnection`` (defined at import
only when ``ssl`` imports) is defined once ``ssl`` loads, from the module's own source
(the ``else`` of its ``try: import ssl``), so nothing of the standard library is copied
here. And ``urllib.request``, which decides at import whether to define its HTTPS
handler (``prometheus_client`` imports that by name), loads ``ssl`` before it is
imported: a process that imports an HTTP client library pays for ssl, one that serves
plain HTTP does not.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from collections.abc import Sequence

# What is imported with ssl hidden: everything at start that would import it.
WITHOUT_SSL = ("asyncio", "http.server")
# Modules that set their ``ssl`` global to None when the import failed and read it when
# TLS is asked for (CPython 3.10-3.13): given the module once it loads.
REBIND = ("asyncio.base_events", "asyncio.selector_events", "asyncio.sslproto")
# Imported after ssl, so their import-time choices see it (see the module docstring).
SSL_FIRST = frozenset({"urllib.request"})


def import_without_ssl(modules: Sequence[str] = WITHOUT_SSL) -> bool:
    """Import ``modules`` with ``ssl`` hidden; False (and nothing done) if ssl is loaded.

    Call before anything imports ``asyncio`` (the daemon's start). Idempotent.
    """
    if "ssl" in sys.modules or any(isinstance(f, _Rebind) for f in sys.meta_path):
        return False
    # A None entry is the import system's "not importable": ``import ssl`` raises
    # ImportError, which these modules handle as a Python without ssl.
    sys.modules["ssl"] = None  # type: ignore[assignment]
    try:
        for name in modules:
            importlib.import_module(name)
    finally:
        del sys.modules["ssl"]
    sys.meta_path.insert(0, _Rebind())
    return True


def rebind(module: types.ModuleType) -> None:
    """Give the loaded ``ssl`` to the modules of :data:`REBIND` that have None.

    And what ``asyncio.sslproto`` defines at import only when ssl is there: the
    errors that mean "try the read again", without which a TLS stream stalls.
    """
    for name in REBIND:
        holder = sys.modules.get(name)
        if holder is not None and getattr(holder, "ssl", False) is None:
            holder.ssl = module  # type: ignore[attr-defined]
    sslproto = sys.modules.get("asyncio.sslproto")
    if sslproto is not None and not hasattr(sslproto, "SSLAgainErrors"):
        sslproto.SSLAgainErrors = (module.SSLWantReadError, module.SSLSyscallError)  # type: ignore[attr-defined]
    client = sys.modules.get("http.client")
    if client is not None and not hasattr(client, "HTTPSConnection"):
        _complete_http_client(client, module)


def _complete_http_client(client: types.ModuleType, ssl: types.ModuleType) -> None:
    """Run what ``http.client`` runs at import when ``import ssl`` succeeds, in its namespace.

    That is the ``else`` of its top-level ``try: import ssl`` (CPython 3.8-3.13:
    ``HTTPSConnection`` and its ``__all__`` entry), read from the module's own source.
    Without a source (a stripped install) it stays as imported: no HTTPSConnection.
    """
    origin = str(getattr(client.__spec__, "origin", None) or "")
    try:
        with open(origin, encoding="utf-8") as f:
            tree = ast.parse(f.read(), origin)
    except (OSError, SyntaxError, ValueError):
        return
    for node in tree.body:
        if (
            isinstance(node, ast.Try)
            and len(node.body) == 1
            and isinstance(node.body[0], ast.Import)
            and [a.name for a in node.body[0].names] == ["ssl"]
        ):
            client.ssl = ssl  # type: ignore[attr-defined]
            block = ast.Module(body=node.orelse, type_ignores=[])
            exec(compile(block, origin, "exec"), client.__dict__)
            return


class _Rebind(importlib.abc.MetaPathFinder):
    """Finds ``ssl`` the usual way, once, and rebinds it for asyncio as it loads."""

    def __init__(self) -> None:
        # The names of SSL_FIRST whose usual spec is being looked up through
        # sys.meta_path, which holds this finder still when ssl did not load through it
        # (a finder ahead of it found ssl, or ssl is blocked by a None entry): the
        # lookup asks it again, and it answers None there instead of recursing. The
        # import system looks a name up under that name's lock, so a set will do.
        self._finding: set[str] = set()

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None = None,
        target: types.ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        """The usual spec of ``ssl``, its loader wrapped; None for any other name.

        For a module of :data:`SSL_FIRST`: ssl is imported (through this finder) and
        rebound, then the module's usual spec is returned.
        """
        if fullname in SSL_FIRST:
            if fullname in self._finding:  # asked by the lookup below: the usual finders
                return None
            with contextlib.suppress(ImportError):  # a Python without ssl: as it is
                ssl = importlib.import_module("ssl")
                # Loaded through this finder, rebound already; found by another, not:
                # http.client completed first, so urllib.request defines HTTPSHandler.
                rebind(ssl)
            self._finding.add(fullname)
            try:
                return importlib.util.find_spec(fullname)
            finally:
                self._finding.discard(fullname)
        if fullname != "ssl":
            return None
        sys.meta_path.remove(self)  # one load; and find_spec below must not find us
        spec = importlib.util.find_spec("ssl")
        if spec is not None and spec.loader is not None:
            spec.loader = _RebindingLoader(spec.loader)
        return spec


class _RebindingLoader(importlib.abc.Loader):
    """The stdlib loader of ``ssl``; :func:`rebind` once the module is executed."""

    def __init__(self, loader: importlib.abc.Loader) -> None:
        self._loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        """The original loader's."""
        return self._loader.create_module(spec)

    def exec_module(self, module: types.ModuleType) -> None:
        """Execute ``ssl`` as usual, then rebind it."""
        self._loader.exec_module(module)
        module.__loader__ = self._loader  # tracebacks read its source through it
        rebind(module)
