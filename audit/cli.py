"""``python -m audit``: count a cluster's tier (and, later, serve and report).

    python -m audit count --cluster NAME=ZOOKEEPER [--datacenter DC] [--config FILE]
                          [--registry URL] [--set KEY=VALUE ...] [--print-config]

Settings come from defaults, then --config FILE (TOML: config/audit.toml lists
every setting), then the options, then --set.
"""
from __future__ import annotations

import argparse
import signal
import sys
import threading

from broker.logging_setup import setup_logging
from broker.settings import ConfigError, parse_overrides, to_toml


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m audit", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser(
        "count", help="count every topic of a cluster and publish monitoring events",
        description="Count what one cluster holds, per topic and time window (the cluster "
                    "tier of the audit), as a consumer group through the cluster's "
                    "ZooKeeper, and publish the counts as monitoring events to the "
                    "cluster's audit topic. Offsets are committed only after the counts "
                    "that include them are published: a crash counts again, never skips. "
                    "Stops on SIGTERM/SIGINT after a last publish.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Example:\n  python -m audit count --cluster dc-a=127.0.0.1:2181/dc-a "
               "--set publish_interval_ms=10000")
    c.add_argument("--cluster", metavar="NAME=ZOOKEEPER",
                   help="the cluster: its name and ZooKeeper connect string with chroot")
    c.add_argument("--config", metavar="FILE", help="TOML settings file ([count] table)")
    c.add_argument("--datacenter", help="where this counter runs (default: the cluster name)")
    c.add_argument("--registry", metavar="URL",
                   help="schema registry (default: the cluster's ZooKeeper)")
    c.add_argument("--metrics-port", type=int, help="Prometheus /metrics; -1 = off (default)")
    c.add_argument("--log-level", help="DEBUG, INFO, WARNING, ERROR (default INFO)")
    c.add_argument("--log-format", choices=["text", "json"])
    c.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override any setting (repeatable)")
    c.add_argument("--print-config", action="store_true",
                   help="print the effective settings as TOML and exit")
    return p


def count_config(args):
    from broker import settings
    from audit.config import CountConfig
    overrides: dict[str, object] = {}
    if args.cluster:
        name, sep, zookeeper = args.cluster.partition("=")
        if not sep or not name or not zookeeper:
            raise ConfigError(f"--cluster is NAME=ZOOKEEPER (\"dc-a=127.0.0.1:2181/dc-a\"), "
                              f"got {args.cluster!r}")
        overrides.update(cluster=name.strip(), zookeeper=zookeeper.strip())
    for flag in ("datacenter", "registry", "metrics_port", "log_level", "log_format"):
        value = getattr(args, flag)
        if value is not None:
            overrides[flag] = value
    overrides.update(parse_overrides(args.set))
    values = settings.read_toml(args.config).get("count", {}) if args.config else {}
    return settings.build(CountConfig, settings.apply_overrides(values, overrides))


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "count":
        try:
            config = count_config(args)
        except ConfigError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        if args.print_config:
            sys.stdout.write("[count]\n" + to_toml(config))
            return 0
        return run_count(config)
    raise AssertionError(args.command)


def run_count(config) -> int:
    setup_logging(config.log_level, config.log_format)
    from audit.cluster_counter import ClusterCounter
    try:
        counter = ClusterCounter(config)
    except Exception as exc:      # ZooKeeper unreachable, a registry error: say it, exit 1
        print(f"error: cannot start counting {config.cluster}: {exc}", file=sys.stderr)
        return 1
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: (stop.set(), counter.stop()))
    try:
        counter.run()
    finally:
        counter.close()
    return 0
