"""ssl loads only once TLS is used, and asyncio's TLS then works (exporter/ssl_later.py).

Each case runs in a fresh interpreter: the test process itself has ssl loaded.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.helpers.pki import make_pki

REPO = Path(__file__).resolve().parents[2]


def _run(code: str, *args: str) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    result: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def test_asyncio_and_the_http_server_import_without_ssl() -> None:
    result = _run(
        """
        import json, sys
        from exporter import ssl_later
        first = ssl_later.import_without_ssl()
        import asyncio, http.server
        again = ssl_later.import_without_ssl()
        print(json.dumps({"first": first, "again": again, "ssl": "ssl" in sys.modules,
                          "libssl": "libssl" in open("/proc/self/maps").read()}))
        """
    )
    assert result == {"first": True, "again": False, "ssl": False, "libssl": False}


def test_an_asyncio_tls_exchange_once_ssl_is_imported_later(tmp_path: Path) -> None:
    make_pki(tmp_path, ("server", "127.0.0.1"))
    result = _run(
        """
        import json, sys
        from exporter import ssl_later
        assert ssl_later.import_without_ssl()
        import asyncio
        assert asyncio.sslproto.ssl is None
        import ssl  # what web.tls or an HTTPS output does, at start or on a reload
        d = sys.argv[1]
        server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        server_ctx.load_cert_chain(f"{d}/server.pem", f"{d}/server.key")
        client_ctx = ssl.create_default_context(cafile=f"{d}/ca.pem")

        async def main():
            async def echo(reader, writer):
                writer.write(await reader.readline())
                await writer.drain()
                writer.close()
            server = await asyncio.start_server(echo, "127.0.0.1", 0, ssl=server_ctx)
            port = server.sockets[0].getsockname()[1]
            reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client_ctx)
            writer.write(b"hello\\n")
            line = await reader.readline()
            writer.close()
            server.close()
            return line.decode()

        line = asyncio.run(asyncio.wait_for(main(), 30))
        print(json.dumps({"line": line, "sslproto": asyncio.sslproto.ssl is ssl}))
        """,
        str(tmp_path),
    )
    assert result == {"line": "hello\n", "sslproto": True}


def test_nothing_is_hidden_once_ssl_is_loaded() -> None:
    result = _run(
        """
        import json, ssl, sys
        from exporter import ssl_later
        done = ssl_later.import_without_ssl()
        import http.client
        print(json.dumps({"done": done, "https": hasattr(http.client, "HTTPSConnection")}))
        """
    )
    assert result == {"done": False, "https": True}


def test_https_clients_of_the_standard_library_work_after_ssl_was_hidden() -> None:
    # http.client imported with ssl hidden has no HTTPSConnection, and a urllib.request
    # imported after it no HTTPSHandler: prometheus_client's import (the escaping
    # scrapes' encoder, the checks' parser) failed on that. urllib.request loads ssl
    # first; an ssl loaded later completes http.client.
    result = _run(
        """
        import json, sys
        from exporter import ssl_later
        ssl_later.import_without_ssl()
        import http.client
        before = hasattr(http.client, "HTTPSConnection")
        import prometheus_client.exposition
        from urllib.request import HTTPSHandler
        conn = http.client.HTTPSConnection("127.0.0.1", 1)
        print(json.dumps({"before": before, "ssl": "ssl" in sys.modules,
                          "https": isinstance(conn, http.client.HTTPConnection),
                          "all": "HTTPSConnection" in http.client.__all__,
                          "handler": HTTPSHandler.__module__}))
        """
    )
    assert result == {
        "before": False,
        "ssl": True,
        "https": True,
        "all": True,
        "handler": "urllib.request",
    }


def test_http_client_is_completed_when_ssl_loads_for_another_reason() -> None:
    result = _run(
        """
        import json, sys
        from exporter import ssl_later
        ssl_later.import_without_ssl()
        import http.client, ssl
        ctx = ssl.create_default_context()
        conn = http.client.HTTPSConnection("127.0.0.1", 1, context=ctx)
        print(json.dumps({"port": conn.port, "ssl": http.client.ssl is ssl}))
        """
    )
    assert result == {"port": 1, "ssl": True}


def test_urllib_request_imports_when_ssl_did_not_load_through_the_finder() -> None:
    # The finder looks urllib.request up through sys.meta_path after importing ssl; it
    # is still there when ssl was found by a finder ahead of it (or is blocked by a None
    # entry), and that lookup asked it again, and again: RecursionError.
    result = _run(
        """
        import importlib.machinery, json, sys
        from exporter import ssl_later
        assert ssl_later.import_without_ssl()

        class Ahead:  # finds ssl itself, as an import hook may
            def find_spec(self, name, path=None, target=None):
                if name == "ssl":
                    return importlib.machinery.PathFinder.find_spec(name, path, target)
                return None

        sys.meta_path.insert(0, Ahead())
        import ssl
        import urllib.request
        found = [type(f).__name__ for f in sys.meta_path].count("_Rebind")
        print(json.dumps({"finder": found, "handler": hasattr(urllib.request, "HTTPSHandler")}))
        """
    )
    assert result == {"finder": 1, "handler": True}


def test_urllib_request_imports_while_ssl_is_blocked() -> None:
    result = _run(
        """
        import json, sys
        from exporter import ssl_later
        assert ssl_later.import_without_ssl()
        sys.modules["ssl"] = None  # as on a Python without ssl
        import urllib.request
        print(json.dumps({"handler": hasattr(urllib.request, "HTTPSHandler"),
                          "ssl": sys.modules["ssl"] is None}))
        """
    )
    assert result == {"handler": False, "ssl": True}
