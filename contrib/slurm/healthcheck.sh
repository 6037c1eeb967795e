#!/bin/sh
# Slurm HealthCheckProgram for accel-exporter (docs/checks.md, "Slurm").
#
# Runs `accel-exporter check health` against the node's exporter. On CRITICAL (a failed
# accelerator) it drains the node with the check's status line as the reason, prefixed
# "accel-exporter:". When the check is OK again it resumes the node, but only if the
# drain is its own (the reason still starts with that prefix): a node an admin or another
# health check drained stays drained, and its reason is never overwritten.
# WARNING leaves the node alone (set ACCEL_EXPORTER_DRAIN_ON=warning to drain on it too);
# UNKNOWN (the exporter unreachable) changes nothing: no drain over a monitoring outage.
#
# slurm.conf:  HealthCheckProgram=/usr/local/sbin/accel-exporter-healthcheck
#              HealthCheckInterval=60
# Environment (all optional):
#   ACCEL_EXPORTER_URL       exporter URL (default http://127.0.0.1:9842)
#   ACCEL_EXPORTER           the command (default accel-exporter)
#   ACCEL_EXPORTER_CHECK     the check and its flags (default "health")
#   ACCEL_EXPORTER_DRAIN_ON  critical (default) or warning
#   SCONTROL                 the scontrol command (default scontrol)
# Exit status: 0 (Slurm ignores it; the drain is the verdict).

url="${ACCEL_EXPORTER_URL:-http://127.0.0.1:9842}"
exporter="${ACCEL_EXPORTER:-accel-exporter}"
check="${ACCEL_EXPORTER_CHECK:-health}"
drain_on="${ACCEL_EXPORTER_DRAIN_ON:-critical}"
scontrol="${SCONTROL:-scontrol}"
node="${SLURMD_NODENAME:-$(hostname -s)}"
prefix="accel-exporter:"

# shellcheck disable=SC2086 # $exporter and $check are word lists on purpose
out=$($exporter check $check --url "$url" 2>&1)
status=$?
# The status line without its performance data, on one line, short enough for a reason.
line=$(printf '%s\n' "$out" | head -n 1 | sed -e 's/ | .*$//' | tr -d '\000-\037' | cut -c 1-200)

# Our node's state and drain reason, from `scontrol show node` (Reason=... [user@time]).
shown=$($scontrol show node "$node" 2>/dev/null)
state=$(printf '%s\n' "$shown" | tr ' ' '\n' | sed -n 's/^State=//p' | head -n 1)
reason=$(printf '%s\n' "$shown" | sed -n 's/^ *Reason=//p' | head -n 1)
case "$state" in
  *DRAIN*) drained=1 ;;
  *) drained=0 ;;
esac
case "$reason" in
  "$prefix"*) ours=1 ;;
  *) ours=0 ;;
esac

drain=0
case "$status" in
  2) drain=1 ;;
  1) [ "$drain_on" = warning ] && drain=1 ;;
esac

if [ "$drain" = 1 ]; then
  if [ "$drained" = 1 ] && [ "$ours" = 0 ]; then
    logger -t accel-exporter-healthcheck "node drained by someone else; not touching it: $line" 2>/dev/null
  else
    $scontrol update nodename="$node" state=drain reason="$prefix $line"
  fi
elif [ "$status" = 0 ] || { [ "$status" = 1 ] && [ "$drain_on" != warning ]; }; then
  if [ "$drained" = 1 ] && [ "$ours" = 1 ]; then
    $scontrol update nodename="$node" state=resume
  fi
fi
exit 0
