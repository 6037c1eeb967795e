#!/bin/sh
# Slurm prolog for accel-exporter's file mode (workload.slurm.mode: files).
# Records which GPUs this job holds in $ACCEL_EXPORTER_SLURM_DIR/<job_id>.json.
# It always exits 0: a failing prolog would drain the node over bookkeeping.
dir="${ACCEL_EXPORTER_SLURM_DIR:-/run/accel-exporter/slurm}"
job="${SLURM_JOB_ID:-}"

case "$job" in
  ''|*[!0-9]*) echo "accel-exporter prolog: no numeric SLURM_JOB_ID, nothing recorded" >&2; exit 0 ;;
esac

# JSON string body: escape backslashes and quotes, drop control characters.
json() {
  printf '%s' "$1" | tr -d '\000-\037' | sed -e 's/\\/\\\\/g' -e 's/"/\\"/g'
}

gpus="${SLURM_JOB_GPUS:-${CUDA_VISIBLE_DEVICES:-${GPU_DEVICE_ORDINAL:-}}}"
mkdir -p "$dir" 2>/dev/null
tmp="$dir/.$job.json.tmp.$$"
if printf '{"job_id":"%s","user":"%s","partition":"%s","gpus":"%s"}\n' \
     "$job" "$(json "${SLURM_JOB_USER:-}")" "$(json "${SLURM_JOB_PARTITION:-}")" \
     "$(json "$gpus")" > "$tmp" 2>/dev/null && mv -f "$tmp" "$dir/$job.json"; then
  :
else
  rm -f "$tmp"
  echo "accel-exporter prolog: cannot write $dir/$job.json" >&2
fi
exit 0
