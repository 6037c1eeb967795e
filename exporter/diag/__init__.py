"""Diagnostic verdicts run outside the exporter (dcgmi diag, AGFHC, RVS), read from files.

Pure parsing: bytes in, a :class:`~exporter.diag.model.Run` out, or a typed refusal
(:class:`~exporter.diag.model.DiagError`) that says why. The watched directory, the
device matching and the evidence they post live in :mod:`exporter.sources.diag`.
"""
