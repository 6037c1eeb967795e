"""The health judge's memory on disk, and ``accel-exporter health clear DEVICE``.

:mod:`.memory` is the file format of ``<health.state_dir>/health-<source>.json``
(what each device source's judge remembers, by device uuid), :mod:`.requests` the
clear requests a running daemon takes from ``<health.state_dir>/health-clear/``,
and :mod:`.command` the command line. docs/health.md ("Memory across restarts").
"""

# The command line shows this without importing the command's modules.
HELP = "clear what the health judge remembers of a device, after a repair (health clear DEVICE)"
