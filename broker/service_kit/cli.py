"""The command line every Samsa service shares.

A service's ``python -m`` entry point builds its parser with argparse, adds
its own options, and lets this module add and read the common ones:

    --config FILE      a TOML settings file (the service's table of it)
    --set KEY=VALUE    any setting, dotted for nested tables (repeatable)
    --print-config     the effective settings as TOML, then exit 0
    --log-level, --log-format
    --version          Samsa's version (``add_version_option``; every command)

Every command also says in its --help what each of its exit statuses means
(``exit_status``: an epilog "Exit status:" table), so a script can trust them.

Settings come from the defaults, then the file, then the service's own
options (those given), then ``--set``; ``run_service`` builds them, answers
``--print-config``, sets up logging and calls the service. Bad settings are
one line on stderr and exit status 2, before anything starts.

``--print-config`` answers even when the settings are not complete yet (no
cluster named): it prints what it has, each missing setting as a comment,
so a settings file can be started from it. A wrong value is exit 2 still.
"""
from __future__ import annotations

import argparse
import signal
import sys
import textwrap
import threading
from typing import Any, Callable

from broker.service_kit import settings
from broker.service_kit.logging_setup import setup_logging
from broker.service_kit.settings import ConfigError
from broker.service_kit.version import package_version

EXIT_BAD_SETTINGS = 2


class _VersionAction(argparse.Action):
    """--version: prints "samsa VERSION" and exits 0; the version is looked
    up only when asked (importlib.metadata reads the installed packages)."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS,
                 help="print Samsa's version and exit"):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"samsa {package_version()}")
        parser.exit(0)


def add_version_option(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """--version on a command's top-level parser."""
    parser.add_argument("--version", action=_VersionAction)
    return parser


def exit_status(*codes: tuple[int | str, str]) -> str:
    """The "Exit status:" table of a command's --help epilog, one
    ``(status, meaning)`` a row (the parser needs RawDescriptionHelpFormatter
    for the rows to stay rows)."""
    rows = ["Exit status:"]
    for code, meaning in codes:
        rows += textwrap.wrap(meaning, 78, initial_indent=f"  {code:<3} ",
                              subsequent_indent=" " * 6)
    return "\n".join(rows)


def end_help_with(parser: argparse.ArgumentParser, text: str) -> argparse.ArgumentParser:
    """Append ``text`` (an ``exit_status`` table) to a parser's epilog, kept
    as written: the parser gets the raw formatter, and a description written
    for the wrapping one is wrapped here once."""
    if not issubclass(parser.formatter_class, argparse.RawDescriptionHelpFormatter):
        parser.formatter_class = argparse.RawDescriptionHelpFormatter
        if parser.description:
            parser.description = textwrap.fill(parser.description, 78)
    parser.epilog = f"{parser.epilog}\n\n{text}" if parser.epilog else text
    return parser


def add_settings_options(parser: argparse.ArgumentParser, *, config_help: str,
                         set_example: str = "",
                         log_defaults: tuple[str, str] | None = ("INFO", "text"),
                         config_flags: tuple[str, ...] = ("--config",),
                         ) -> argparse.ArgumentParser:
    """Add --config (or ``config_flags``), --log-level, --log-format (unless
    ``log_defaults`` is None: a command that logs its own way), --set and
    --print-config."""
    parser.add_argument(*config_flags, dest="config", metavar="FILE", help=config_help)
    if log_defaults is not None:
        level, fmt = log_defaults
        parser.add_argument("--log-level", help=f"DEBUG, INFO, WARNING, ERROR (default {level})")
        parser.add_argument("--log-format", choices=["text", "json"], help=f"default {fmt}")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override any setting" + (f", e.g. {set_example}" if set_example
                                                        else "") + " (repeatable)")
    parser.add_argument("--print-config", action="store_true",
                        help="print the effective settings as TOML and exit")
    return parser


