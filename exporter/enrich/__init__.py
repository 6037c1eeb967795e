"""Workload attribution: which pod, container or Slurm job uses each device and process.

Pure parsers (cgroup paths, environments, prolog files, device IDs) and the
blocking readers (kubelet pod-resources gRPC, /proc) live here; the source that
runs them on a timer is :mod:`exporter.sources.workload`.
"""
