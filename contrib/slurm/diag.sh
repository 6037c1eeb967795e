#!/bin/sh
# Slurm prolog or epilog: run a DCGM diagnostic on this job's GPUs and leave its JSON
# where accel-exporter reads it (sources.diag.path, docs/diagnostics.md). The daemon
# then fails the GPUs the run failed (their verdict, action and taint follow), for as
# long as the health window (health.event_window) counts the run.
#
#   Prolog=/etc/slurm/accel-exporter-diag.sh   (or Epilog=; both may run it)
#
# Environment: ACCEL_EXPORTER_DIAG_DIR (default /var/lib/accel-exporter/diag),
# ACCEL_EXPORTER_DIAG_LEVEL (dcgmi diag -r: 1 quick ... 4; default 1),
# ACCEL_EXPORTER_DIAG_TIMEOUT (seconds, default 600), ACCEL_EXPORTER_DIAG_KEEP_MINUTES
# (this script's older results are removed; default 2880, two days).
# It always exits 0: whether a failed diagnostic drains the node is the exporter's
# verdict and your scheduler's policy, not a side effect of a prolog's exit status.
dir="${ACCEL_EXPORTER_DIAG_DIR:-/var/lib/accel-exporter/diag}"
level="${ACCEL_EXPORTER_DIAG_LEVEL:-1}"
limit="${ACCEL_EXPORTER_DIAG_TIMEOUT:-600}"
keep="${ACCEL_EXPORTER_DIAG_KEEP_MINUTES:-2880}"
dcgmi="${ACCEL_EXPORTER_DCGMI:-dcgmi}"
job="${SLURM_JOB_ID:-0}"
# prolog_slurmd / epilog_slurmd, as Slurm names the context; "diag" when run by hand.
phase="${SLURM_SCRIPT_CONTEXT:-diag}"

case "$job" in *[!0-9]*) job=0 ;; esac
case "$phase" in *[!a-z_]*|'') phase=diag ;; esac
case "$level" in 1|2|3|4) ;; *) level=1 ;; esac
case "$limit" in ''|*[!0-9]*) limit=600 ;; esac
case "$keep" in ''|*[!0-9]*) keep=2880 ;; esac

# The job's GPUs as DCGM ids ("0,1"); none (or UUIDs): every GPU of the node.
gpus="${SLURM_JOB_GPUS:-}"
case "$gpus" in *[!0-9,]*) gpus="" ;; esac

if ! mkdir -p "$dir" 2>/dev/null; then
  echo "accel-exporter diag: cannot create $dir" >&2
  exit 0
fi
if ! command -v "$dcgmi" >/dev/null 2>&1; then
  echo "accel-exporter diag: $dcgmi not found, nothing run" >&2
  exit 0
fi

tmp="$dir/.$phase-job$job.json.tmp.$$"
out="$dir/$phase-job$job-$(date +%s).json"
run() {
  if command -v timeout >/dev/null 2>&1; then
    timeout "$limit" "$@"
  else
    "$@"
  fi
}
# dcgmi exits non-zero when a test fails (its JSON is written all the same): kept.
if [ -n "$gpus" ]; then
  run "$dcgmi" diag -r "$level" -i "$gpus" -j > "$tmp" 2>/dev/null
else
  run "$dcgmi" diag -r "$level" -j > "$tmp" 2>/dev/null
fi
# Renamed only once written whole: the exporter never reads a half-written result.
if [ -s "$tmp" ] && mv -f "$tmp" "$out"; then
  :
else
  rm -f "$tmp"
  echo "accel-exporter diag: $dcgmi diag wrote nothing" >&2
fi
find "$dir" -maxdepth 1 -name "*-job*-*.json" -type f -mmin "+$keep" -exec rm -f {} + 2>/dev/null
exit 0
