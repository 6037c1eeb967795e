"""What a device backend and the worker process that hosts it share, and nothing else.

The layer between ``exporter.backends`` (vendor code, run inside a worker) and
``exporter.workers`` (the worker process and the daemon's side of it): the
:class:`~exporter.backend_api.backend.Backend` protocol the worker drives and its
errors, and the breadcrumb page a backend writes before it touches a device
(:mod:`exporter.backend_api.crumb`). Both import this; neither imports the other.
"""
