"""``python -m exporter.workers``: the worker process entry point.

Going through this module (rather than running ``child`` as ``__main__``)
keeps one instance of ``exporter.workers.child``, so its ``protocol_out`` is
the same object wherever it is imported.
"""

from exporter.workers.child import main

raise SystemExit(main())