def settings_values(args: argparse.Namespace, table: str | None = None,
                    flags: tuple[str, ...] | dict[str, str] = (),
                    overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """The raw settings, file then options then --set: ``flags`` names the
    options (their argparse ``dest``) copied into the settings when given;
    as a dict it maps an option to the setting it sets."""
    given = dict(overrides or {})
    mapping = dict(flags) if isinstance(flags, dict) else {flag: flag for flag in flags}
    for flag in ("log_level", "log_format"):
        mapping.setdefault(flag, flag)
    for flag, key in mapping.items():
        value = getattr(args, flag, None)
        if value is not None:
            given[key] = value
    given.update(settings.parse_overrides(getattr(args, "set", None)))
    return settings.apply_overrides(settings.read_table(getattr(args, "config", None), table),
                                    given)


def load_settings(cls, args: argparse.Namespace, table: str | None = None,
                  flags: tuple[str, ...] | dict[str, str] = (),
                  overrides: dict[str, Any] | None = None):
    """``cls`` from the file's ``[table]``, the options named ``flags``, then --set."""
    return settings.build(cls, settings_values(args, table, flags, overrides))


def print_config(cls, values: dict[str, Any], table: str | None = None, out=None,
                 clusters: dict[str, Any] | None = None) -> None:
    """The settings as TOML. When the clusters are not named yet (the
    settings of ``clusters``, or a setting without a default, not given):
    what there is, each missing setting as a comment. Every other setting
    is checked all the same, with ``clusters``' examples standing in for
    the missing ones: a wrong value is ConfigError, never printed."""
    out = out or sys.stdout
    clusters = clusters or {}
    try:
        out.write(settings.to_toml(settings.build(cls, values), table))
        return
    except ConfigError as exc:
        problem = str(exc)
        absent = [name for name in clusters if not values.get(name)]
        absent += [name for name in settings.missing(cls, values) if name not in absent]
        if not absent or any(name not in clusters for name in absent):
            raise
    settings.build(cls, {**values, **{name: clusters[name] for name in absent}})
    sketched = settings.sketch(cls, values)
    for name in absent:                 # shown as comments, not as empty values
        object.__setattr__(sketched, name, None)
    text = settings.to_toml(sketched, table)
    header, body = text.split("\n", 1) if table else ("", text)
    required = "".join(f"# {name} = ...   (required; for example {_example(clusters[name])})\n"
                       for name in absent)
    out.write(f"# not complete yet: {problem}\n" + (header + "\n" if table else "")
              + required + body)


def _example(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return ", ".join(_example(v) for v in value)
    return str(value) if not isinstance(value, str) else f'"{value}"'


def run_service(cls, args: argparse.Namespace, run: Callable[[Any], int], *,
                table: str | None = None, flags: tuple[str, ...] | dict[str, str] = (),
                overrides: Callable[[argparse.Namespace], dict[str, Any]] | None = None,
                clusters: dict[str, Any] | None = None) -> int:
    """Build the settings, answer --print-config, set up logging, ``run(config)``.

    ``overrides(args)`` adds settings the options imply in ways a flag name
    cannot say (a cluster given as NAME=ZOOKEEPER); it may raise ConfigError.
    ``clusters`` maps the settings that say which clusters to an example
    value of each: until they are given, --print-config shows the rest
    (``print_config``).
    """
    try:
        values = settings_values(args, table, flags, overrides(args) if overrides else None)
        if getattr(args, "print_config", False):
            print_config(cls, values, table, clusters=clusters)
            return 0
        config = settings.build(cls, values)
    except ConfigError as exc:
        return fail(exc)
    setup_logging(config.log_level, config.log_format)
    return run(config)


def stop_on_signals() -> threading.Event:
    """An event set by SIGTERM or SIGINT, the handlers installed now: call it
    before the service starts (a stop that comes while it starts is kept),
    then ``wait()`` on it once it serves."""
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    return stop


def fail(problem: object) -> int:
    """Say what is wrong with the settings on stderr; the exit status for it."""
    print(f"error: {problem}", file=sys.stderr)
    return EXIT_BAD_SETTINGS
