"""``python -m audit``: the audit's processes and reports.

    python -m audit count --cluster NAME=ZOOKEEPER [--datacenter DC] [options]
    python -m audit serve --zookeeper ANALYSIS-ZOOKEEPER [--db URL] [--http-port N] [options]
    python -m audit report [--db URL] [--topic T] [--from TIME] [--to TIME] [--tier X] [--json]
    python -m audit db upgrade [--db URL]

Settings come from defaults, then --config FILE (TOML: config/audit.toml lists
every setting, in a [count] and a [serve] table), then the options, then --set.
``report`` exits 1 when a window of the period lost messages (``lost`` or
``lost_and_duplicated``, past its grace period), so a cron job or a DAG can
act on it; 0 otherwise: copies are reported, never a failure (the one rule,
audit/compare.py).
"""
from __future__ import annotations

import argparse
import signal
import sys
import threading

from broker.service_kit.logging_setup import setup_logging
from broker.service_kit.settings import ConfigError, parse_overrides, to_toml

from audit.counting import TIERS


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

    s = sub.add_parser(
        "serve", help="store every tier's monitoring events; reports and answers over HTTP",
        description="Read the monitoring events of every tier from the analysis cluster's "
                    "audit topic (each once, by its id) into the database (SQLite by "
                    "default, PostgreSQL by URL), and serve the completeness heatmap, the "
                    "per-window drill-down, /api/verdicts (what the warehouse loader waits "
                    "on), /api/completeness and /metrics over HTTP. Stops on SIGTERM/SIGINT.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Example:\n  python -m audit serve --zookeeper 127.0.0.1:2181/analysis "
               "--http-port 8090\n  python -m audit serve --zookeeper ... "
               "--db postgresql+psycopg://samsa@127.0.0.1:5432/audit")
    s.add_argument("--zookeeper", help="the analysis cluster's ZooKeeper with its chroot")
    s.add_argument("--config", metavar="FILE", help="TOML settings file ([serve] table)")
    s.add_argument("--db", dest="db_url", metavar="URL", help="database URL (default SQLite)")
    s.add_argument("--registry", metavar="URL", help="schema registry (default: ZooKeeper)")
    s.add_argument("--http-port", type=int, help="HTTP port (default 8090; 0 = any free)")
    s.add_argument("--log-level")
    s.add_argument("--log-format", choices=["text", "json"])
    s.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    s.add_argument("--print-config", action="store_true")

    r = sub.add_parser(
        "report", help="what is complete, pending, lost or duplicated (exit 1 if lost)",
        description="The verdict of every tier, datacenter and cluster for the windows that "
                    "begin in the period, from the audit database.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Times are ISO 8601 (UTC unless they say) or ms since the epoch.\n"
               "Example:\n  python -m audit report --topic page_views "
               "--from 2026-11-24T10:00 --to 2026-11-24T12:00 --tier cluster")
    r.add_argument("--db", dest="db_url", metavar="URL",
                   help="database URL (default: SQLite audit.db in --data-dir)")
    r.add_argument("--data-dir", default=".")
    r.add_argument("--topic")
    r.add_argument("--from", dest="begin", metavar="TIME", help="default: --hours ago")
    r.add_argument("--to", dest="end", metavar="TIME", help="default: now")
    r.add_argument("--hours", type=float, default=24.0)
    r.add_argument("--tier", choices=list(TIERS))
    r.add_argument("--grace-ms", type=int, default=30 * 60 * 1000,
                   help="a window that ended less than this ago is pending (default 30 min)")
    r.add_argument("--json", action="store_true", help="JSON instead of a table")

    d = sub.add_parser("db", help="database maintenance")
    d.add_argument("action", choices=["upgrade", "revision"])
    d.add_argument("--db", dest="db_url", metavar="URL")
    d.add_argument("--data-dir", default=".")
    return p


