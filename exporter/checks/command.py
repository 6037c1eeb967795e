"""``accel-exporter check NAME [options]``: argument parsing and dispatch.

Data path: by default a check reads a running daemon's ``/metrics`` at
``--url`` (default ``http://localhost:9842``), and ``health`` its ``/v1/devices``
(the verdict records, beside ``/metrics``); ``--local`` polls the enabled
sources once in this process instead, with the daemon's configuration (file,
``ACCEL_EXPORTER_*`` variables), which is read for ``--local`` only.

Whatever goes wrong before a verdict (unknown or invalid arguments, an invalid
configuration, an unreadable CA file, an internal error) ends as one
``CHECK UNKNOWN - ...`` status line and exit 3 (2 with ``--exit-codes npd``):
a check must never exit 2 for a problem of its own, because 2 is CRITICAL and
drains the node in a Slurm prolog.
"""

from __future__ import annotations

import argparse
import sys
import time
import urllib.parse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

from exporter.checks import HELP, daemon, devices, jobs
from exporter.checks.nagios import Result, Status, exit_code, render
from exporter.checks.samples import (
    HttpOptions,
    SampleError,
    Samples,
    fetch,
    fetch_devices,
    poll_local,
)
from exporter.commands.config_file import add_config_file_flag
from exporter.durations import parse_duration
from exporter.suggest import closest, hint

DEFAULT_URL = "http://localhost:9842"


@dataclass(frozen=True)
class CheckSpec:
    """One check: its help, its own arguments, and how it judges samples.

    ``reads``: what it asks a daemon for, ``metrics`` (/metrics) or ``devices``
    (/v1/devices, the verdict records); ``--local`` gives both.
    """

    help: str
    arguments: Callable[[argparse.ArgumentParser], None]
    evaluate: Callable[[argparse.Namespace, Samples], Result]
    reads: str = "metrics"


def _duration(text: str) -> float:
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _codes(text: str) -> frozenset[int]:
    try:
        return frozenset(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of codes: {text!r}") from None


def _missing_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--missing-ok",
        action="store_true",
        help="report OK instead of UNKNOWN when the devices do not report this at all",
    )


def _vendor(text: str) -> str:
    """A vendor label, whatever its case: a typo must be UNKNOWN, never "0 of N found"."""
    word = text.strip().lower()
    if not word or word in devices.VENDORS:
        return word
    suggestion = closest(word, devices.VENDORS, devices.VENDOR_SYNONYMS)
    raise argparse.ArgumentTypeError(
        f"invalid vendor {text!r}{hint(suggestion)}; one of {', '.join(devices.VENDORS)}"
    )


def _url(text: str) -> str:
    """An http(s) URL with a host: anything else is a misuse, said before any request."""
    parts = urllib.parse.urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an http:// or https:// URL with a host (e.g. {DEFAULT_URL})"
        )
    return text


def _gpu_count_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--expected", type=int, required=True, help="GPUs this node must have")
    p.add_argument(
        "--vendor",
        type=_vendor,
        default="",
        help=f"count only this vendor ({', '.join(devices.VENDORS)})",
    )


# The temperature check's thresholds for the gpu sensor when none is given: below the
# slowdown temperature of NVIDIA's and AMD's data-center GPUs (about 87-90 C), where a
# GPU throttles. Other sensors (memory, hotspot, edge) run hotter or cooler by model:
# their thresholds must be given.
TEMPERATURE_DEFAULTS = {"gpu": (83.0, 88.0)}


def _temperature_args(p: argparse.ArgumentParser) -> None:
    warn, crit = TEMPERATURE_DEFAULTS["gpu"]
    p.add_argument(
        "--warn", type=float, default=None, help=f"WARNING above this, Celsius (gpu: {warn:g})"
    )
    p.add_argument(
        "--crit", type=float, default=None, help=f"CRITICAL above this, Celsius (gpu: {crit:g})"
    )
    p.add_argument("--sensor", default="gpu", help="sensor label (gpu, memory, edge, hotspot)")
    _missing_flag(p)


