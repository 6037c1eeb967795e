"""Command line: ``accel-exporter [flags] [run|once|probe|config ...]``.

Every config key is also a flag (``--web.listen-address``,
``--sources.host.interval``), generated from the schema, so the YAML file,
``ACCEL_EXPORTER_*`` variables and flags always agree on names.
Exit status 2 means the configuration (or the command line) is wrong, except
for ``check``, which keeps the Nagios convention (3, UNKNOWN) for those too.
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
import textwrap
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from exporter import __version__

# The config schema, structlog and asyncio are imported where a command needs them:
# ``check`` against a daemon is run every interval on every node (Node Problem
# Detector, Slurm) and must not pay for what only the daemon uses (bench/check_latency.py).

EXIT_CONFIG = 2

SourceBuilder = Callable[[Any], Sequence[Any]]

# Extra subcommands contributed by other modules: name -> (help, add_arguments, run).
# run(args, config_loader) -> exit status; the loader raises ConfigError, which the
# command may handle itself (else it exits 2). Kept as data so adding one touches no
# parser code. A command's parser (or a nested one) may set the default USAGE_PARSER to
# itself: unrecognised arguments are then reported through its own error().
USAGE_PARSER = "usage_parser"
SubcommandRun = Callable[[argparse.Namespace, Callable[[], Any]], int]
EXTRA_COMMANDS: dict[str, tuple[str, Callable[[argparse.ArgumentParser], None], SubcommandRun]] = {}


def _imported_when_used(
    package: str,
) -> tuple[str, Callable[[argparse.ArgumentParser], None], SubcommandRun]:
    """The command of ``package`` (its ``HELP``; ``COMMAND`` in its ``command`` module).

    The command module and what it imports (the checks' HTTP client and judges,
    the recorder) are loaded only when that command is parsed or run: the daemon
    and the other commands never pay for them.
    """

    def command() -> tuple[str, Callable[[argparse.ArgumentParser], None], SubcommandRun]:
        loaded: tuple[str, Callable[[argparse.ArgumentParser], None], SubcommandRun]
        loaded = importlib.import_module(package + ".command").COMMAND
        return loaded

    def add_arguments(parser: argparse.ArgumentParser) -> None:
        def first_parse(
            args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
        ) -> tuple[argparse.Namespace, list[str]]:
            del parser.parse_known_args  # the class's own from now on
            command()[1](parser)
            return parser.parse_known_args(args, namespace)

        parser.parse_known_args = first_parse  # type: ignore[method-assign,assignment]

    def run(args: argparse.Namespace, load: Callable[[], Any]) -> int:
        return command()[2](args, load)

    help_text: str = importlib.import_module(package).HELP
    return help_text, add_arguments, run


# The check command as registered by default (a caller may register its own "check").
CHECK = _imported_when_used("exporter.checks")


def _builtin_extras() -> None:
    """The subcommands that live in their own packages: checks, run recording, health memory."""
    EXTRA_COMMANDS.setdefault("check", CHECK)
    EXTRA_COMMANDS.setdefault("record", _imported_when_used("exporter.record"))
    EXTRA_COMMANDS.setdefault("health", _imported_when_used("exporter.health_state"))


def _short_help(parser: argparse.ArgumentParser) -> str:
    """Commands first, then the common flags and the config sections (well under 60 lines)."""
    from exporter.commands.flags import DERIVED, sections

    commands = [
        (choice.dest, choice.help or "")
        for action in parser._actions
        if isinstance(action, argparse._SubParsersAction)
        for choice in action._choices_actions
    ]
    lines = [
        f"usage: {USAGE}",
        "",
        parser.description or "",
        "",
        "commands (accel-exporter COMMAND --help for a command's own flags):",
        *(f"  {name:<9} {text}" for name, text in commands),
        "",
        "flags:",
        "  --config.file FILE   YAML config file (optional; defaults are built in)",
        "  --demo               simulated GPUs instead of the node's, marked so (docs/demo.md)",
        "  --version            print the version and exit",
        "  -h, --help           this help",
        "  --help-all           every config flag, by section, with its description",
        "",
        "config sections: each key is a YAML key, a flag --SECTION.KEY-NAME and an",
        "environment variable ACCEL_EXPORTER_SECTION__KEY_NAME (docs/configuration.md):",
        *(f"  {name:<24} {text}" for name, text in sections()),
        "",
        *textwrap.wrap(DERIVED, 88),
    ]
    return "\n".join(lines) + "\n"


class _ShortHelp(argparse.Action):
    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        sys.stdout.write(_short_help(parser))
        parser.exit()


class _FullHelp(argparse.Action):
    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        from exporter.commands.flags import DERIVED

        # The parser that parsed has its config flags undescribed (see build_parser):
        # the described one is built only here, where its text is shown.
        build_parser(described=True).print_help()
        sys.stdout.write("\n" + "\n".join(textwrap.wrap(DERIVED, 88)) + "\n")
        parser.exit()


USAGE = "accel-exporter [COMMAND] [FLAGS]"
EPILOG = "Every config key is also a flag here: accel-exporter --help-all lists them."


def build_parser(described: bool = False) -> argparse.ArgumentParser:
    """The argument parser, subcommands included.

    ``described``: the top-level config flags in their sections, each with its
    description and default, as ``--help-all`` shows them. Describing the ~200 flags
    costs more CPU than the rest of the parser (each key's declaring class resolved
    from the schema's type hints: about 0.18 s of a daemon's 0.25 s of parsing), so
    the parser that parses leaves them undescribed; parsing and its errors are the same.
    """
    from exporter.commands.flags import add_config_flags

    _builtin_extras()
    hidden = argparse.ArgumentParser(add_help=False)
    add_config_flags(hidden, visible=False)
    parser = argparse.ArgumentParser(
        prog="accel-exporter",
        usage=USAGE,
        # Abbreviations would make a subcommand's --out ambiguous with --outputs.*.
        allow_abbrev=False,
        add_help=False,
        description="Accelerator and NCCL/RCCL job-health exporter (Prometheus and OTLP).",
    )
    parser.add_argument("-h", "--help", action=_ShortHelp, nargs=0, help="this help")
    parser.add_argument(
        "--help-all", action=_FullHelp, nargs=0, help="every flag, by section, described"
    )
    parser.add_argument("--version", action="version", version=f"accel-exporter {__version__}")
    add_config_flags(parser, visible=described)
    _demo_flag(parser)
    epilog = EPILOG
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", prog="accel-exporter")

    def command(name: str, help_text: str, **kw: Any) -> argparse.ArgumentParser:
        return sub.add_parser(
            name, parents=[hidden], help=help_text, description=help_text, epilog=epilog, **kw
        )

    _demo_flag(command("run", "run the daemon (default)"))
    once = command("once", "poll every enabled source once and print the result")
    once.add_argument(
        "--format",
        choices=("prom", "json"),
        default="prom",
        help="prom: the /metrics text; json: per source, readings with named labels",
    )
    command("probe", "show whether each source can run here; exit 1 if one errors")
    config = sub.add_parser("config", help="check or show configuration")
    config_sub = config.add_subparsers(dest="config_command", metavar="ACTION", required=True)
    check = config_sub.add_parser("check", help="validate a config file; exit 2 if invalid")
    check.add_argument("file", help="the YAML file, or - to read standard input")
    config_sub.add_parser(
        "show",
        parents=[hidden],
        help="print the effective configuration (secrets redacted)",
        epilog=epilog,
    )
    for name, (help_text, add_arguments, _) in EXTRA_COMMANDS.items():
        extra = command(name, help_text)
        extra.set_defaults(**{USAGE_PARSER: extra})
        add_arguments(extra)
    return parser


DEMO_HELP = (
    "serve simulated GPUs instead of the node's (no GPU, driver or compiler needed; "
    'every device series says so: vendor="demo", uuid DEMO-...; docs/demo.md)'
)


def _demo_flag(parser: argparse.ArgumentParser) -> None:
    # SUPPRESS: given before or after "run", the flag is not reset by the other parser.
    parser.add_argument("--demo", action="store_true", default=argparse.SUPPRESS, help=DEMO_HELP)


def _chosen(parser: argparse.ArgumentParser, args: argparse.Namespace) -> set[str]:
    """Every flag of ``parser`` and of the (nested) subcommands ``args`` chose."""
    known = set(parser._option_string_actions)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            child = action.choices.get(getattr(args, action.dest, None) or "")
            if child is not None:
                known |= _chosen(child, args)
    return known


def _parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """Parse; unknown flags go to the error() of the (sub)command that got them.

    Each with a suggestion: a mistyped config flag (dotted) gets the key that the same
    typo in the file or a variable gets, any other the closest flag of its command.
    """
    from exporter.commands.flags import mistyped_config_flags, unknown_flag_problems

    argv, problems = mistyped_config_flags(argv, set(parser._option_string_actions))
    args, extra = parser.parse_known_args(argv)
    if extra:
        problems.append(unknown_flag_problems(extra, _chosen(parser, args)))
    if problems:
        owner = getattr(args, USAGE_PARSER, None) or parser
        owner.error("; ".join(problems))
    return args


def overrides_from(args: argparse.Namespace) -> dict[str, str]:
    """Dotted config key -> text, for every override flag given."""
    from exporter.commands.flags import OVERRIDE_PREFIX

    return {
        key[len(OVERRIDE_PREFIX) :]: value
        for key, value in vars(args).items()
        if key.startswith(OVERRIDE_PREFIX)
    }


def _config_errors(problems: Sequence[str]) -> int:
    for problem in problems:
        print(f"accel-exporter: config error: {problem}", file=sys.stderr)
    return EXIT_CONFIG


# The shell's status for a writer whose reader went away (128 + SIGPIPE).
EXIT_BROKEN_PIPE = 141


def main(argv: Sequence[str] | None = None, source_builder: SourceBuilder | None = None) -> int:
    """Entry point of the ``accel-exporter`` console script.

    ``source_builder`` replaces the registry's sources (tests add their own).
    """
    try:
        try:
            return _main(argv, source_builder)
        finally:
            early = sys.modules.get("exporter.workers.prestart")
            if early is not None:
                # Whatever ended the command (a config error, --demo misused), an early
                # worker no runner took ends with it (a runner's is its own).
                early.discard()
            # Inside the try: output still buffered fails here rather than at exit.
            sys.stdout.flush()
    except BrokenPipeError:
        # ``--help-all | head -1``: the reader has all it wanted. Python's own advice:
        # point stdout at /dev/null so that the interpreter's final flush cannot fail too.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_BROKEN_PIPE


class _NotQuick(Exception):
    """The quick check parser cannot take these arguments: the full parser will."""


def _refuse(message: str) -> NoReturn:
    raise _NotQuick(message)


def _quick_check(words: list[str]) -> int | None:
    """``check NAME ...`` against a daemon, parsed without the ~200 config flags.

    The check's exit status, or None where the full parser must decide: ``--local``
    (it reads the configuration), help, config flags, and every usage error, so that
    what is printed is exactly what the full parser prints. The parser built here is
    the full one's ``check`` branch (same programs, usage and arguments).
    """
    if "--local" in words or any(w in ("-h", "--help") or w.startswith("--local=") for w in words):
        return None
    from exporter.checks import HELP
    from exporter.checks.command import LOGGING_DEFERRED, add_arguments, run

    parser = argparse.ArgumentParser(
        prog="accel-exporter", usage=USAGE, allow_abbrev=False, add_help=False
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", prog="accel-exporter")
    check = sub.add_parser("check", help=HELP, description=HELP, epilog=EPILOG)
    check.set_defaults(**{USAGE_PARSER: check})
    add_arguments(check)
    # Every parser of the branch hands its errors back instead of printing them.
    parsers = [parser, check]
    for action in check._actions:
        if isinstance(action, argparse._SubParsersAction):
            parsers.extend(action.choices.values())
    for each in parsers:
        each.error = _refuse  # type: ignore[method-assign]
    try:
        args, extra = parser.parse_known_args(words)
    except _NotQuick:
        return None
    if extra or args.local:
        return None
    setattr(args, LOGGING_DEFERRED, True)
    status: int = run(args, _loader(None, {}, []))
    return status


def _loader(path: str | None, overrides: dict[str, str], notes: list[str]) -> Callable[[], Any]:
    """Load the configuration (file, environment, flags) and configure logging from it."""

    def load() -> Any:
        from exporter import log
        from exporter.config import load_config

        config = load_config(path, os.environ, overrides, notes)
        log.configure(config.log.level, config.log.format)
        for note in notes:
            log.get().warning("config key renamed", detail=note)
        return config

    return load


# Words that make the command line something other than the daemon (or its help).
_NOT_THE_DAEMON = frozenset(
    {"once", "probe", "config", "check", "record", "health", "-h", "--help", "--help-all"}
)


def _runs_the_daemon(words: Sequence[str]) -> bool:
    """Whether ``words`` (before parsing) run the daemon, so an early worker is worth it.

    Only a guess before the parser has spoken: a wrong "yes" costs one worker process
    ended once the command is known (exporter.workers.prestart.discard), a wrong "no"
    only the early start.
    """
    return not any(w in _NOT_THE_DAEMON or w.startswith("--version") for w in words)


def _before_imports(words: Sequence[str]) -> None:
    """What must happen before the daemon's heavy imports: the early worker, ssl hidden."""
    if _runs_the_daemon(words):
        from exporter.workers import prestart

        # First of all: the first device worker boots while the daemon imports itself.
        prestart.start()
    from exporter import ssl_later

    # Before anything imports asyncio or http.server: libssl and libcrypto (4 MiB of
    # the daemon's RSS) load only if TLS is used (exporter/ssl_later.py).
    ssl_later.import_without_ssl()


