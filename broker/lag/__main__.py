"""python -m broker.lag: the lag service (see broker/lag/service.py, docs/lag.md).

Settings come from defaults, then --config FILE (TOML, config/lag.toml),
then the command-line options, then --set KEY=VALUE.
"""
from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading

from broker.service_kit.logging_setup import setup_logging
from broker.service_kit.settings import ConfigError, parse_overrides, to_toml

from .config import load_lag_config


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m broker.lag",
        description="Evaluate every consumer group of the given clusters by Burrow's rules "
                    "(OK, WARN, STALL, STOP, REWIND per partition, owned or not, with lag in "
                    "bytes and seconds) every --interval seconds, and serve the result as "
                    "JSON (/v3/kafka/CLUSTER/consumer/GROUP/status) and Prometheus gauges "
                    "(/metrics). Stops on SIGTERM/SIGINT.",
        epilog="Examples:\n"
               "  python -m broker.lag --cluster dc-a=127.0.0.1:2181/dc-a "
               "--cluster analysis=127.0.0.1:2181/analysis\n"
               "  curl http://127.0.0.1:8091/v3/kafka/dc-a/consumer/samsa-mirror/status\n"
               "  python -m broker.lag --config config/lag.toml --print-config",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", metavar="FILE", help="TOML settings file (config/lag.toml)")
    p.add_argument("--cluster", action="append", default=[], metavar="NAME=ZOOKEEPER",
                   help="a cluster to watch: a name and its ZooKeeper connect string with "
                        "chroot (repeatable; replaces the file's [[clusters]])")
    p.add_argument("--http-port", type=int, help="HTTP port (default 8091; 0 = any free)")
    p.add_argument("--interval", type=float, help="seconds between evaluations (default 5)")
    p.add_argument("--groups", metavar="REGEX", help="groups to evaluate (default .*)")
    p.add_argument("--log-level", help="DEBUG, INFO, WARNING, ERROR (default INFO)")
    p.add_argument("--log-format", choices=["text", "json"], help="default text")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override any setting, e.g. --set stop_min_ms=30000 (repeatable)")
    p.add_argument("--print-config", action="store_true",
                   help="print the effective settings as TOML and exit")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    overrides: dict = {}
    for i, item in enumerate(args.cluster):
        name, sep, zookeeper = item.partition("=")
        if not sep:
            print(f"error: --cluster takes NAME=ZOOKEEPER, got {item!r}", file=sys.stderr)
            return 2
        overrides[f"clusters.{i}.name"] = name
        overrides[f"clusters.{i}.zookeeper"] = zookeeper
    for key, value in (("http_port", args.http_port), ("interval_s", args.interval),
                       ("groups", args.groups), ("log_level", args.log_level),
                       ("log_format", args.log_format)):
        if value is not None:
            overrides[key] = value
    try:
        overrides.update(parse_overrides(args.set))
        if args.cluster:
            config = _with_clusters(args.config, overrides, len(args.cluster))
        else:
            config = load_lag_config(args.config, overrides)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.print_config:
        print(to_toml(config), end="")
        return 0
    setup_logging(config.log_level, config.log_format)
    logging.getLogger("kazoo").setLevel(logging.WARNING)
    from .service import LagService
    service = LagService(config).start()
    print(f"lag service on http://{config.http_host}:{service.port}/", flush=True)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    service.stop()
    return 0


def _with_clusters(path: str | None, overrides: dict, n: int):
    """--cluster replaces the file's clusters: start from an empty array of n tables."""
    from broker.service_kit import settings
    from .config import LagServiceConfig
    values = settings.read_toml(path) if path else {}
    values["clusters"] = [{} for _ in range(n)]
    return settings.build(LagServiceConfig, settings.apply_overrides(values, overrides))


if __name__ == "__main__":
    sys.exit(main())