def _temperature_thresholds(args: argparse.Namespace) -> str:
    """Fill the temperature check's missing thresholds; why they cannot be ("" when they can)."""
    if args.check_name != "temperature":
        return ""
    defaults = TEMPERATURE_DEFAULTS.get(args.sensor)
    if defaults is None:
        if args.warn is None or args.crit is None:
            return f"give --warn and --crit for the {args.sensor} sensor (defaults: gpu only)"
        return ""
    # One threshold given: the other keeps the defaults' distance from it at least.
    gap = defaults[1] - defaults[0]
    if args.warn is None:
        args.warn = defaults[0] if args.crit is None else min(defaults[0], args.crit - gap)
    if args.crit is None:
        args.crit = max(defaults[1], args.warn + gap)
    return ""


def _ecc_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--counter", choices=("volatile", "aggregate"), default="volatile")
    p.add_argument(
        "--crit-uncorrected",
        type=float,
        default=0,
        help="CRITICAL above this many uncorrectable errors (default 0: any)",
    )
    p.add_argument(
        "--warn-corrected",
        type=float,
        default=None,
        help="WARNING above this many correctable errors (default: no limit)",
    )
    _missing_flag(p)


def _retired_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--warn", type=float, default=30, help="WARNING above this, default 30")
    p.add_argument("--crit", type=float, default=60, help="CRITICAL above this, default 60 (of 64)")
    _missing_flag(p)


def _xid_args(p: argparse.ArgumentParser) -> None:
    from exporter.catalog.nvidia import CRITICAL_XIDS

    p.add_argument("--window", type=_duration, default=3600.0, help="e.g. 10m, 1h (default 1h)")
    p.add_argument(
        "--critical-xids",
        type=_codes,
        default=CRITICAL_XIDS,
        help="XIDs that are CRITICAL (others WARN); default: "
        + ",".join(str(code) for code in sorted(CRITICAL_XIDS)),
    )
    p.add_argument("--ignore-xids", type=_codes, default=frozenset(), help="e.g. 13,31,43,45")


def _afid_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--window", type=_duration, default=3600.0, help="e.g. 10m, 1h (default 1h)")
    p.add_argument(
        "--critical-afids",
        type=_codes,
        default=frozenset(),
        help="AFIDs that are CRITICAL whatever their severity (fatal ones always are)",
    )
    p.add_argument("--ignore-afids", type=_codes, default=frozenset(), help="e.g. 12,13")


def _ccl_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--address", default="", help="only this RAS address (host:port)")


def _none(p: argparse.ArgumentParser) -> None:
    return None


CHECKS: dict[str, CheckSpec] = {
    "gpu-count": CheckSpec(
        "every expected GPU present and up",
        _gpu_count_args,
        lambda a, s: devices.gpu_count(s, a.expected, a.vendor),
    ),
    "temperature": CheckSpec(
        "hottest GPU against thresholds",
        _temperature_args,
        lambda a, s: devices.temperature(s, a.warn, a.crit, a.sensor, a.missing_ok),
    ),
    "ecc": CheckSpec(
        "uncorrectable ECC errors",
        _ecc_args,
        lambda a, s: devices.ecc(s, a.counter, a.crit_uncorrected, a.warn_corrected, a.missing_ok),
    ),
    "row-remap": CheckSpec(
        "failed or pending row remappings (Ampere and later)",
        _missing_flag,
        lambda a, s: devices.row_remap(s, a.missing_ok),
    ),
    "retired-pages": CheckSpec(
        "retired pages and pending retirements (before Ampere)",
        _retired_args,
        lambda a, s: devices.retired_pages(s, a.warn, a.crit, a.missing_ok),
    ),
    "xid": CheckSpec(
        "XID errors within a time window",
        _xid_args,
        lambda a, s: devices.xid(
            s, a.window, time.time(), a.critical_xids, a.ignore_xids, local=a.local
        ),
    ),
    "afid": CheckSpec(
        "AMD AFIDs (CPER field diagnoses) within a time window",
        _afid_args,
        lambda a, s: devices.afid(s, a.window, time.time(), a.ignore_afids, a.critical_afids),
    ),
    "health": CheckSpec(
        "the daemon's health verdict per device (ok, degraded, failed, predicted_failure)",
        _missing_flag,
        lambda a, s: devices.health(s, a.missing_ok),
        reads="devices",
    ),
    "ccl-job": CheckSpec(
        "NCCL/RCCL job state from the RAS service",
        _ccl_args,
        lambda a, s: jobs.ccl_job(s, a.address),
    ),
    "exporter": CheckSpec(
        "the daemon answers and every source is up",
        _none,
        lambda a, s: daemon.exporter_health(s),
    ),
}


