#!/bin/sh
# Slurm epilog for accel-exporter's file mode: forget the job's GPUs.
# It always exits 0: a failing epilog would drain the node over bookkeeping.
dir="${ACCEL_EXPORTER_SLURM_DIR:-/run/accel-exporter/slurm}"
job="${SLURM_JOB_ID:-}"
case "$job" in
  ''|*[!0-9]*) exit 0 ;;
esac
rm -f "$dir/$job.json"
exit 0
