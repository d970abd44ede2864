"""``python -m hadoop_loader``: load what is new in the analysis cluster into Parquet.

    python -m hadoop_loader --zookeeper 127.0.0.1:2181/analysis --output file:///data/warehouse
    python -m hadoop_loader --config config/loader.toml --set master=spark://host:7077
    spark-submit --master local[2] hadoop_loader/__main__.py --zookeeper ...
    python -m hadoop_loader --config config/loader.toml --reload-hour 2026-11-26T10

Settings come from defaults, then --config FILE (TOML, a [loader] table;
config/loader.toml lists every setting), then the options, then --set.
--reload-hour H: after loading what is new, rebuild hour H (UTC) of every
topic from the offsets recorded for it, and swap it in at once.
Exit status: 0 loaded (or nothing new); 1 the load failed (nothing was
committed: the next run loads the same ranges); 2 bad settings; 3 the hour
cannot be reloaded (part of it has left the brokers' retention, or no load
recorded its offsets): its partitions are left as they were.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import sys

from broker.coordination.named_cluster import add_cluster_option, cluster_from
from broker.service_kit import cli


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m hadoop_loader", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    cli.add_version_option(p)
    add_cluster_option(p, "the analysis cluster: NAME=ZOOKEEPER, or its ZooKeeper with "
                          "the chroot", zookeeper_security=False)   # [loader.credentials]
    p.add_argument("--output", help="output root: a local path, or a file://, hdfs:// or "
                                    "s3a:// URI")
    p.add_argument("--master", help="Spark master (default local[*])")
    p.add_argument("--whitelist", metavar="REGEX", help="topics to load (default .*)")
    p.add_argument("--reload-hour", metavar="HOUR",
                   help="then rebuild this hour (UTC) of every topic, e.g. 2026-11-26T10 "
                        "or 2026-11-26T10:00:00+00:00 (exit 3 when it cannot be)")
    p.add_argument("--json", action="store_true", help="print the run summary as JSON")
    return cli.add_settings_options(p, config_help="TOML settings file ([loader] table)",
                                    set_example="--set master=spark://host:7077")


def analysis_cluster(args) -> dict:
    """--cluster (or its alias --zookeeper): the cluster the loader reads."""
    cluster = cluster_from(args)
    if cluster is None:
        return {}
    if args.zookeeper:                  # the alias names no cluster: keep cluster_name
        return {"zookeeper": cluster.zookeeper}
    return {"zookeeper": cluster.zookeeper, "cluster_name": cluster.name}


def parse_hour(text: str) -> int:
    """The start (epoch ms) of the hour ``text`` names: YYYY-MM-DDTHH, or an
    ISO date and time at a whole hour (UTC unless it says otherwise);
    ValueError with what is wrong."""
    try:
        moment = dt.datetime.strptime(text, "%Y-%m-%dT%H")
    except ValueError:
        try:
            moment = dt.datetime.fromisoformat(text)
        except ValueError:
            raise ValueError(f"--reload-hour {text!r}: not an hour (YYYY-MM-DDTHH, or an ISO "
                             f"date and time at a whole hour)") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.timezone.utc)
    ms = int(moment.timestamp() * 1000)
    if ms % 3_600_000:
        raise ValueError(f"--reload-hour {text!r}: not the start of an hour")
    return ms


def main(argv: list[str] | None = None) -> int:
    from hadoop_loader.config import LoaderConfig
    args = build_parser().parse_args(argv)
    try:
        args.reload_hour_ms = parse_hour(args.reload_hour) if args.reload_hour else None
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return cli.run_service(LoaderConfig, args, lambda config: run(config, args), table="loader",
                           flags=("output", "master", "whitelist"),
                           overrides=analysis_cluster,
                           clusters={"zookeeper": "127.0.0.1:2181/analysis"})


def run(config, args) -> int:
    from hadoop_loader import job
    from hadoop_loader.outputfs import OutputError
    from hadoop_loader.plan import PlanError
    try:
        summary = job.load(config, reload_hour_ms=getattr(args, "reload_hour_ms", None))
    except job.ReloadError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 3
    except (PlanError, OutputError, job.LoadBusy, OSError, ValueError) as exc:
        print(f"error: the load failed, nothing was committed: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(summary.__dict__, default=list, indent=1))
    else:
        print(summary_text(summary))
    return 0


def summary_text(summary) -> str:
    lines = [f"run {summary.run}: {summary.messages:,} messages ({summary.bytes:,} bytes) from "
             f"{summary.units} work units in {summary.seconds:.1f} s; {summary.errors} to the "
             f"error output"]
    if summary.recovered:
        lines.append(f"finished an interrupted earlier publish ({summary.recovered} files)")
    for k, (a, b) in summary.skipped.items():
        lines.append(f"LOST to retention before loading: {k} offsets {a} to {b} "
                     f"({b - a:,} bytes)")
    if summary.phases:
        lines.append("time: " + ", ".join(f"{name} {seconds:.1f} s"
                                          for name, seconds in summary.phases.items()))
    for topic, n in sorted(summary.reloaded.items()):
        lines.append(f"reloaded {topic}: {n:,} rows of the hour rebuilt and swapped in")
    for topic, hours in sorted(summary.rows.items()):
        for hour, n in sorted(hours.items()):
            lines.append(f"  {topic} {hour}: {n:,} rows")
    return "\n".join(lines)
