"""``python -m exporter.workers``: the worker process entry point.

Going through this module (rather than running ``child`` as ``__main__``)
keeps one instance of ``exporter.workers.child``, so its ``protocol_out`` is
the same object wherever it is imported.
"""

from exporter import ssl_later

# Before structlog imports asyncio: the worker loads libssl only if its backend uses
# TLS (none does through asyncio), 4 MiB less of its RSS and ~8 ms less start.
ssl_later.import_without_ssl(("asyncio",))

from exporter.workers.child import main  # noqa: E402

raise SystemExit(main())