def _main(argv: Sequence[str] | None, source_builder: SourceBuilder | None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    if words[:1] == ["check"] and EXTRA_COMMANDS.get("check", CHECK) is CHECK:
        status = _quick_check(words)
        if status is not None:
            return status
    _before_imports(words)
    from exporter import log
    from exporter.commands.flags import canonical_argv
    from exporter.config import load_config
    from exporter.errors import ConfigError

    notes: list[str] = []
    # The parser is not kept: this frame lives as long as the daemon, and the parser's
    # ~200 flags held 0.15 MiB of its idle memory (bench/idle.py).
    args = _parse(build_parser(), canonical_argv(words, notes))
    command = args.command or "run"
    if command != "run":
        from exporter.workers import prestart

        prestart.discard()  # the guess was wrong (see _runs_the_daemon)
    demo = bool(getattr(args, "demo", False))
    if demo and command != "run":
        message = f"--demo runs the daemon (accel-exporter --demo), not {command!r}"
        print(f"accel-exporter: {message}", file=sys.stderr)
        return EXIT_CONFIG
    if command == "run":
        # Until the daemon's own handler is installed (once it is fully started), a
        # SIGHUP (e.g. "systemctl reload" right after start) must not kill it.
        signal.signal(signal.SIGHUP, signal.SIG_IGN)

    if command == "config" and args.config_command == "check":
        try:
            load_config(args.file, env={}, notes=notes)
        except ConfigError as exc:
            return _config_errors(exc.problems)
        for note in notes:
            print(f"accel-exporter: config warning: {note}", file=sys.stderr)
        print(f"{args.file}: ok")
        return 0

    path = getattr(args, "config_file", None)
    overrides = overrides_from(args)
    load = _loader(path, overrides, notes)

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
        from exporter.commands import config_show

        return config_show.run(config)
    if command == "once":
        from exporter.commands import once

        return once.run(config, args.format)
    if command == "probe":
        from exporter.commands import probe

        return probe.run(config)
    return _run(config, path, overrides, source_builder, demo)


def _run(
    config: Any,
    path: str | None,
    overrides: dict[str, str],
    source_builder: SourceBuilder | None,
    demo: bool = False,
) -> int:
    import asyncio

    from exporter import allocator, log
    from exporter.app import App, StartupError
    from exporter.sources.registry import build_sources

    allocator.configure()
    builder: Any = source_builder or build_sources
    if demo:
        from exporter.sources.demo import with_demo

        builder = with_demo(builder)
        log.get().warning("demo mode: the devices are simulated", source="demo")

    async def go() -> int:
        app = App(
            config,
            config_path=path,
            overrides=overrides,
            source_builder=builder,
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
