"""The ``--config.file FILE`` flag every command that reads the daemon's config takes."""

from __future__ import annotations

import argparse


def add_config_file_flag(parser: argparse._ActionsContainer, help: str) -> None:
    """``--config.file FILE`` into ``config_file`` (a parser or a group); absent unless given.

    ``default=SUPPRESS`` lets ``exporter.cli`` tell "not given" (the built-in defaults
    and the environment) from a file named on the command line.
    """
    parser.add_argument(
        "--config.file",
        dest="config_file",
        metavar="FILE",
        default=argparse.SUPPRESS,
        help=help,
    )
