"""Subcommands other than ``run``: each module has one ``main``-like entry point."""
