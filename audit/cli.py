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
audit/compare.py); 3 when it cannot reach or open the database, so that a
database down is never taken for a loss.
"""
from __future__ import annotations

import argparse
import signal
import sys
import threading

from broker.coordination.named_cluster import add_cluster_option, cluster_from, parse_cluster
from broker.service_kit import cli

from audit.counting import TIERS

#: report and db: the audit database cannot be reached or opened
EXIT_NO_DATABASE = 3
SERVICE_STATUS = cli.exit_status(
    (0, "stopped cleanly (SIGTERM, SIGINT)"),
    (1, "could not start (ZooKeeper, the database, the schema registry or the port)"),
    (2, "bad usage or bad settings (nothing was started)"))
REPORT_STATUS = cli.exit_status(
    (0, "no window of the period lost messages (copies are reported, never a failure)"),
    (1, "a window lost messages (lost, or lost and duplicated, past its grace)"),
    (2, "bad usage: a bad time or URL, no audit database there, or one at another schema "
        "revision (python -m audit db upgrade)"),
    (EXIT_NO_DATABASE, "the database cannot be reached or opened (one line on stderr): "
                       "nothing is known, nothing was judged"))
DB_STATUS = cli.exit_status(
    (0, "done"), (2, "bad usage: a bad URL"),
    (EXIT_NO_DATABASE, "the database cannot be reached or opened"))


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m audit", description=__doc__,
        epilog="count, serve:\n" + SERVICE_STATUS + "\nreport:\n" + REPORT_STATUS
               + "\ndb:\n" + DB_STATUS,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    cli.add_version_option(p)
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
               "--set publish_interval_ms=10000\n\n" + SERVICE_STATUS)
    c.add_argument("--cluster", metavar="NAME=ZOOKEEPER",
                   help="the cluster: its name and ZooKeeper connect string with chroot")
    c.add_argument("--datacenter", help="where this counter runs (default: the cluster name)")
    c.add_argument("--registry", metavar="URL",
                   help="schema registry (default: the cluster's ZooKeeper)")
    c.add_argument("--metrics-port", type=int, help="Prometheus /metrics; -1 = off (default)")
    cli.add_settings_options(c, config_help="TOML settings file ([count] table)")

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
               "--db postgresql+psycopg://samsa@127.0.0.1:5432/audit\n\n" + SERVICE_STATUS)
    add_cluster_option(s, "the analysis cluster: NAME=ZOOKEEPER, or its ZooKeeper with "
                          "the chroot",
                       zookeeper_security=False)     # its [serve.credentials] say
    s.add_argument("--db", dest="db_url", metavar="URL", help="database URL (default SQLite)")
    s.add_argument("--db-credentials-file", metavar="FILE",
                   help="the database's username and password (JSON, as RDS keeps a master "
                        "user's secret), read for every new connection")
    s.add_argument("--registry", metavar="URL", help="schema registry (default: ZooKeeper)")
    s.add_argument("--http-port", type=int, help="HTTP port (default 8090; 0 = any free)")
    cli.add_settings_options(s, config_help="TOML settings file ([serve] table)")

    r = sub.add_parser(
        "report", help="what is complete, pending, lost or duplicated (exit 1 if lost, "
                       "3 if the database cannot be reached)",
        description="The verdict of every tier, datacenter and cluster for the windows that "
                    "begin in the period, from the audit database.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Times are ISO 8601 (UTC unless they say) or ms since the epoch.\n"
               "Example:\n  python -m audit report --topic page_views "
               "--from 2026-11-24T10:00 --to 2026-11-24T12:00 --tier cluster\n\n"
               + REPORT_STATUS)
    r.add_argument("--db", dest="db_url", metavar="URL",
                   help="database URL (default: SQLite audit.db in --data-dir)")
    r.add_argument("--db-credentials-file", metavar="FILE",
                   help="the database's username and password (JSON, as RDS keeps a master "
                        "user's secret), read for every new connection")
    r.add_argument("--data-dir", default=".")
    r.add_argument("--topic")
    r.add_argument("--from", dest="begin", metavar="TIME", help="default: --hours ago")
    r.add_argument("--to", dest="end", metavar="TIME", help="default: now")
    r.add_argument("--hours", type=float, default=24.0)
    r.add_argument("--tier", choices=list(TIERS))
    r.add_argument("--grace-ms", type=int, default=30 * 60 * 1000,
                   help="a window is pending until this long after it ended and after the "
                        "producers' last report of it was received (default 30 min)")
    r.add_argument("--json", action="store_true", help="JSON instead of a table")

    d = cli.end_help_with(sub.add_parser("db", help="database maintenance"), DB_STATUS)
    d.add_argument("action", choices=["upgrade", "revision"])
    d.add_argument("--db", dest="db_url", metavar="URL")
    d.add_argument("--db-credentials-file", metavar="FILE",
                   help="the database's username and password (JSON, as RDS keeps a master "
                        "user's secret), read for every new connection")
    d.add_argument("--data-dir", default=".")
    return p


def counted_cluster(args) -> dict:
    """--cluster NAME=ZOOKEEPER: the cluster counted, by name and ZooKeeper."""
    if not args.cluster:
        return {}
    cluster = parse_cluster(args.cluster)
    return {"cluster": cluster.name, "zookeeper": cluster.zookeeper}


def analysis_cluster(args) -> dict:
    cluster = cluster_from(args)
    return {"zookeeper": cluster.zookeeper} if cluster else {}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "count":
        from audit.config import CountConfig
        return cli.run_service(CountConfig, args, run_count, table="count",
                               flags=("datacenter", "registry", "metrics_port"),
                               overrides=counted_cluster,
                               clusters={"cluster": "dc-a", "zookeeper": "127.0.0.1:2181/dc-a"})
    if args.command == "serve":
        from audit.config import ServeConfig
        return cli.run_service(ServeConfig, args, run_serve, table="serve",
                               flags=("db_url", "db_credentials_file", "registry",
                                      "http_port"),
                               overrides=analysis_cluster,
                               clusters={"zookeeper": "127.0.0.1:2181/analysis"})
    from sqlalchemy.exc import ArgumentError, DBAPIError

    from audit.store import CredentialsError
    try:
        if args.command == "report":
            return run_report(args)
        if args.command == "db":
            return run_db(args)
    except ArgumentError as exc:          # a URL sqlalchemy cannot read
        print(f"error: bad database URL {args.db_url!r}: {exc}", file=sys.stderr)
        return cli.EXIT_BAD_SETTINGS
    except CredentialsError as exc:       # --db-credentials-file missing or malformed
        print(f"error: {exc}", file=sys.stderr)
        return cli.EXIT_BAD_SETTINGS
    except DBAPIError as exc:             # refused, no such host, a file it cannot open
        print(f"error: cannot reach the audit database at {_safe_url(_url(args))}: "
              f"{_first_line(exc.orig or exc)}", file=sys.stderr)
        return EXIT_NO_DATABASE
    raise AssertionError(args.command)


def _first_line(exc: BaseException) -> str:
    """The driver's own words, first line only (psycopg appends hints and
    sqlalchemy a link to its error page)."""
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def run_serve(config) -> int:
    import logging
    from audit.service import AuditService
    log = logging.getLogger("audit")
    try:
        service = AuditService(config)
        port = service.serve_http()
    except Exception as exc:      # the database, ZooKeeper, the port: say it, exit 1
        print(f"error: cannot start the audit service: {exc}", file=sys.stderr)
        return 1
    log.info("audit service reading %s into %s; reports at %s://%s:%d/", config.zookeeper,
             _safe_url(config.effective_db_url), "https" if config.http.tls else "http",
             config.http_host, port,
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


def _url(args) -> str:
    from audit.store import default_url
    return args.db_url or default_url(args.data_dir)


def _store(args):
    from audit.store import Store
    return Store(_url(args), credentials_file=args.db_credentials_file or "")


def run_report(args) -> int:
    import time
    from audit import report
    from audit.times import BadTime, parse_time
    now = int(time.time() * 1000)
    try:
        end = parse_time(args.end) if args.end else now
        begin = parse_time(args.begin) if args.begin else end - int(args.hours * 3_600_000)
    except BadTime as exc:
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