def _settings(cls, table: str, args, flags: tuple[str, ...], overrides: dict):
    """``cls`` from the file's [table], the options named ``flags``, then --set."""
    from broker.service_kit import settings
    for flag in flags:
        value = getattr(args, flag)
        if value is not None:
            overrides[flag] = value
    overrides.update(parse_overrides(args.set))
    values = settings.read_toml(args.config).get(table, {}) if args.config else {}
    return settings.build(cls, settings.apply_overrides(values, overrides))


def count_config(args):
    from audit.config import CountConfig
    overrides: dict[str, object] = {}
    if args.cluster:
        name, sep, zookeeper = args.cluster.partition("=")
        if not sep or not name or not zookeeper:
            raise ConfigError(f"--cluster is NAME=ZOOKEEPER (\"dc-a=127.0.0.1:2181/dc-a\"), "
                              f"got {args.cluster!r}")
        overrides.update(cluster=name.strip(), zookeeper=zookeeper.strip())
    return _settings(CountConfig, "count", args,
                     ("datacenter", "registry", "metrics_port", "log_level", "log_format"),
                     overrides)


def serve_config(args):
    from audit.config import ServeConfig
    return _settings(ServeConfig, "serve", args,
                     ("zookeeper", "db_url", "registry", "http_port", "log_level", "log_format"),
                     {})


def _run_service(kind: str, args, make_config, run) -> int:
    try:
        config = make_config(args)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.print_config:
        sys.stdout.write(f"[{kind}]\n" + to_toml(config))
        return 0
    return run(config)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "count":
        return _run_service("count", args, count_config, run_count)
    if args.command == "serve":
        return _run_service("serve", args, serve_config, run_serve)
    if args.command == "report":
        return run_report(args)
    if args.command == "db":
        return run_db(args)
    raise AssertionError(args.command)


def run_serve(config) -> int:
    setup_logging(config.log_level, config.log_format)
    import logging
    from audit.service import AuditService
    log = logging.getLogger("audit")
    try:
        service = AuditService(config)
        port = service.serve_http()
    except Exception as exc:      # the database, ZooKeeper, the port: say it, exit 1
        print(f"error: cannot start the audit service: {exc}", file=sys.stderr)
        return 1
    log.info("audit service reading %s into %s; reports at http://%s:%d/", config.zookeeper,
             _safe_url(config.effective_db_url), config.http_host, port,
             extra={"event": "started", "http_port": port})
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: service.stop())
    try:
        service.run()
    finally:
        service.close()
    return 0


def _safe_url(url: str) -> str:
    """A database URL without its password, for the log."""
    from sqlalchemy.engine import make_url
    return make_url(url).render_as_string(hide_password=True)


def _store(args):
    from audit.store import Store, default_url
    return Store(args.db_url or default_url(args.data_dir))


def run_report(args) -> int:
    import time
    from audit import report
    from audit.web import BadRequest, parse_time
    now = int(time.time() * 1000)
    try:
        end = parse_time(args.end) if args.end else now
        begin = parse_time(args.begin) if args.begin else end - int(args.hours * 3_600_000)
    except BadRequest as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    store = _store(args)
    try:
        revision = store.revision()
        if revision is None:
            print(f"error: no audit database at {_safe_url(store.url)} (python -m audit db "
                  f"upgrade creates one; the service does at start)", file=sys.stderr)
            return 2
        if revision != store.head_revision():
            print(f"error: the audit database at {_safe_url(store.url)} is at schema "
                  f"revision {revision}, this audit reads {store.head_revision()}: python -m "
                  f"audit db upgrade (the service does it at start)", file=sys.stderr)
            return 2
        chosen = report.verdicts(store, args.topic, begin, end, now, args.grace_ms, args.tier)
    finally:
        store.close()
    sys.stdout.write(report.as_json(chosen, begin, end) + "\n" if args.json
                     else report.as_table(chosen))
    return 1 if report.has_losses(chosen) else 0


def run_db(args) -> int:
    store = _store(args)
    try:
        if args.action == "upgrade":
            store.upgrade()
        print(f"{_safe_url(store.url)}: revision {store.revision()}")
    finally:
        store.close()
    return 0


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