class _Convention:
    """The exit-code convention the command line asks for, known even when parsing fails.

    A usage error is raised while argparse is still parsing, before ``--exit-codes``
    is in the namespace; so the check parser remembers the words it was given.
    """

    def __init__(self) -> None:
        self.words: list[str] = []

    def watch(self, parser: argparse.ArgumentParser) -> None:
        """Remember the argument strings ``parser`` (the ``check`` parser) is given."""
        parse = parser.parse_known_args

        def remembering(
            args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
        ) -> tuple[argparse.Namespace, list[str]]:
            self.words = list(args) if args is not None else sys.argv[1:]
            return parse(args, namespace)

        parser.parse_known_args = remembering  # type: ignore[method-assign,assignment]

    @property
    def name(self) -> str:
        """``npd`` or ``nagios`` (the default)."""
        for i, word in enumerate(self.words):
            if word == "--exit-codes" and i + 1 < len(self.words):
                return self.words[i + 1]
            if word.startswith("--exit-codes="):
                return word.split("=", 1)[1]
        return "nagios"


def unknown(message: str, convention: str) -> int:
    """Print ``CHECK UNKNOWN - message``; the exit status for UNKNOWN."""
    print(render("check", Result(Status.UNKNOWN, message)))
    return exit_code(Status.UNKNOWN, convention)


