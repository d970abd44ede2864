"""``python -m hadoop_loader``: load what is new in the analysis cluster into Parquet.

    python -m hadoop_loader --zookeeper 127.0.0.1:2181/analysis --output file:///data/warehouse
    python -m hadoop_loader --config config/loader.toml --set master=spark://host:7077
    spark-submit --master local[2] hadoop_loader/__main__.py --zookeeper ...

Settings come from defaults, then --config FILE (TOML, a [loader] table;
config/loader.toml lists every setting), then the options, then --set.
Exit status: 0 loaded (or nothing new); 1 the load failed (nothing was
committed: the next run loads the same ranges); 2 bad settings.
"""
from __future__ import annotations

import argparse
import json
import sys

from broker.service_kit.logging_setup import setup_logging
from broker.service_kit.settings import ConfigError, parse_overrides, to_toml


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m hadoop_loader", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", metavar="FILE", help="TOML settings file ([loader] table)")
    p.add_argument("--zookeeper", help="the analysis cluster's ZooKeeper, with its chroot")
    p.add_argument("--output", help="output root: a local path or file:// URI")
    p.add_argument("--master", help="Spark master (default local[*])")
    p.add_argument("--whitelist", metavar="REGEX", help="topics to load (default .*)")
    p.add_argument("--log-level")
    p.add_argument("--log-format", choices=["text", "json"])
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override any setting (repeatable)")
    p.add_argument("--print-config", action="store_true",
                   help="print the effective settings as TOML and exit")
    p.add_argument("--json", action="store_true", help="print the run summary as JSON")
    return p


def loader_config(args):
    from broker.service_kit import settings
    from hadoop_loader.config import LoaderConfig
    overrides: dict[str, object] = {}
    for flag in ("zookeeper", "output", "master", "whitelist", "log_level", "log_format"):
        value = getattr(args, flag)
        if value is not None:
            overrides[flag] = value
    overrides.update(parse_overrides(args.set))
    values = settings.read_toml(args.config).get("loader", {}) if args.config else {}
    return settings.build(LoaderConfig, settings.apply_overrides(values, overrides))


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        config = loader_config(args)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.print_config:
        sys.stdout.write("[loader]\n" + to_toml(config))
        return 0
    setup_logging(config.log_level, config.log_format)
    from hadoop_loader import job
    from hadoop_loader.outputfs import OutputError
    from hadoop_loader.plan import PlanError
    try:
        summary = job.load(config)
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
    for topic, hours in sorted(summary.rows.items()):
        for hour, n in sorted(hours.items()):
            lines.append(f"  {topic} {hour}: {n:,} rows")
    return "\n".join(lines)
