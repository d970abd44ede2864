"""The loader's S3 output (hadoop_loader/outputfs.py) against a real S3
server, Ceph's RADOS gateway on a one-node Ceph (infra/local/ceph_s3.py;
make setup installs Debian's packages), addressed as an output URI gives it
(``s3://bucket/path?endpoint_override=host:port&scheme=http``), credentials
from the environment as on AWS.

What is shown on S3: every file operation the loader's driver makes, the
offsets committed with the output, and the publish of a run killed half-way
through its moves finished by the next run (``finish_interrupted``): every
file once at its place, the offsets committed once, nothing left staged.
And whole loads by Spark (local mode, real brokers): Spark stages in a local
directory (``staging_dir``) and the publish uploads, so no Hadoop S3
connector is needed; a load killed during its uploads is finished by the
next; and when the killed run's staging is lost too, the next run takes its
uploads back and loads its ranges again: every row once, each time."""
from __future__ import annotations

import json

import pytest

from hadoop_loader import job, state
from hadoop_loader.config import LoaderConfig
from hadoop_loader.outputfs import OutputError, OutputFS
from infra.local.ceph_s3 import CephS3
from loader_helpers import HOUR, produce, rows_per_hour

BUCKET = "samsa-warehouse"


@pytest.fixture
def s3(tmp_path, monkeypatch):
    """The server, and the environment an S3 client reads (its keys)."""
    with CephS3().start(tmp_path / "ceph") as server:
        for name, value in server.aws_env().items():
            monkeypatch.setenv(name, value)
        import pyarrow.fs as pafs
        pafs.S3FileSystem(**server.pyarrow_options()).create_dir(BUCKET)   # as Terraform does
        yield server


def output(server, path: str = "warehouse") -> OutputFS:
    return OutputFS(f"s3a://{BUCKET}/{path}?endpoint_override={server.endpoint}&scheme=http")


def test_the_drivers_file_operations_on_s3(s3):
    out = output(s3)
    assert out.kind == "s3" and not out.atomic_rename
    assert out.spark_uri("page_views") == f"s3a://{BUCKET}/warehouse/page_views"
    out.write_json(("_samsa", "a.json"), {"x": 1})
    assert json.loads(out.read_text("_samsa", "a.json")) == {"x": 1}
    out.write_text(("_samsa", "a.json"), '{"x": 2}')          # replaced whole (one PUT)
    assert json.loads(out.read_text("_samsa", "a.json")) == {"x": 2}
    assert out.create_new(("_samsa", "claim"), "first")
    assert not out.create_new(("_samsa", "claim"), "second")
    assert out.read_text("_samsa", "claim") == "first"
    assert out.listdir("_samsa") == ["a.json", "claim"]
    assert out.listdir("nothing-here") == []
    assert out.is_dir("_samsa") and not out.is_dir("_samsa", "claim")

    import pyarrow as pa
    import pyarrow.parquet as pq
    table = pa.table({"offset": pa.array(range(1000), pa.int64())})
    with out.open_output("staged", "p.parquet") as f:
        pq.write_table(table, f)
    assert out.parquet_rows("staged", "p.parquet") == 1000
    assert out.move("staged/p.parquet", "page_views/date=2026-11-29/hour=03/p.parquet")
    assert not out.move("staged/p.parquet", "page_views/date=2026-11-29/hour=03/p.parquet")
    assert [p for p, _ in out.files("page_views")] == \
        ["page_views/date=2026-11-29/hour=03/p.parquet"]
    assert not out.exists("staged", "p.parquet")
    out.delete_dir("page_views")
    assert not out.exists("page_views")
    with pytest.raises(OutputError, match="replacing a directory at once needs a local output"):
        out.swap_dir("a", "b", "c")


