"""What the fabric source remembers and derives: flaps, outages, missing NICs, GPU joins.

Pure logic over what :mod:`exporter.host.infiniband` and :mod:`exporter.host.pcie`
read; the source (:mod:`exporter.sources.fabric`) polls, this package keeps count.
"""
