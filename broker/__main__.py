"""python -m broker: run one Samsa broker.

Settings come from defaults, then --config FILE (TOML), then the command-line
options, then --set KEY=VALUE (any setting, dotted for the [log] table).
"""
from __future__ import annotations

import argparse
import asyncio
import signal
import sys

from broker.config import BrokerConfig
from broker.service_kit import cli


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
               "  python -m broker --print-config > my-broker.toml\n\n" + cli.exit_status(
                   (0, "stopped cleanly (SIGTERM, SIGINT)"),
                   (1, "could not start or serve (the port taken, the data directory "
                       "unusable)"),
                   (2, "bad usage or bad settings (nothing was started)")),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    cli.add_version_option(p)
    p.add_argument("--broker-id", type=int, help=f"this broker's id (default {d.broker_id})")
    p.add_argument("--host", help=f"address to listen on (default {d.host})")
    p.add_argument("--port", type=int, help=f"protocol port; 0 = any free port (default {d.port})")
    p.add_argument("--data-dir", help=f"where segment files live (default {d.data_dir})")
    p.add_argument("--metrics-port", type=int,
                   help=f"Prometheus /metrics port; 0 = any free, -1 = off (default {d.metrics_port})")
    return cli.add_settings_options(
        p, config_help="TOML settings file (see config/broker.toml)",
        set_example="--set log.flush_messages=1000 --set auto_create_topics=false",
        log_defaults=(d.log_level, d.log_format))


FLAGS = ("broker_id", "host", "port", "data_dir", "metrics_port")


def parse_config(argv: list[str] | None = None) -> tuple[BrokerConfig, argparse.Namespace]:
    args = build_parser().parse_args(argv)
    return cli.load_settings(BrokerConfig, args, flags=FLAGS), args


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
    return cli.run_service(BrokerConfig, build_parser().parse_args(argv), _serve, flags=FLAGS)


def _serve(config: BrokerConfig) -> int:
    from broker.service_kit.http_security import check_files
    try:
        check_files(config.metrics_http, "metrics_http")
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        asyncio.run(_run(config))
    except OSError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
