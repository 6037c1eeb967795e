"""Readers of host files (sysfs, /proc) that run in the daemon, not in a worker."""