def _unknown_on_error(parser: argparse.ArgumentParser, convention: _Convention) -> None:
    """Make argument errors UNKNOWN (exit 3, or 2 for npd) with the usage, not argparse's 2."""

    def error(message: str) -> NoReturn:
        parser.print_usage(sys.stderr)
        raise SystemExit(unknown(f"{parser.prog}: {message}", convention.name))

    parser.error = error  # type: ignore[method-assign]
    parser.set_defaults(usage_parser=parser)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Sub-commands, one per check, with the common data-path options."""
    convention = _Convention()
    convention.watch(parser)
    _unknown_on_error(parser, convention)
    common = argparse.ArgumentParser(add_help=False)
    where = common.add_argument_group("where the metrics come from")
    where.add_argument(
        "--url", type=_url, default=DEFAULT_URL, help=f"daemon to ask (default {DEFAULT_URL})"
    )
    where.add_argument(
        "--local",
        action="store_true",
        help="poll the sources once in this process instead of asking a daemon",
    )
    where.add_argument("--timeout", type=float, default=10.0, help="HTTP deadline, seconds")
    where.add_argument("--ca-file", default="", help="CA bundle for an https --url")
    where.add_argument("--insecure", action="store_true", help="do not verify the TLS certificate")
    where.add_argument(
        "--basic-auth-file", default="", help="file holding user:password for the daemon"
    )
    add_config_file_flag(where, "daemon config for --local")
    common.add_argument(
        "--exit-codes",
        choices=("nagios", "npd"),
        default="nagios",
        help="nagios: 0/1/2/3; npd (Node Problem Detector): 0 OK, 1 problem, 2 unknown",
    )
    _shared_options_in_help(parser, common)
    sub = parser.add_subparsers(dest="check_name", metavar="NAME", required=True)
    for name, spec in CHECKS.items():
        child = sub.add_parser(
            name, parents=[common], help=spec.help, description=spec.help, allow_abbrev=False
        )
        _unknown_on_error(child, convention)
        _arguments_when_parsed(child, spec.arguments)


def _shared_options_in_help(
    parser: argparse.ArgumentParser, common: argparse.ArgumentParser
) -> None:
    """Have ``check --help`` list the options every check takes (given after NAME).

    Formatted only when the help is shown: a check that runs never pays for it.
    """
    plain = parser.format_help

    def format_help() -> str:
        formatter = common._get_formatter()
        for group in common._action_groups:
            if group._group_actions:
                # The plain options need no heading of their own under the line above.
                formatter.start_section(None if group is common._optionals else group.title)
                formatter.add_arguments(group._group_actions)
                formatter.end_section()
        shared = "options of every check, given after NAME (check NAME --help adds its own):\n"
        parser.formatter_class = argparse.RawDescriptionHelpFormatter
        parser.epilog = shared + formatter.format_help() + "\n" + (parser.epilog or "")
        parser.format_help = plain  # type: ignore[method-assign]
        return plain()

    parser.format_help = format_help  # type: ignore[method-assign]


def _arguments_when_parsed(
    parser: argparse.ArgumentParser, add: Callable[[argparse.ArgumentParser], None]
) -> None:
    """Give ``parser`` (one check's) its own arguments when it first parses.

    Only the check that runs pays for its arguments (the XID check's default codes come
    from the catalog, which a health check never imports); its usage, help and errors are
    printed while it parses, so they show every argument as before.
    """

    def first_parse(
        args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        del parser.parse_known_args  # the class's own from now on
        add(parser)
        return parser.parse_known_args(args, namespace)

    parser.parse_known_args = first_parse  # type: ignore[method-assign,assignment]


class _Misuse(Exception):
    """The check was called wrongly (an unreadable or malformed file it was given)."""


def _auth(path: str) -> tuple[str, str] | None:
    if not path:
        return None
    try:
        with open(path, encoding="utf-8") as fh:
            user, sep, password = fh.readline().rstrip("\n").partition(":")
    except OSError as exc:
        raise _Misuse(f"cannot read --basic-auth-file {path}: {exc.strerror}") from None
    if not sep:
        raise _Misuse(f"--basic-auth-file {path} must hold user:password on its first line")
    return user, password


def _samples(args: argparse.Namespace, load_config: Callable[[], Any], spec: CheckSpec) -> Samples:
    if args.local:
        from exporter.errors import ConfigError

        try:
            config = load_config()
        except ConfigError as exc:
            raise SampleError("config error: " + "; ".join(exc.problems)) from None
        return poll_local(config)
    auth = _auth(args.basic_auth_file)
    options = HttpOptions(args.url, args.timeout, args.ca_file, args.insecure, auth)
    return fetch_devices(options) if spec.reads == "devices" else fetch(options)


def _bad_thresholds(args: argparse.Namespace) -> str:
    """Why the thresholds make no sense (WARNING above CRITICAL), or empty."""
    warn, crit = getattr(args, "warn", None), getattr(args, "crit", None)
    if warn is not None and crit is not None and warn > crit:
        return f"--warn {warn:g} is above --crit {crit:g}"
    return ""


def _judge(args: argparse.Namespace, load_config: Callable[[], Any], spec: CheckSpec) -> Result:
    problem = _temperature_thresholds(args) or _bad_thresholds(args)
    if problem:
        return Result(Status.UNKNOWN, problem)
    try:
        samples = _samples(args, load_config, spec)
    except _Misuse as exc:
        # The Nagios convention: a plugin used wrongly is UNKNOWN, whatever the check.
        return Result(Status.UNKNOWN, str(exc))
    except SampleError as exc:
        # A daemon that does not answer is the exporter check's CRITICAL; for the
        # others it means the state of the GPUs cannot be known.
        status = Status.CRITICAL if args.check_name == "exporter" else Status.UNKNOWN
        return Result(status, str(exc))
    return spec.evaluate(args, samples)


# Set on the namespace by a caller that has not set up logging (the command line's quick
# path for checks against a daemon): logging is set up on first need, as the command line
# otherwise does before any command runs (level warning, to stderr).
LOGGING_DEFERRED = "logging_deferred"


def _log(args: argparse.Namespace) -> Any:
    """The check's logger, to stderr.

    A check against a daemon does not import structlog unless it has something to log
    (bench/check_latency.py); an unconfigured structlog would print to stdout, into the
    status line.
    """
    from exporter import log

    if getattr(args, LOGGING_DEFERRED, False):
        log.configure("warning", "auto")
    return log.get(source="check")


def run(args: argparse.Namespace, load_config: Callable[[], Any]) -> int:
    """Run the named check, print its status line, return its exit status."""
    name = args.check_name
    try:
        result = _judge(args, load_config, CHECKS[name])
    except Exception as exc:
        # A check that breaks cannot tell the state of the node: UNKNOWN, never a traceback.
        _log(args).error("check failed", check=name, error=repr(exc))
        result = Result(Status.UNKNOWN, f"internal error: {exc!r}")
    print(render(name, result))
    return exit_code(result.status, args.exit_codes)


COMMAND = (HELP, add_arguments, run)