def test_a_publish_killed_half_way_is_finished_by_the_next_run_on_s3(s3):
    out = output(s3)
    offsets = state.OffsetStore(out)
    offsets.commit({"page_views/0-0": 100}, run="earlier")
    # a run staged four Parquet files, wrote its manifest and moved two of
    # them, then was killed: two files visible, two staged, no commit
    run = "20261129T040000-0123abcd"
    staging = f"{job.STAGING}/{run}/parquet/page_views"
    moves = []
    for hour in range(4):
        staged = f"{staging}/date=2026-11-29/hour={hour:02d}/part-0.parquet"
        out.write_text(tuple(staged.split("/")), f"rows of hour {hour}")
        moves.append([staged, f"page_views/date=2026-11-29/hour={hour:02d}/"
                              f"part-{run}-00000.parquet"])
    out.write_json((job.PUBLISHING, f"{run}.json"),
                   {"run": run, "moves": moves, "offsets": {"page_views/0-0": 250},
                    "hours": {}})
    for source, target in moves[:2]:
        assert out.move(source, target)
    assert offsets.offsets() == {"page_views/0-0": 100}

    assert job.finish_interrupted(out) == 2                  # the two left
    published = [p for p, _ in out.files("page_views")]
    assert published == [target for _, target in moves]
    for hour, (_, target) in enumerate(moves):
        assert out.read_text(*target.split("/")) == f"rows of hour {hour}"
    assert offsets.offsets() == {"page_views/0-0": 250}
    latest = offsets.latest()
    assert latest.run == run and latest.extra == {"recovered": True}
    assert out.listdir(job.PUBLISHING) == [] and not out.exists(job.STAGING, run)
    # finished once: the next run finds nothing to finish, commits nothing more
    assert job.finish_interrupted(out) == 0
    assert offsets.latest().sequence == latest.sequence


def test_an_s3_output_names_only_the_settings_it_knows(s3):
    with pytest.raises(OutputError, match="unknown S3 setting 'endpoint'"):
        OutputFS(f"s3://{BUCKET}/warehouse?endpoint={s3.endpoint}")
    with pytest.raises(OutputError, match="scheme must be http or https"):
        OutputFS(f"s3://{BUCKET}/warehouse?endpoint_override={s3.endpoint}&scheme=ftp")


def s3_rows(out: OutputFS) -> list[dict]:
    """The rows of page_views in an S3 output, read from S3."""
    import pyarrow.dataset as ds
    if not out.exists("page_views"):
        return []
    return ds.dataset(out.path("page_views"), filesystem=out.fs,
                      partitioning="hive").to_table().to_pylist()


def s3_config(s3, cluster, tmp_path) -> LoaderConfig:
    return LoaderConfig(
        zookeeper=cluster.connect, whitelist="page_views", audit=False,
        output=f"s3a://{BUCKET}/wh?endpoint_override={s3.endpoint}&scheme=http",
        staging_dir=str(tmp_path / "staging"))


def test_a_load_to_s3_lands_every_row_once(s3, analysis, spark, tmp_path):
    cluster, registry = analysis
    base = 1_800_000_000_000 - 1_800_000_000_000 % HOUR
    want = produce(cluster, registry, 120, base)
    config = s3_config(s3, cluster, tmp_path)
    first = job.load(config, spark)
    out = output(s3, "wh")
    assert first.messages == 120 and rows_per_hour(s3_rows(out)) == want
    assert state.OffsetStore(out).latest() is not None            # committed on S3
    assert job.load(config, spark).units == 0                     # nothing new: nothing added
    assert rows_per_hour(s3_rows(out)) == want
    # staged locally, uploaded, nothing left behind on either side
    assert not out.exists(job.STAGING) or out.listdir(job.STAGING) == []
    assert OutputFS(config.staging_dir).listdir(job.STAGING) == []


