"""What a device backend shares with the rest of the exporter, and nothing else.

The layer between ``exporter.backends`` (vendor code, run inside a worker) and its
users: ``exporter.workers`` (the worker process and the daemon's side of it) and the
daemon's sources that read a worker's reply. Here are the
:class:`~exporter.backend_api.backend.Backend` protocol the worker drives and its
errors, the breadcrumb page a backend writes before it touches a device
(:mod:`~exporter.backend_api.crumb`), and the wire contracts both sides check a reply
against: the rows (:mod:`~exporter.backend_api.wire`), the devices' identities
(:mod:`~exporter.backend_api.inventory`), the CPER ledger
(:mod:`~exporter.backend_api.cper`) and the TPU reply's tables
(:mod:`~exporter.backend_api.tpu`). Backends and their users import this; nothing but
backends/ and workers/ imports a backend (tests/unit/test_import_graph.py).
"""
