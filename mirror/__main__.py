"""python -m mirror: copy topics of source clusters into a target cluster.

Settings come from defaults, then --config FILE (TOML, see mirror/config.py
and config/mirror.toml), then the command-line options, then --set KEY=VALUE.
"""
from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading

from broker.coordination.named_cluster import NamedCluster, parse_cluster
from broker.service_kit import cli

from .config import MirrorConfig

log = logging.getLogger("mirror")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m mirror",
        description="Mirror Samsa clusters into another (the paper's analysis cluster): "
                    "consume, as a consumer group through ZooKeeper, every topic of the "
                    "source clusters that matches --whitelist (and not --blacklist), and "
                    "produce it into the target with the same key, timestamp and value. "
                    "Source offsets are committed only once the target acknowledged the "
                    "copies (acks=all: every in-sync replica, or flushed where unreplicated): a crash re-sends (duplicates), never skips. Run several "
                    "processes with the same --group to share the partitions. Stops "
                    "cleanly on SIGTERM/SIGINT; exits 1 when a send fails for good.",
        epilog="Examples:\n"
               "  python -m mirror --config config/mirror.toml\n"
               "  python -m mirror --source dc-a=127.0.0.1:2181/dc-a "
               "--source dc-b=127.0.0.1:2181/dc-b \\\n"
               "      --target analysis=127.0.0.1:2181/analysis --whitelist 'clicks|views'\n"
               "  python -m mirror --config config/mirror.toml --print-config\n\n"
               + cli.exit_status(
                   (0, "stopped cleanly (SIGTERM, SIGINT): what was in flight drained, "
                       "offsets committed"),
                   (1, "could not start (a cluster's ZooKeeper unreachable), or a send "
                       "failed for good and the mirror stopped"),
                   (2, "bad usage or bad settings (nothing was started)")),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    cli.add_version_option(p)
    p.add_argument("--source", action="append", default=[], metavar="NAME=ZOOKEEPER",
                   help="a source cluster: its name and ZooKeeper connect string with "
                        "chroot (repeatable; replaces the file's [[sources]])")
    p.add_argument("--target", metavar="NAME=ZOOKEEPER", help="the target cluster")
    p.add_argument("--group", help="consumer group in the sources (default samsa-mirror)")
    p.add_argument("--whitelist", metavar="REGEX", help="topics to copy (default .*)")
    p.add_argument("--blacklist", metavar="REGEX", help="topics not to copy")
    p.add_argument("--metrics-port", type=int,
                   help="Prometheus /metrics port; 0 = any free, -1 = off (default 9095)")
    return cli.add_settings_options(
        p, config_help="TOML settings file (config/mirror.toml)",
        set_example="--set batch_size=2000 --set max_unacknowledged=50000")


FLAGS = ("group", "whitelist", "blacklist", "metrics_port")
EXAMPLE_SOURCE = NamedCluster("dc-a", "127.0.0.1:2181/dc-a")
EXAMPLE_TARGET = NamedCluster("analysis", "127.0.0.1:2181/analysis")


def clusters_named(args) -> dict:
    """--source and --target: NAME=ZOOKEEPER each (broker/coordination/named_cluster.py)."""
    overrides: dict[str, object] = {}
    if args.source:
        overrides["sources"] = [parse_cluster(s) for s in args.source]
    if args.target:
        overrides["target"] = parse_cluster(args.target)
    return overrides


def main(argv: list[str] | None = None) -> int:
    return cli.run_service(MirrorConfig, build_parser().parse_args(argv), run, flags=FLAGS,
                           overrides=clusters_named,
                           clusters={"sources": [EXAMPLE_SOURCE], "target": EXAMPLE_TARGET})


def run(config: MirrorConfig) -> int:
    from broker.service_kit.http_security import check_files
    from .mirror import Mirror
    try:
        check_files(config.metrics_http, "metrics_http")
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    try:
        mirror = Mirror(config).start()
    except OSError as exc:        # ZooKeeperUnavailable included: a clear message, exit 1
        print(f"error: {exc}", file=sys.stderr)
        return 1
    while not stop.wait(0.5):
        if mirror.failure is not None or mirror.wait(0):
            break
    if stop.is_set():
        log.info("stopping: draining what is in flight, publishing the counts, committing")
    mirror.close()
    if mirror.failure is not None:
        print(f"error: the mirror stopped: {mirror.failure}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
