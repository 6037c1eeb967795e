"""accel-exporter: per-node accelerator and NCCL/RCCL job-health exporter."""

__version__ = "0.1.0"
