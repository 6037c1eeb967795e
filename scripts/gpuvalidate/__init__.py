"""gpu-validate: check accel-exporter against a real NVIDIA GPU, its driver and NCCL.

Run as ``scripts/gpu-validate OUTDIR`` from the repository root (see
docs/gpu-validation.md). The kit is split by concern: :mod:`.smi` reads nvidia-smi,
:mod:`.expo` reads the daemon's /metrics, :mod:`.compare` holds the field table and
the tolerances, :mod:`.report` the verdict and the files, :mod:`.phases` runs each
phase under its own deadline, and the ``phase_*`` modules do the work. Everything
here imports only the standard library at module level (the exporter and
prometheus-client are imported where needed), so the kit can start on a bare
machine before the project is installed.
"""
