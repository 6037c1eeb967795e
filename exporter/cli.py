"""Command line: ``accel-exporter [flags] [run|once|probe|config ...]``.

Every config key is also a flag (``--web.listen-address``,
``--sources.host.interval``), generated from the schema, so the YAML file,
``ACCEL_EXPORTER_*`` variables and flags always agree on names.
Exit status 2 means the configuration (or the command line) is wrong, except
for ``check``, which keeps the Nagios convention (3, UNKNOWN) for those too.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from collections.abc import Callable, Sequence
from typing import Any

from exporter import __version__, log
from exporter.config import leaves, load_config
from exporter.config.loader import describe_type, format_default
from exporter.errors import ConfigError

EXIT_CONFIG = 2

SourceBuilder = Callable[[Any], Sequence[Any]]
OVERRIDE_PREFIX = "override:"

# Extra subcommands contributed by other modules: name -> (help, add_arguments, run).
# run(args, config_loader) -> exit status; the loader raises ConfigError, which the
# command may handle itself (else it exits 2). Kept as data so adding one touches no
# parser code. A command's parser (or a nested one) may set the default USAGE_PARSER to
# itself: unrecognised arguments are then reported through its own error().
USAGE_PARSER = "usage_parser"
SubcommandRun = Callable[[argparse.Namespace, Callable[[], Any]], int]
EXTRA_COMMANDS: dict[str, tuple[str, Callable[[argparse.ArgumentParser], None], SubcommandRun]] = {}


def _builtin_extras() -> None:
    """The subcommands that live in their own packages: health checks, run recording."""
    from exporter.checks.command import COMMAND as check
    from exporter.record.command import COMMAND as record

    EXTRA_COMMANDS.setdefault("check", check)
    EXTRA_COMMANDS.setdefault("record", record)


def _config_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config.file",
        dest="config_file",
        metavar="FILE",
        default=argparse.SUPPRESS,
        help="YAML config file (optional; defaults are built in)",
    )
    group = parser.add_argument_group(
        "configuration overrides",
        "every config key as a flag; also settable as ACCEL_EXPORTER_<SECTION>__<KEY>",
    )
    for leaf in leaves():
        group.add_argument(
            leaf.flag,
            dest=OVERRIDE_PREFIX + leaf.dotted,
            metavar=describe_type(leaf.type).split(" ")[0].upper().strip("'"),
            default=argparse.SUPPRESS,
            help=f"(default {format_default(leaf.default, leaf.type)})",
        )


def build_parser() -> argparse.ArgumentParser:
    """The argument parser, subcommands included."""
    _builtin_extras()
    common = argparse.ArgumentParser(add_help=False)
    _config_flags(common)
    parser = argparse.ArgumentParser(
        prog="accel-exporter",
        # Abbreviations would make a subcommand's --out ambiguous with --outputs.*.
        allow_abbrev=False,
        description="Accelerator and NCCL/RCCL job-health exporter (Prometheus and OTLP).",
        parents=[common],
    )
    parser.add_argument("--version", action="version", version=f"accel-exporter {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.add_parser("run", parents=[common], help="run the daemon (default)")
    once = sub.add_parser(
        "once", parents=[common], help="poll every enabled source once and print the result"
    )
    once.add_argument("--format", choices=("prom", "json"), default="prom")
    sub.add_parser(
        "probe", parents=[common], help="show whether each source can run on this machine"
    )
    config = sub.add_parser("config", help="check or show configuration")
    config_sub = config.add_subparsers(dest="config_command", metavar="ACTION", required=True)
    check = config_sub.add_parser("check", help="validate a config file; exit 2 if invalid")
    check.add_argument("file")
    config_sub.add_parser(
        "show", parents=[common], help="print the effective configuration (secrets redacted)"
    )
    for name, (help_text, add_arguments, _) in EXTRA_COMMANDS.items():
        extra = sub.add_parser(name, parents=[common], help=help_text)
        extra.set_defaults(**{USAGE_PARSER: extra})
        add_arguments(extra)
    return parser


def _parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """Parse; unrecognised arguments go to the error() of the (sub)command that got them."""
    args, extra = parser.parse_known_args(argv)
    if extra:
        owner = getattr(args, USAGE_PARSER, None) or parser
        owner.error(f"unrecognized arguments: {' '.join(extra)}")
    return args


def overrides_from(args: argparse.Namespace) -> dict[str, str]:
    """Dotted config key -> text, for every override flag given."""
    return {
        key[len(OVERRIDE_PREFIX) :]: value
        for key, value in vars(args).items()
        if key.startswith(OVERRIDE_PREFIX)
    }


def _config_errors(problems: Sequence[str]) -> int:
    for problem in problems:
        print(f"accel-exporter: config error: {problem}", file=sys.stderr)
    return EXIT_CONFIG


def _show(config: Any) -> int:
    """Print the effective config as YAML, durations spelled as written, secrets redacted."""
    import yaml

    from exporter.config.loader import is_duration, is_secret

    tree: dict[str, Any] = {}
    for leaf in leaves():
        node: Any = config
        for part in leaf.path:
            node = getattr(node, part, None) if node is not None else None
        if is_secret(leaf.type) and node:
            node = {k: "[redacted]" for k in node} if isinstance(node, dict) else "[redacted]"
        elif is_duration(leaf.type) and isinstance(node, float):
            node = format_default(node, leaf.type)
        branch = tree
        for part in leaf.path[:-1]:
            branch = branch.setdefault(part, {})
        branch[leaf.path[-1]] = node
    print(yaml.safe_dump(tree, sort_keys=False), end="")
    return 0


def main(argv: Sequence[str] | None = None, source_builder: SourceBuilder | None = None) -> int:
    """Entry point of the ``accel-exporter`` console script.

    ``source_builder`` replaces the registry's sources (tests add their own).
    """
    parser = build_parser()
    args = _parse(parser, argv)
    command = args.command or "run"
    if command == "run":
        # Until the daemon's own handler is installed (once it is fully started), a
        # SIGHUP (e.g. "systemctl reload" right after start) must not kill it.
        signal.signal(signal.SIGHUP, signal.SIG_IGN)

    if command == "config" and args.config_command == "check":
        try:
            load_config(args.file, env={})
        except ConfigError as exc:
            return _config_errors(exc.problems)
        print(f"{args.file}: ok")
        return 0

    path = getattr(args, "config_file", None)
    overrides = overrides_from(args)

    def load() -> Any:
        config = load_config(path, os.environ, overrides)
        log.configure(config.log.level, config.log.format)
        # Worker processes inherit the environment: they log at the daemon's level.
        os.environ["ACCEL_EXPORTER_WORKER_LOG_LEVEL"] = config.log.level
        return config

    if command in EXTRA_COMMANDS:
        # Dispatched before the config is read: a command loads it only if it needs it
        # (a check against --url must not fail on a config it never uses). Until then,
        # log lines go to stderr, never into a check's status line on stdout.
        log.configure("warning", "auto")
        try:
            return EXTRA_COMMANDS[command][2](args, load)
        except ConfigError as exc:
            return _config_errors(exc.problems)

    try:
        config = load()
    except ConfigError as exc:
        return _config_errors(exc.problems)

    if command == "config":
        return _show(config)
    if command == "once":
        from exporter.commands import once

        return once.run(config, args.format)
    if command == "probe":
        from exporter.commands import probe

        return probe.run(config)
    return _run(config, path, overrides, source_builder)


def _run(
    config: Any,
    path: str | None,
    overrides: dict[str, str],
    source_builder: SourceBuilder | None,
) -> int:
    from exporter.app import App, StartupError
    from exporter.sources.registry import build_sources

    async def go() -> int:
        app = App(
            config,
            config_path=path,
            overrides=overrides,
            source_builder=source_builder or build_sources,
        )
        return await app.run()

    try:
        return asyncio.run(go())
    except StartupError as exc:
        print(f"accel-exporter: {exc}", file=sys.stderr)
        return exc.status
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
