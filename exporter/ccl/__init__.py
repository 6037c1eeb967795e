"""NCCL/RCCL job health (RAS service) and collective performance (Inspector plugin).

Pure parsers and models live here, next to the asyncio RAS client; the sources in
``exporter.sources.ccl_ras`` and ``exporter.sources.ccl_inspector`` turn them into
readings.
"""
