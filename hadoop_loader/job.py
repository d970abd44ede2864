"""The load: plan, pull in Spark tasks, decode and write Parquet in the JVM,
publish, commit the offsets last.

1. Plan on the driver (plan.py) from the offsets committed with the output.
2. One Spark task per work unit pulls its range and stages framed Avro
   container files (pull.py) under ``<staging>/_samsa/staging/<run>/``: the
   staging is the output itself (local, HDFS), or, for an S3 output, the
   local ``staging_dir`` (``staging_fs``), so no Hadoop S3 connector is
   needed.
3. Per topic, Spark reads the staged files with the topic's latest reader
   schema (the JVM's Avro reader resolves every writer schema to it) and
   writes Parquet partitioned by event ``date`` and ``hour`` (from the
   header's time, UTC; a late event goes to its own hour) into the staging
   directory: at most ceil(staged bytes / target_file_bytes) files per hour
   per run (no shuffle), or exactly one (one_file_per_hour: a shuffle).
4. Publish: a manifest of every move and of the new offsets is written
   (``_samsa/publishing/<run>.json``), the files are moved into
   ``<output>/<topic>/date=D/hour=H/`` (uploaded, from a staging apart),
   then the offsets are committed (the commit is last) and the manifest
   removed. A run killed before the manifest leaves nothing visible and its
   ranges are loaded again; a run killed during the moves is finished by the
   next run before it plans (the manifest says what is left to move), so
   every message lands once. A staging apart may be lost with what it held
   (a new machine, a cleaned temp dir): then the next run takes back what
   the killed run published and does not commit its offsets, so its ranges
   are loaded again, each message still once.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import posixpath
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field

from hadoop_loader import state
from hadoop_loader.config import LoaderConfig
from hadoop_loader.outputfs import OutputError, OutputFS
from hadoop_loader.plan import Plan, RetentionCut, WorkUnit, plan, plan_ranges
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
    reloaded: dict[str, int] = field(default_factory=dict)   # reload: topic -> rows rebuilt


def spark_session(config: LoaderConfig):
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # the executors' Python workers run this interpreter (its packages), not
    # whatever python3 is first on the PATH
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    return (SparkSession.builder.master(config.master).appName(config.app_name)
            .config("spark.sql.session.timeZone", "UTC")
            .getOrCreate())


PUBLISHING = "_samsa/publishing"
STAGING = "_samsa/staging"
REPLACED = "_samsa/replaced"


class ReloadError(RuntimeError):
    """An hour cannot be rebuilt (part of it has left the brokers'
    retention, no load recorded where its rows came from, or the rebuild
    found fewer rows than the output holds): none of its partitions was
    changed."""


def staging_fs(config: LoaderConfig, out: OutputFS) -> OutputFS:
    """Where the runs of ``out`` stage: the output itself, whose moves are
    renames (local, HDFS), or for S3 the local ``staging_dir``, from which
    the publish uploads (Spark then reads and writes local files only)."""
    if out.kind != "s3":
        return out
    import tempfile
    if not config.staging_dir and not config.master.startswith("local"):
        raise OutputError(f"output {out.output}: an S3 output stages in staging_dir, which the "
                          f"driver and every executor must reach; with master "
                          f"{config.master!r} set staging_dir to a directory they share")
    directory = config.staging_dir or os.path.join(tempfile.gettempdir(),
                                                   "samsa-loader-staging")
    stage = OutputFS(directory)
    stage.makedirs()
    return stage


def finish_interrupted(out: OutputFS, still_loadable=None) -> int:
    """Finish the publish of a run killed during its moves (its staged files
    where its manifest says: the output, or a staging apart); the moves
    done. A run whose staged files are gone or cut short (a staging apart,
    lost with its machine) is taken back instead: what it published is
    deleted and its offsets are not committed, so its ranges load again;
    unless ``still_loadable(manifest)`` says the brokers no longer hold them
    (OutputError: nothing is changed, an operator decides)."""
    done = 0
    for name in out.listdir(PUBLISHING):
        if not name.endswith(".json"):
            continue
        manifest = json.loads(out.read_text(PUBLISHING, name))
        run, moves = manifest["run"], manifest["moves"]
        stage = OutputFS(manifest["staging"]) if manifest.get("staging", out.output) \
            != out.output else out
        sizes = manifest.get("sizes", {})
        lost = [source for source, target in moves if not out.exists(target) and (
            not stage.exists(source) or
            (source in sizes and stage.size(source) != sizes[source]))]
        if lost and still_loadable is not None and not still_loadable(manifest):
            raise OutputError(f"interrupted run {run} can neither be finished ({len(lost)} of "
                              f"its staged files are gone from {stage.output}) nor loaded again "
                              f"(its ranges have left the brokers' retention): its manifest "
                              f"{out.path(PUBLISHING, name)} and published files are left as "
                              f"they are for an operator")
        if lost:
            taken_back = 0
            for _source, target in moves:
                if out.exists(target):
                    out.delete_file(target)
                    taken_back += 1
            out.delete_file(PUBLISHING, name)
            stage.delete_dir(STAGING, run)
            log.error("interrupted run %s cannot be finished: %d of its staged files are "
                      "gone from %s (%s...); the %d files it published were deleted and its "
                      "offsets not committed: its ranges load again", run, len(lost),
                      stage.output, lost[0], taken_back)
            continue
        moved = _publish(stage, out, moves)
        done += moved
        state.HourRanges(out).add(manifest.get("hours", {}))
        state.OffsetStore(out).commit(manifest["offsets"], run=run, extra={"recovered": True})
        out.delete_file(PUBLISHING, name)
        stage.delete_dir(STAGING, run)
        log.warning("finished the publish of interrupted run %s (%d files moved now)", run,
                    moved)
    return done


def _publish(stage: OutputFS, out: OutputFS, moves: list[list[str]]) -> int:
    """Each staged file to its place (renamed, or uploaded from a staging
    apart); how many were still staged."""
    if stage is out:
        return sum(1 for source, target in moves if out.move(source, target))
    return sum(1 for source, target in moves if out.upload(stage, source, target))


class LoadBusy(RuntimeError):
    """Another load of the same output did not finish in time."""


@contextlib.contextmanager
def output_lock(out: OutputFS | str, timeout_s: float):
    """One load at a time per output: an exclusive ``flock`` on
    ``<root>/_samsa/lock`` (released by the kernel when its holder dies, even
    by kill -9), waited for up to ``timeout_s``. Only a local output can be
    locked so; on HDFS and S3 one load at a time comes from the scheduler
    (warehouse_load runs one DAG run at a time)."""
    out = out if isinstance(out, OutputFS) else OutputFS(out)
    root = out.root
    if out.kind != "local":
        log.info("%s: no lock on a %s output (one load at a time is the scheduler's)",
                 out.output, out.kind)
        yield
        return
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


def load(config: LoaderConfig, spark=None, reload_hour_ms: int | None = None) -> LoadSummary:
    """One load of everything new (one at a time per output), then, with
    ``reload_hour_ms``, the rebuild of that hour (ReloadError when it cannot
    be rebuilt; the load before it stays committed); its summary."""
    out = OutputFS(config.output)
    out.makedirs()
    session = _Session(config, spark)
    with output_lock(out, config.lock_timeout_s):
        try:
            summary = _load(config, out, session)
            if reload_hour_ms is not None:
                mark = time.monotonic()
                _rebuild(config, out, session, reload_hour_ms, summary)
                summary.phases["reload"] = time.monotonic() - mark
                summary.seconds += summary.phases["reload"]
        finally:
            session.stop()
        return summary


class _Session:
    """The Spark session of one load: the caller's, or one started when
    first needed (a load with nothing new, a reload refused, start none)
    and stopped at the end."""

    def __init__(self, config: LoaderConfig, spark=None) -> None:
        self.config, self.spark, self.own = config, spark, False

    def get(self):
        if self.spark is None:
            self.spark, self.own = spark_session(self.config), True
        return self.spark

    def stop(self) -> None:
        if self.own:
            self.spark.stop()
            self.spark, self.own = None, False


def _load(config: LoaderConfig, out: OutputFS, session: _Session) -> LoadSummary:
    t0 = time.monotonic()
    run = time.strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:8]
    summary = LoadSummary(run)
    stage = staging_fs(config, out)
    summary.recovered = finish_interrupted(out, lambda m: _still_loadable(config, m))
    _prune_replaced(out, config.keep_replaced_s)
    offsets = state.OffsetStore(out)
    mark = time.monotonic()
    work: Plan = plan(config.zookeeper, offsets.offsets(), whitelist=config.whitelist,
                      blacklist=config.blacklist, max_unit_bytes=config.max_unit_bytes,
                      on_retention_gap=config.on_retention_gap,
                      credentials=config.credentials)
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
    spark = session.get()
    staging = f"{STAGING}/{run}"
    manifest_written = False
    try:
        mark = time.monotonic()
        stats = _stage(spark, config, work, stage, staging)
        summary.phases["pull_and_frame"] = time.monotonic() - mark
        for row in stats:
            summary.messages += row["messages"]
            summary.bytes += row["bytes"]
            summary.errors += row["errors"]
        log.info("run %s: %d messages (%d bytes) pulled by %d tasks, %d to the error output",
                 run, summary.messages, summary.bytes, len(work.units), summary.errors)
        mark = time.monotonic()
        summary.rows = _write_parquet(spark, config, stage, staging)
        summary.phases["decode_and_write_parquet"] = time.monotonic() - mark
        mark = time.monotonic()
        moves = _plan_moves(stage, staging, run)
        hours = hour_ranges(work.units, summary.rows)
        manifest = {"run": run, "moves": moves, "offsets": work.ends, "hours": hours,
                    "staging": stage.output}
        if stage is not out:
            _check_staged_apart(stage, summary)
            # the staged files on disk before the manifest says they are
            # there; their sizes, so that one cut short by a crash is seen
            os.sync()
            manifest["sizes"] = {source: stage.size(source) for source, _ in moves}
        out.write_json((PUBLISHING, f"{run}.json"), manifest)
        manifest_written = True
        _publish(stage, out, moves)
        state.HourRanges(out).add(hours)
        offsets.commit(work.ends, run=run, extra={"rows": summary.rows,
                                                  "errors": summary.errors})
        out.delete_file(PUBLISHING, f"{run}.json")
        manifest_written = False
        summary.phases["publish_and_commit"] = time.monotonic() - mark
        if config.audit:
            mark = time.monotonic()
            summary.audit_events = publish_counts(config, stats)
            summary.phases["audit_counts"] = time.monotonic() - mark
    finally:
        if not manifest_written:
            # a publish under way (an error, a timeout, a signal after its
            # manifest) keeps what is staged: the next run finishes it
            stage.delete_dir(staging)
    summary.seconds = time.monotonic() - t0
    return summary


def _check_staged_apart(stage: OutputFS, summary: LoadSummary) -> None:
    """Before publishing from a staging apart: the driver sees a row for
    every message the tasks staged (a staging_dir the executors wrote but
    the driver does not reach would publish nothing and commit)."""
    rows = sum(n for per_hour in summary.rows.values() for n in per_hour.values())
    if rows != summary.messages - summary.errors:
        raise OutputError(f"the driver finds {rows} rows in {stage.output} where the tasks "
                          f"staged {summary.messages - summary.errors} messages: staging_dir "
                          f"must be a directory the driver and every executor reach; nothing "
                          f"was published or committed")


def _still_loadable(config: LoaderConfig, manifest: dict) -> bool:
    """Whether the brokers still hold every range an interrupted run read."""
    spans: dict[str, list[int]] = {}
    for per_key in manifest.get("hours", {}).values():
        for key, (start, end) in per_key.items():
            span = spans.setdefault(key, [start, end])
            span[0], span[1] = min(span[0], start), max(span[1], end)
    if not spans:
        return True
    try:
        plan_ranges(config.zookeeper, {k: [v] for k, v in spans.items()},
                    max_unit_bytes=config.max_unit_bytes, credentials=config.credentials)
    except RetentionCut:
        return False
    return True


def hour_ranges(units: list[WorkUnit],
                rows: dict[str, dict[str, int]]) -> dict[str, dict[str, list[int]]]:
    """What a run adds to the hour records: for every hour it wrote rows of
    a topic into, the range [start, end) it read of each of the topic's
    broker-partitions (state.py says why whole ranges)."""
    spans: dict[str, dict[str, list[int]]] = {}
    for u in units:
        span = spans.setdefault(u.topic, {}).setdefault(u.key, [u.start, u.end])
        span[0], span[1] = min(span[0], u.start), max(span[1], u.end)
    hours: dict[str, dict[str, list[int]]] = {}
    for topic, per_hour in rows.items():
        for hour, n in per_hour.items():
            if n:
                hours.setdefault(hour, {}).update(spans.get(topic, {}))
    return hours


def _prune_replaced(out: OutputFS, keep_s: float) -> None:
    """Delete the directories reloads replaced more than ``keep_s`` ago."""
    now = time.time()
    for name in out.listdir(REPLACED):
        if now - out.modified_s(REPLACED, name) > keep_s:
            out.delete_dir(REPLACED, name)


def _rebuild(config: LoaderConfig, out: OutputFS, session: _Session, hour_ms: int,
             summary: LoadSummary) -> None:
    """Rebuild hour ``hour_ms`` of every topic from its recorded ranges and
    swap it in (the module's docstring); ReloadError before any change when
    it cannot be done."""
    hour = state.hour_id(hour_ms)
    if out.kind != "local":
        raise ReloadError(f"hour {hour} cannot be rebuilt on a {out.kind} output: replacing "
                          f"its partitions at once needs a local file system (outputfs.py)")
    ranges = state.HourRanges(out).get(hour) or {}
    recorded = {state.parse_key(k)[0] for k in ranges}
    unrecorded = [t for t in out.listdir() if not t.startswith("_") and t not in recorded
                  and out.exists(state.hour_partition(t, hour_ms))]
    if unrecorded:
        raise ReloadError(f"hour {hour}: {', '.join(unrecorded)} hold rows of the hour, but no "
                          f"load recorded the offsets they came from (loaded before the "
                          f"loader kept hour records): it cannot be rebuilt; its partitions "
                          f"are left as they are")
    if not ranges:
        log.info("hour %s: no load wrote rows of it; nothing to rebuild", hour)
        return
    try:
        work = plan_ranges(config.zookeeper, ranges, max_unit_bytes=config.max_unit_bytes,
                           credentials=config.credentials)
    except RetentionCut as exc:
        raise ReloadError(f"hour {hour} cannot be rebuilt: part of it has left the brokers' "
                          f"retention: {exc}; its partitions are left as they are") from None
    run = f"{summary.run}-reload"
    staging = f"{STAGING}/{run}"
    topics = sorted({u.topic for u in work.units})
    log.info("hour %s: rebuilding %s from %d work units (%d bytes)", hour, ", ".join(topics),
             len(work.units), work.total_bytes)
    spark = session.get()
    try:
        _stage(spark, config, work, out, staging, count=False)
        rows = _write_parquet(spark, config, out, staging, hour_ms=hour_ms)
        partitions = {t: state.hour_partition(t, hour_ms) for t in topics}
        for topic, partition in partitions.items():      # every check before any swap
            now_held = sum(out.parquet_rows(p) for p, _ in out.files(partition)
                           if p.endswith(".parquet"))
            rebuilt = rows.get(topic, {}).get(hour, 0)
            if rebuilt < now_held:
                raise ReloadError(f"hour {hour}: the rebuild of {topic} found {rebuilt} rows "
                                  f"where its partition holds {now_held}: its partitions are "
                                  f"left as they are")
        for topic, partition in partitions.items():
            swap = f"{staging}/swap/{partition}"
            files = [p for p, _ in out.files(staging, "parquet", topic)
                     if p.endswith(".parquet") and _hour_of(p) == hour]
            for i, path in enumerate(files):
                out.move(path, f"{swap}/part-{run}-{i:05d}.parquet")
            if not files:
                continue
            if out.swap_dir(swap, partition, f"{REPLACED}/{run}/{partition}"):
                log.info("%s: replaced by %d rows in %d files (the old files are under %s)",
                         partition, rows[topic][hour], len(files), out.path(REPLACED, run))
            summary.reloaded[topic] = rows[topic][hour]
    finally:
        out.delete_dir(staging)


def _stage(spark, config: LoaderConfig, work: Plan, stage: OutputFS, staging: str,
           count: bool = True) -> list[dict]:
    """Pull ``work`` in Spark tasks into ``staging`` (on ``stage``); the
    tasks' stats (with the audit's tallies when ``count`` and the audit is
    on)."""
    registry, fetch, codec = config.effective_registry, config.fetch_bytes, config.staging_codec
    credentials = config.credentials
    window = config.audit_window_ms if config.audit and count else None
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
        output = stage.output
        return rdd.mapPartitions(
            lambda part: stage_units(part, output, staging, registry, fetch, window, codec,
                                     credentials)
        ).collect()
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
                                        service=config.app_name, dedup_ids=True))
    for row in stats:      # first sightings over every task of the run: exact duplicates
        counter.merge(row["topic"], row["tallies"], ids=row.get("ids"))
    try:
        registry, writer = monitoring_writer(
            config.effective_registry, config.credentials.zookeeper_tls_settings().kazoo_options())
        producer = ClusterProducer(config.zookeeper, acks="all",
                                   zookeeper_tls=config.credentials.zookeeper_tls_settings(),
                                   **config.credentials.client_settings())
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


def _write_parquet(spark, config: LoaderConfig, out: OutputFS, staging: str,
                   hour_ms: int | None = None) -> dict[str, dict[str, int]]:
    """Staged Avro -> staged Parquet per topic, both under ``staging`` on
    ``out`` (the staging's file system; only the rows of the hour starting
    at ``hour_ms`` when given); rows per topic and date/hour."""
    from pyspark.sql import functions as F
    from schemas.registry import SchemaRegistry
    avro_root = f"{staging}/avro"
    rows: dict[str, dict[str, int]] = {}
    topics = out.listdir(avro_root)
    if not topics:
        return rows
    with SchemaRegistry.open(config.effective_registry, zookeeper_tls=config.credentials
                             .zookeeper_tls_settings().kazoo_options()) as registry:
        for topic in topics:
            reader = json.dumps(registry.get(topic).schema)
            df = spark.read.format(AVRO_FORMAT).option("avroSchema", reader) \
                .load(out.spark_uri(avro_root, topic))
            if hour_ms is not None:
                df = df.filter((F.col("header.time_ms") >= hour_ms)
                               & (F.col("header.time_ms") < hour_ms + 3_600_000))
            ts = (F.col("header.time_ms") / 1000).cast("timestamp")
            df = df.withColumn("date", F.date_format(ts, "yyyy-MM-dd")) \
                .withColumn("hour", F.date_format(ts, "HH"))
            target = f"{staging}/parquet/{topic}"
            if config.one_file_per_hour:
                df = df.repartition("date", "hour")     # a shuffle: one writer per hour
            else:
                # no shuffle: each of at most ceil(staged bytes / target_file_bytes)
                # partitions writes the hours it holds, a writer per hour open
                # at once instead of a sort
                staged = sum(size for _, size in out.files(avro_root, topic))
                df = df.coalesce(write_partitions(staged, config.target_file_bytes,
                                                  spark.sparkContext.defaultParallelism))
                spark.conf.set("spark.sql.maxConcurrentOutputFileWriters", "64")
            # a fresh directory of this run: no overwrite mode (a dynamic
            # partition overwrite stages and renames every file once more)
            df.write.partitionBy("date", "hour").parquet(out.spark_uri(target))
            rows[topic] = _rows_per_hour(out, target)
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


def _hour_of(path: str) -> str | None:
    """"date/hour" of a path with date=D/hour=H parts, else None."""
    parts = dict(p.split("=", 1) for p in path.split("/") if "=" in p)
    if "date" in parts and "hour" in parts:
        return f"{parts['date']}/{parts['hour']}"
    return None


def _rows_per_hour(out: OutputFS, directory: str) -> dict[str, int]:
    """Rows per "date/hour" of written Parquet, from the files' footers (no
    second pass over the data)."""
    rows: dict[str, int] = {}
    for path, _size in out.files(directory):
        key = _hour_of(path)
        if key is not None and path.endswith(".parquet"):
            rows[key] = rows.get(key, 0) + out.parquet_rows(path)
    return rows


def _plan_moves(out: OutputFS, staging: str, run: str) -> list[list[str]]:
    """(staged path, relative to the staging's root on ``out``; final path,
    relative to the output's root)."""
    moves = []
    parquet = f"{staging}/parquet"
    for topic in out.listdir(parquet):
        per_directory: dict[str, int] = {}
        for path, _size in out.files(parquet, topic):
            if not path.endswith(".parquet") or _hour_of(path) is None:
                continue
            directory = posixpath.dirname(posixpath.relpath(path, f"{parquet}/{topic}"))
            i = per_directory.get(directory, 0)
            per_directory[directory] = i + 1
            moves.append([path, f"{topic}/{directory}/part-{run}-{i:05d}.parquet"])
    errors = f"{staging}/errors"
    for topic in out.listdir(errors):
        for name in out.listdir(errors, topic):
            moves.append([f"{errors}/{topic}/{name}", f"_errors/{topic}/{run}-{name}"])
    return moves
