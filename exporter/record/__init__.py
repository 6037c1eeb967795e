"""``accel-exporter record --out DIR -- CMD ...``: run a command and record the node meanwhile.

The command runs untouched (own stdio, no tracing; SIGTERM and SIGHUP sent to
``record`` are passed on to it). Devices and host are sampled in the background;
``run.jsonl`` gets the start, samples, phases, events and exit; ``summary.json``
the per-device and host aggregates. ``record`` exits with the command's status.
"""

# The command line shows this without importing the command's modules.
HELP = "run a command, sample devices and host meanwhile, write a run log and a summary"
