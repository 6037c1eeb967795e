"""Nagios-style health checks: ``accel-exporter check NAME``.

Each check reads the exporter's metrics (from a running daemon's ``/metrics``,
or by polling the sources once in-process with ``--local``), judges them, and
prints one status line with perfdata; the exit status follows the Nagios
plugin convention (0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN), or Node Problem
Detector's (0 OK, 1 problem, 2 unknown) with ``--exit-codes npd``.
"""

# The command line shows this without importing the command's modules.
HELP = "run a Nagios-style health check (exit 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN)"
