"""python -m broker: run one Samsa broker.

Settings come from defaults, then --config FILE (TOML), then the command-line
options, then --set KEY=VALUE (any setting, dotted for the [log] table).
"""
from __future__ import annotations

import argparse
import asyncio
import signal
import sys

from broker.config import BrokerConfig, ConfigError, load_config, to_toml
from broker.service_kit.logging_setup import setup_logging


def build_parser() -> argparse.ArgumentParser:
    d = BrokerConfig()
    p = argparse.ArgumentParser(
        prog="python -m broker",
        description="Run a Samsa broker: topics of partitioned, segmented logs served over "
                    "TCP (produce, fetch with long-poll and sendfile, offsets, metadata). "
                    "Stops cleanly on SIGTERM/SIGINT: finishes in-flight requests, flushes, "
                    "writes recovery checkpoints.",
        epilog="Examples:\n  python -m broker --port 9092 --data-dir /tmp/samsa\n"
               "  python -m broker --config config/broker.toml --set log.flush_ms=10\n"
               "  python -m broker --print-config > my-broker.toml",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", metavar="FILE", help="TOML settings file (see config/broker.toml)")
    p.add_argument("--broker-id", type=int, help=f"this broker's id (default {d.broker_id})")
    p.add_argument("--host", help=f"address to listen on (default {d.host})")
    p.add_argument("--port", type=int, help=f"protocol port; 0 = any free port (default {d.port})")
    p.add_argument("--data-dir", help=f"where segment files live (default {d.data_dir})")
    p.add_argument("--metrics-port", type=int,
                   help=f"Prometheus /metrics port; 0 = any free, -1 = off (default {d.metrics_port})")
    p.add_argument("--log-level", help=f"DEBUG, INFO, WARNING, ERROR (default {d.log_level})")
    p.add_argument("--log-format", choices=["text", "json"], help=f"default {d.log_format}")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override any setting, e.g. --set log.flush_messages=1000 "
                        "--set auto_create_topics=false (repeatable)")
    p.add_argument("--print-config", action="store_true",
                   help="print the effective settings as TOML and exit")
    return p


def parse_config(argv: list[str] | None = None) -> tuple[BrokerConfig, argparse.Namespace]:
    args = build_parser().parse_args(argv)
    overrides: dict[str, object] = {}
    for flag, key in (("broker_id", "broker_id"), ("host", "host"), ("port", "port"),
                      ("data_dir", "data_dir"), ("metrics_port", "metrics_port"),
                      ("log_level", "log_level"), ("log_format", "log_format")):
        value = getattr(args, flag)
        if value is not None:
            overrides[key] = value
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"--set wants KEY=VALUE, got {item!r}")
        overrides[key.strip()] = value.strip()
    return load_config(args.config, overrides), args


async def _run(config: BrokerConfig) -> None:
    from broker.server.server import BrokerServer
    server = BrokerServer(config)
    # start() logs "started", and a supervisor may send SIGTERM the moment it
    # sees that line: hold the signals until our handlers are in, or the
    # default action would kill the broker without its clean shutdown.
    held = {signal.SIGTERM, signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        await server.start()
        server.install_signal_handlers()
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, held)
    await server.wait_stopped()


def main(argv: list[str] | None = None) -> int:
    try:
        config, args = parse_config(argv)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.print_config:
        sys.stdout.write(to_toml(config))
        return 0
    setup_logging(config.log_level, config.log_format)
    try:
        asyncio.run(_run(config))
    except OSError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
