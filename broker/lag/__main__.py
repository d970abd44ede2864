"""python -m broker.lag: the lag service (see broker/lag/service.py, docs/lag.md).

Settings come from defaults, then --config FILE (TOML, config/lag.toml),
then the command-line options, then --set KEY=VALUE.
"""
from __future__ import annotations

import argparse
import logging
import sys

from broker.coordination.named_cluster import NamedCluster, parse_cluster
from broker.service_kit import cli

from .config import LagServiceConfig


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
               "  python -m broker.lag --config config/lag.toml --print-config\n\n"
               + cli.exit_status(
                   (0, "stopped cleanly (SIGTERM, SIGINT)"),
                   (1, "could not start (its HTTP port taken)"),
                   (2, "bad usage or bad settings (nothing was started)")),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    cli.add_version_option(p)
    p.add_argument("--cluster", action="append", default=[], metavar="NAME=ZOOKEEPER",
                   help="a cluster to watch: a name and its ZooKeeper connect string with "
                        "chroot (repeatable; replaces the file's [[clusters]])")
    p.add_argument("--http-port", type=int, help="HTTP port (default 8091; 0 = any free)")
    p.add_argument("--interval", type=float, help="seconds between evaluations (default 5)")
    p.add_argument("--groups", metavar="REGEX", help="groups to evaluate (default .*)")
    return cli.add_settings_options(p, config_help="TOML settings file (config/lag.toml)",
                                    set_example="--set stop_min_ms=30000")


FLAGS = {"http_port": "http_port", "interval": "interval_s", "groups": "groups"}


def clusters_named(args) -> dict:
    """--cluster NAME=ZOOKEEPER, repeated: replaces the file's [[clusters]]."""
    return {"clusters": [parse_cluster(c) for c in args.cluster]} if args.cluster else {}


def main(argv: list[str] | None = None) -> int:
    return cli.run_service(LagServiceConfig, build_parser().parse_args(argv), run, flags=FLAGS,
                           overrides=clusters_named,
                           clusters={"clusters": [NamedCluster("dc-a", "127.0.0.1:2181/dc-a")]})


def run(config: LagServiceConfig) -> int:
    logging.getLogger("kazoo").setLevel(logging.WARNING)
    from .service import LagService
    stop = cli.stop_on_signals()
    try:
        service = LagService(config).start()
    except ValueError as exc:       # [http]'s files (TLS, users)
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:          # the HTTP port taken: nothing has started
        print(f"error: cannot serve on {config.http_host}:{config.http_port}: {exc}",
              file=sys.stderr)
        return 1
    print(f"lag service on {service.scheme}://{config.http_host}:{service.port}/", flush=True)
    stop.wait()
    service.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