@pytest.mark.parametrize("staging", ["kept", "lost"])
def test_a_load_killed_during_its_uploads_lands_every_row_once(s3, analysis, spark, tmp_path,
                                                              monkeypatch, staging):
    cluster, registry = analysis
    base = 1_800_000_000_000 - 1_800_000_000_000 % HOUR
    want = produce(cluster, registry, 90, base)
    config = s3_config(s3, cluster, tmp_path)
    real_upload = OutputFS.upload
    uploaded = []

    def dying_upload(self, source_fs, source, target):
        if source.endswith(".parquet"):
            if uploaded:
                raise KeyboardInterrupt("killed during the publish")
            uploaded.append(target)
        return real_upload(self, source_fs, source, target)

    with monkeypatch.context() as patched:     # (the s3 fixture's environment stays)
        patched.setattr(OutputFS, "upload", dying_upload)
        with pytest.raises(KeyboardInterrupt):  # (a signal, a timeout: the staging is kept)
            job.load(config, spark)
    out = output(s3, "wh")
    assert state.OffsetStore(out).latest() is None                   # not committed
    assert 0 < len(s3_rows(out)) < 90                                 # partly visible
    if staging == "lost":                 # the machine replaced, its temp dir gone
        import shutil
        shutil.rmtree(config.staging_dir)
    again = job.load(config, spark)
    if staging == "kept":
        assert again.recovered >= 1 and again.units == 0              # finished, not reloaded
    else:
        assert again.recovered == 0 and again.units >= 1              # taken back, reloaded
    assert rows_per_hour(s3_rows(out)) == want
    assert out.listdir(job.PUBLISHING) == []


def test_a_staging_dir_the_driver_does_not_see_publishes_and_commits_nothing(
        s3, analysis, spark, tmp_path, monkeypatch):
    """Spark's tasks staged where the driver does not look (a staging_dir
    that is not shared): the load fails before its manifest, commits
    nothing, and the next load (staging where both see it) lands every row."""
    cluster, registry = analysis
    base = 1_800_000_000_000 - 1_800_000_000_000 % HOUR
    want = produce(cluster, registry, 60, base)
    config = s3_config(s3, cluster, tmp_path)
    with monkeypatch.context() as patched:
        patched.setattr(job, "_write_parquet", lambda *a, **k: {})   # the driver sees nothing
        with pytest.raises(OutputError, match="must be a directory the driver and every "
                                              "executor reach"):
            job.load(config, spark)
    out = output(s3, "wh")
    assert state.OffsetStore(out).latest() is None and s3_rows(out) == []
    assert job.load(config, spark).messages == 60
    assert rows_per_hour(s3_rows(out)) == want


def test_an_s3_output_with_a_cluster_master_needs_its_staging_dir_named(s3, tmp_path):
    config = LoaderConfig(zookeeper="127.0.0.1:1", master="spark://spark-master:7077",
                          output=f"s3a://{BUCKET}/wh?endpoint_override={s3.endpoint}"
                                 f"&scheme=http")
    with pytest.raises(OutputError, match="set staging_dir to a directory they share"):
        job.staging_fs(config, output(s3, "wh"))


def test_a_run_whose_staging_is_lost_and_whose_ranges_are_gone_is_left_for_an_operator(tmp_path):
    """Its staged files gone and, by the brokers' word (still_loadable),
    its ranges no longer held: taking it back would lose what it published
    for good, so nothing is changed and the load fails saying so."""
    out = OutputFS(str(tmp_path / "wh"))
    run = "20261129T050000-0123abcd"
    moves = [[f"{job.STAGING}/{run}/parquet/page_views/date=2026-11-29/hour={h:02d}/p.parquet",
              f"page_views/date=2026-11-29/hour={h:02d}/part-{run}-00000.parquet"]
             for h in range(2)]
    out.write_text(tuple(moves[0][1].split("/")), "published before the kill")
    out.write_json((job.PUBLISHING, f"{run}.json"),
                   {"run": run, "moves": moves, "offsets": {"page_views/0-0": 250},
                    "hours": {"2026-11-29/00": {"page_views/0-0": [0, 250]}}})
    asked = []
    with pytest.raises(OutputError, match="can neither be finished .* nor loaded again"):
        job.finish_interrupted(out, lambda manifest: asked.append(manifest["run"]) or False)
    assert asked == [run]
    assert out.listdir(job.PUBLISHING) == [f"{run}.json"]
    assert out.read_text(*moves[0][1].split("/")) == "published before the kill"
    assert state.OffsetStore(out).latest() is None
    # the brokers still hold the ranges: taken back, nothing committed
    assert job.finish_interrupted(out, lambda manifest: True) == 0
    assert not out.exists(moves[0][1]) and out.listdir(job.PUBLISHING) == []
    assert state.OffsetStore(out).latest() is None
