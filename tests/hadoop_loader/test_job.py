"""The load, with real brokers, ZooKeeper, the schema registry and Spark
(local): rows per topic and event hour exactly as produced, v1 rows with v2's
default, a re-run adds nothing, bad values go to the error output, and a run
interrupted during its publish is finished by the next one (exactly once)."""
from __future__ import annotations

import os

import fastavro
import pytest

from hadoop_loader import job
from hadoop_loader.config import LoaderConfig
from hadoop_loader.state import OffsetStore
from loader_helpers import HOUR, produce, read_rows, rows_per_hour


def test_load_exactly_once_with_errors(analysis, spark, tmp_path, caplog):
    cluster, registry = analysis
    base = 1_800_000_000_000 - 1_800_000_000_000 % HOUR
    bad = [b"not an envelope", b"\x00\xde\xad\xbe\xef" + b"\x02" * 30]   # unknown schema id
    want = produce(cluster, registry, 300, base, bad)
    config = LoaderConfig(zookeeper=cluster.connect, output=f"file://{tmp_path / 'wh'}",
                          whitelist="page_views", max_unit_bytes=4096,
                          progress_interval_s=0.05)
    import logging
    with caplog.at_level(logging.INFO, logger="hadoop_loader.job"):
        first = job.load(config, spark)
    assert "Spark UI" in caplog.text and "progress:" in caplog.text
    assert first.messages == 302 and first.errors == 2
    rows = read_rows(config.output_dir)
    assert rows_per_hour(rows) == want
    assert sum(first.rows["page_views"].values()) == 300
    assert sum(1 for r in rows if r["session_id"] == "") == 150       # v1 rows: the default
    # files per hour bounded by the staged bytes (a few KB here: one), not by
    # the work units (each task stages files of its own)
    assert first.units >= 2
    hour_dirs = [d for d, _, files in os.walk(config.output_dir)
                 if os.path.basename(d).startswith("hour=")]
    assert len(hour_dirs) == 3
    assert all(len([f for f in os.listdir(d) if f.endswith(".parquet")]) == 1
               for d in hour_dirs)
    # the hadoop tier's counts: what was written, not the errors
    assert first.audit_events > 0
    from audit.counting import AUDIT_TOPIC
    from cluster_helpers import read_all
    from schemas.wire import ValueReader
    reader = ValueReader(registry, subject=AUDIT_TOPIC)
    events = [reader.decode(m.value) for ms in read_all(cluster, AUDIT_TOPIC).values()
              for m in ms]
    assert {e["tier"] for e in events} == {"hadoop"}
    assert sum(e["message_count"] for e in events) == 300
    errors_dir = os.path.join(config.output_dir, "_errors", "page_views")
    errors = [e for name in os.listdir(errors_dir)
              for e in fastavro.reader(open(os.path.join(errors_dir, name), "rb"))]
    assert sorted(e["error"].split(":")[0] for e in errors) == \
        ["unknown envelope magic byte 110", "unknown schema id 3735928559"]
    # nothing new: a re-run adds nothing
    again = job.load(config, spark)
    assert again.units == 0 and rows_per_hour(read_rows(config.output_dir)) == want
    # more data later: only the new rows
    more = produce(cluster, registry, 30, base + 3 * HOUR)
    job.load(config, spark)
    total = dict(want)
    for k, v in more.items():
        total[k] = total.get(k, 0) + v
    assert rows_per_hour(read_rows(config.output_dir)) == total
    assert not os.listdir(os.path.join(config.output_dir, "_samsa", "staging"))


def test_a_publish_interrupted_midway_is_finished_by_the_next_run(analysis, spark, tmp_path,
                                                                  monkeypatch):
    cluster, registry = analysis
    base = 1_800_000_000_000 - 1_800_000_000_000 % HOUR
    want = produce(cluster, registry, 90, base)
    config = LoaderConfig(zookeeper=cluster.connect, output=str(tmp_path / "wh"),
                          whitelist="page_views")
    from hadoop_loader.outputfs import OutputFS
    real_move = OutputFS.move
    moved = []

    def dying_move(self, source, target):
        if "_samsa/staging/" in source and source.endswith(".parquet"):
            if moved:
                raise KeyboardInterrupt("killed during the publish")
            moved.append(target)
        return real_move(self, source, target)

    monkeypatch.setattr(OutputFS, "move", dying_move)
    monkeypatch.setattr(OutputFS, "delete_dir", lambda *a, **k: None)   # a kill cleans nothing
    with pytest.raises(KeyboardInterrupt):
        job.load(config, spark)
    monkeypatch.undo()
    assert OffsetStore(config.output_dir).latest() is None           # not committed
    assert 0 < len(read_rows(config.output_dir)) < 90                 # partly visible
    recovered = job.load(config, spark)
    assert recovered.recovered >= 1 and recovered.units == 0          # finished, not reloaded
    assert rows_per_hour(read_rows(config.output_dir)) == want
