"""The load: plan, pull in Spark tasks, decode and write Parquet in the JVM,
publish, commit the offsets last.

1. Plan on the driver (plan.py) from the offsets committed with the output.
2. One Spark task per work unit pulls its range and stages framed Avro
   container files (pull.py) under ``<output>/_samsa/staging/<run>/``.
3. Per topic, Spark reads the staged files with the topic's latest reader
   schema (the JVM's Avro reader resolves every writer schema to it) and
   writes Parquet partitioned by event ``date`` and ``hour`` (from the
   header's time, UTC; a late event goes to its own hour) into the staging
   directory: at most ceil(staged bytes / target_file_bytes) files per hour
   per run (no shuffle), or exactly one (one_file_per_hour: a shuffle).
4. Publish: a manifest of every move and of the new offsets is written
   (``_samsa/publishing/<run>.json``), the files are moved into
   ``<output>/<topic>/date=D/hour=H/``, then the offsets are committed (the
   commit is last) and the manifest removed. A run killed before the
   manifest leaves nothing visible and its ranges are loaded again; a run
   killed during the moves is finished by the next run before it plans
   (the manifest says what is left to move), so every message lands once.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import sys
import shutil
import threading
import time
import uuid
from dataclasses import dataclass, field

from hadoop_loader import state
from hadoop_loader.config import LoaderConfig
from hadoop_loader.plan import Plan, plan
from hadoop_loader.pull import stage_units

log = logging.getLogger(__name__)

AVRO_FORMAT = "org.apache.spark.sql.avro.AvroFileFormat"


@dataclass
class LoadSummary:
    run: str
    units: int = 0
    messages: int = 0
    bytes: int = 0
    errors: int = 0
    rows: dict[str, dict[str, int]] = field(default_factory=dict)   # topic -> "date/hour" -> rows
    skipped: dict[str, tuple[int, int]] = field(default_factory=dict)
    seconds: float = 0.0
    recovered: int = 0               # moves finished for an interrupted earlier run
    audit_events: int = 0            # the hadoop tier's monitoring events published
    phases: dict[str, float] = field(default_factory=dict)   # seconds per phase


def spark_session(config: LoaderConfig):
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # the executors' Python workers run this interpreter (its packages), not
    # whatever python3 is first on the PATH
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    return (SparkSession.builder.master(config.master).appName(config.app_name)
            .config("spark.sql.session.timeZone", "UTC")
            .getOrCreate())


def _publishing_dir(root: str) -> str:
    return os.path.join(root, "_samsa", "publishing")


def finish_interrupted(root: str) -> int:
    """Finish the publish of a run killed during its moves; the moves done."""
    directory = _publishing_dir(root)
    if not os.path.isdir(directory):
        return 0
    done = 0
    for name in sorted(os.listdir(directory)):
        if not name.endswith(".json"):
            continue
        path = os.path.join(directory, name)
        with open(path) as f:
            manifest = json.load(f)
        done += _move_all(root, manifest["moves"])
        state.OffsetStore(root).commit(manifest["offsets"], run=manifest["run"],
                                       extra={"recovered": True})
        os.unlink(path)
        shutil.rmtree(os.path.join(root, "_samsa", "staging", manifest["run"]),
                      ignore_errors=True)
        log.warning("finished the publish of interrupted run %s (%d files moved now)",
                    manifest["run"], done)
    return done


def _move_all(root: str, moves: list[list[str]]) -> int:
    moved = 0
    for source, target in moves:
        src, dst = os.path.join(root, source), os.path.join(root, target)
        if os.path.exists(src):
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            os.replace(src, dst)
            moved += 1
    return moved


class LoadBusy(RuntimeError):
    """Another load of the same output did not finish in time."""


@contextlib.contextmanager
def output_lock(root: str, timeout_s: float):
    """One load at a time per output: an exclusive ``flock`` on
    ``<root>/_samsa/lock`` (released by the kernel when its holder dies, even
    by kill -9), waited for up to ``timeout_s``."""
    path = os.path.join(root, "_samsa", "lock")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + timeout_s
        waited = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    holder = os.pread(fd, 64, 0).decode(errors="replace").strip()
                    raise LoadBusy(f"another load of {root} is running (pid {holder or '?'}) "
                                   f"and did not finish in {timeout_s:g} s") from None
                if not waited:
                    log.warning("another load of %s is running; waiting up to %g s", root,
                                timeout_s)
                    waited = True
                time.sleep(0.2)
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        yield
    finally:
        os.close(fd)            # releases the lock


def load(config: LoaderConfig, spark=None) -> LoadSummary:
    """One load of everything new (one at a time per output); its summary."""
    root = config.output_dir
    os.makedirs(root, exist_ok=True)
    with output_lock(root, config.lock_timeout_s):
        return _load(config, root, spark)


def _load(config: LoaderConfig, root: str, spark) -> LoadSummary:
    t0 = time.monotonic()
    run = time.strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:8]
    summary = LoadSummary(run)
    summary.recovered = finish_interrupted(root)
    offsets = state.OffsetStore(root)
    mark = time.monotonic()
    work: Plan = plan(config.zookeeper, offsets.offsets(), whitelist=config.whitelist,
                      blacklist=config.blacklist, max_unit_bytes=config.max_unit_bytes,
                      on_retention_gap=config.on_retention_gap)
    summary.units, summary.skipped = len(work.units), dict(work.skipped)
    summary.phases["plan"] = time.monotonic() - mark
    for k, (a, b) in work.skipped.items():
        log.error("%s: %d bytes deleted by retention before they were loaded (offsets %d to "
                  "%d skipped; the audit shows the loss)", k, b - a, a, b)
    if not work.units:
        if work.ends and work.ends != offsets.offsets():
            offsets.commit(work.ends, run=run, extra={"rows": {}})
        summary.seconds = time.monotonic() - t0
        log.info("nothing new to load")
        return summary
    own_session = spark is None
    spark = spark or spark_session(config)
    staging = os.path.join(root, "_samsa", "staging", run)
    try:
        mark = time.monotonic()
        stats = _stage(spark, config, work, staging)
        summary.phases["pull_and_frame"] = time.monotonic() - mark
        for row in stats:
            summary.messages += row["messages"]
            summary.bytes += row["bytes"]
            summary.errors += row["errors"]
        log.info("run %s: %d messages (%d bytes) pulled by %d tasks, %d to the error output",
                 run, summary.messages, summary.bytes, len(work.units), summary.errors)
        mark = time.monotonic()
        summary.rows = _write_parquet(spark, config, staging)
        summary.phases["decode_and_write_parquet"] = time.monotonic() - mark
        mark = time.monotonic()
        moves = _plan_moves(root, staging, run)
        manifest_dir = _publishing_dir(root)
        os.makedirs(manifest_dir, exist_ok=True)
        manifest = os.path.join(manifest_dir, f"{run}.json")
        with open(manifest + ".tmp", "w") as f:
            json.dump({"run": run, "moves": moves, "offsets": work.ends}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(manifest + ".tmp", manifest)
        _move_all(root, moves)
        offsets.commit(work.ends, run=run, extra={"rows": summary.rows,
                                                  "errors": summary.errors})
        os.unlink(manifest)
        summary.phases["publish_and_commit"] = time.monotonic() - mark
        if config.audit:
            mark = time.monotonic()
            summary.audit_events = publish_counts(config, stats)
            summary.phases["audit_counts"] = time.monotonic() - mark
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        if own_session:
            spark.stop()
    summary.seconds = time.monotonic() - t0
    return summary


def _stage(spark, config: LoaderConfig, work: Plan, staging: str) -> list[dict]:
    registry, fetch, codec = config.effective_registry, config.fetch_bytes, config.staging_codec
    window = config.audit_window_ms if config.audit else None
    units = work.units
    sc = spark.sparkContext
    log.info("pulling %d work units (%d bytes) in Spark tasks; Spark UI: %s", len(units),
             work.total_bytes, sc.uiWebUrl or "off")
    group = f"samsa-load-{id(work)}"
    sc.setJobGroup(group, "samsa: pull work units")
    done = threading.Event()
    reporter = threading.Thread(target=_report_progress,
                                args=(sc, group, len(units), work.total_bytes, done,
                                      config.progress_interval_s), daemon=True)
    reporter.start()
    try:
        rdd = sc.parallelize(units, len(units))
        return rdd.mapPartitions(
            lambda part: stage_units(part, staging, registry, fetch, window, codec)).collect()
    finally:
        done.set()
        reporter.join(5)


def _report_progress(sc, group: str, units: int, total_bytes: int, done: threading.Event,
                     interval_s: float) -> None:
    """A progress line every ``interval_s`` while the tasks run: units done
    (tasks finished) of all, the bytes they cover (estimated), elapsed time."""
    t0 = time.monotonic()
    tracker = sc.statusTracker()
    while not done.wait(interval_s):
        finished = 0
        for job_id in tracker.getJobIdsForGroup(group):
            info = tracker.getJobInfo(job_id)
            for stage_id in (info.stageIds if info else ()):
                stage = tracker.getStageInfo(stage_id)
                if stage is not None:
                    finished += stage.numCompletedTasks
        elapsed = time.monotonic() - t0
        share = finished / units if units else 1.0
        log.info("progress: %d of %d work units pulled (~%.0f of %.0f MB, %.0f MB/s), %.0f s",
                 finished, units, share * total_bytes / 1e6, total_bytes / 1e6,
                 share * total_bytes / 1e6 / elapsed if elapsed else 0.0, elapsed)


def publish_counts(config: LoaderConfig, stats: list[dict]) -> int:
    """The hadoop tier's monitoring events, from the tasks' tallies of what
    was written, to the loaded cluster's audit topic; how many. A failure is
    logged, not raised: the data is published and committed already, and the
    audit shows the missing counts as a loss at this tier until a re-count."""
    from audit.counting import (CounterConfig, MonitoringPublisher, TierCounter,
                                monitoring_writer, producer_sender)
    from broker.client.cluster_producer import ClusterProducer
    counter = TierCounter(CounterConfig(tier="hadoop", cluster=config.cluster_name,
                                        datacenter=config.datacenter or config.cluster_name,
                                        window_ms=config.audit_window_ms,
                                        service=config.app_name))
    for row in stats:
        counter.merge(row["topic"], row["tallies"])
    try:
        registry, writer = monitoring_writer(config.effective_registry)
        producer = ClusterProducer(config.zookeeper, acks="flushed")
        try:
            publisher = MonitoringPublisher(counter, writer.encode, producer_sender(producer))
            publisher.close(timeout=30)
            return publisher.published
        finally:
            producer.close()
            registry.close()
    except Exception as exc:      # noqa: BLE001 - see the docstring
        log.error("the hadoop tier's counts could not be published: %s", exc)
        return 0


def _write_parquet(spark, config: LoaderConfig, staging: str) -> dict[str, dict[str, int]]:
    """Staged Avro -> staged Parquet per topic; rows per topic and date/hour."""
    from pyspark.sql import functions as F
    from schemas.registry import SchemaRegistry
    avro_root = os.path.join(staging, "avro")
    rows: dict[str, dict[str, int]] = {}
    if not os.path.isdir(avro_root):
        return rows
    with SchemaRegistry.open(config.effective_registry) as registry:
        for topic in sorted(os.listdir(avro_root)):
            mark = time.monotonic()
            reader = json.dumps(registry.get(topic).schema)
            df = spark.read.format(AVRO_FORMAT).option("avroSchema", reader) \
                .load(os.path.join(avro_root, topic))
            ts = (F.col("header.time_ms") / 1000).cast("timestamp")
            df = df.withColumn("date", F.date_format(ts, "yyyy-MM-dd")) \
                .withColumn("hour", F.date_format(ts, "HH"))
            target = os.path.join(staging, "parquet", topic)
            if config.one_file_per_hour:
                df = df.repartition("date", "hour")     # a shuffle: one writer per hour
            else:
                # no shuffle: each of at most ceil(staged bytes / target_file_bytes)
                # partitions writes the hours it holds, a writer per hour open
                # at once instead of a sort
                staged = _tree_bytes(os.path.join(avro_root, topic))
                df = df.coalesce(write_partitions(staged, config.target_file_bytes,
                                                  spark.sparkContext.defaultParallelism))
                spark.conf.set("spark.sql.maxConcurrentOutputFileWriters", "64")
            # a fresh directory of this run: no overwrite mode (a dynamic
            # partition overwrite stages and renames every file once more)
            df.write.partitionBy("date", "hour").parquet(target)
            written = time.monotonic()
            rows[topic] = _rows_per_hour(target)
            log.info("%s: Avro decoded and Parquet written in %.2f s, rows counted from the "
                     "footers in %.2f s", topic, written - mark, time.monotonic() - written)
    return rows


def write_partitions(staged_bytes: int, target_bytes: int, parallelism: int) -> int:
    """How many partitions write a topic's Parquet: ceil(staged / target),
    rounded up to a multiple of the executor cores when it is at least that
    many (whole waves: 3 tasks on 2 cores take as long as 4), so files per
    hour stay bounded by the bytes, not by the size of the cluster."""
    wanted = max(1, -(-staged_bytes // target_bytes))
    if parallelism > 1 and wanted >= parallelism:
        wanted = -(-wanted // parallelism) * parallelism
    return wanted


def _tree_bytes(directory: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(directory)
               for f in files)


def _rows_per_hour(directory: str) -> dict[str, int]:
    """Rows per "date/hour" of written Parquet, from the files' footers (no
    second pass over the data)."""
    import pyarrow.parquet as pq
    out: dict[str, int] = {}
    for dirpath, _dirs, files in os.walk(directory):
        parts = dict(p.split("=", 1) for p in os.path.relpath(dirpath, directory).split(os.sep)
                     if "=" in p)
        if "date" not in parts or "hour" not in parts:
            continue
        n = sum(pq.ParquetFile(os.path.join(dirpath, f)).metadata.num_rows
                for f in files if f.endswith(".parquet"))
        key = f"{parts['date']}/{parts['hour']}"
        out[key] = out.get(key, 0) + n
    return out


def _plan_moves(root: str, staging: str, run: str) -> list[list[str]]:
    """(staged path, final path), relative to the output root."""
    moves = []
    parquet = os.path.join(staging, "parquet")
    for topic in sorted(os.listdir(parquet)) if os.path.isdir(parquet) else []:
        base = os.path.join(parquet, topic)
        for dirpath, _dirs, files in os.walk(base):
            for i, name in enumerate(sorted(f for f in files if f.endswith(".parquet"))):
                relative = os.path.relpath(dirpath, base)      # date=D/hour=H
                target = os.path.join(topic, relative, f"part-{run}-{i:05d}.parquet")
                moves.append([os.path.relpath(os.path.join(dirpath, name), root), target])
    errors = os.path.join(staging, "errors")
    for topic in sorted(os.listdir(errors)) if os.path.isdir(errors) else []:
        for name in sorted(os.listdir(os.path.join(errors, topic))):
            moves.append([os.path.relpath(os.path.join(errors, topic, name), root),
                          os.path.join("_errors", topic, f"{run}-{name}")])
    return moves
