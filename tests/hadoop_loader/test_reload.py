"""Reloading an hour (hadoop_loader/job.py's rebuild), with real brokers,
ZooKeeper, the schema registry and Spark (local): the hour comes back with
the same rows and event ids in new files, swapped in at once while a reader
keeps listing it, the other hours untouched; an hour whose offsets the
brokers' retention has deleted is refused and left as it was, with exit
status 3 from the command line. And the parts that need no cluster: the
hour records, the swap, the --reload-hour option."""
from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import threading

import pyarrow.dataset as ds
import pytest

from cluster_helpers import cut_by_retention
from hadoop_loader import job, state
from hadoop_loader.cli import parse_hour
from hadoop_loader.config import LoaderConfig
from hadoop_loader.outputfs import OutputError, OutputFS
from hadoop_loader.plan import WorkUnit
from loader_helpers import BASE, HOUR, produce
from schemas import catalog
from schemas.registry import SchemaRegistry


def partition_dir(root: str, hour_ms: int) -> str:
    return os.path.join(root, state.hour_partition("page_views", hour_ms))


def files(root: str, hour_ms: int) -> dict[str, int]:
    """The files of the page views' hour partition: name -> inode."""
    d = partition_dir(root, hour_ms)
    return {n: os.stat(os.path.join(d, n)).st_ino for n in sorted(os.listdir(d))}


def event_ids(root: str, hour_ms: int) -> list[bytes]:
    table = ds.dataset(partition_dir(root, hour_ms), format="parquet").to_table(
        columns=["header"])
    return sorted(h["event_id"] for h in table.column("header").to_pylist())


def config_for(cluster, tmp_path, **more) -> LoaderConfig:
    return LoaderConfig(zookeeper=cluster.connect, output=str(tmp_path / "wh"),
                        whitelist="page_views", audit=False, **more)


def test_a_reload_rebuilds_the_hour_with_the_same_rows_and_swaps_it_in_whole(
        analysis, spark, tmp_path):
    cluster, registry = analysis
    config = config_for(cluster, tmp_path)
    root = config.output_dir
    hours = [BASE + k * HOUR for k in range(4)]
    first = produce(cluster, registry, 90, BASE)
    job.load(config, spark)
    # late rows of hours 1 and 2 arrive and are loaded by a second load: hour
    # 1's rows now come from two loads' ranges
    late = produce(cluster, registry, 30, hours[1])
    job.load(config, spark)
    target = hours[1]
    key = state.hour_id(target)
    want_rows = first[key] + late[key]
    assert state.HourRanges(root).get(key)       # recorded with the publish
    before = {h: files(root, h) for h in hours}
    ids_before = event_ids(root, target)
    assert len(ids_before) == want_rows == len(set(ids_before))
    with open(os.path.join(partition_dir(root, target), "_SUCCESS"), "w") as f:
        f.write("{}")
    old_names = frozenset(n for n in before[target] if n.endswith(".parquet"))

    # a reader lists the partition again and again while it is replaced
    seen: list[frozenset[str]] = []
    failures: list[BaseException] = []
    done = threading.Event()

    def reader() -> None:
        try:
            while not done.is_set():
                seen.append(frozenset(n for n in os.listdir(partition_dir(root, target))
                                      if n.endswith(".parquet")))
        except BaseException as exc:       # noqa: BLE001 - reported by the test
            failures.append(exc)
    watching = threading.Thread(target=reader)
    watching.start()
    try:
        summary = job.load(config, spark, reload_hour_ms=target)
    finally:
        done.set()
        watching.join(30)
    assert summary.reloaded == {"page_views": want_rows} and summary.units == 0

    after = {h: files(root, h) for h in hours}
    new_names = frozenset(n for n in after[target] if n.endswith(".parquet"))
    assert new_names and not new_names & old_names            # new files ...
    assert "_SUCCESS" not in after[target]                   # ... not validated yet
    assert event_ids(root, target) == ids_before             # ... the same rows
    assert {h: after[h] for h in hours if h != target} == \
        {h: before[h] for h in hours if h != target}          # the other hours untouched
    # never a mix, never nothing: every listing was the old files or the new
    assert not failures, failures
    assert seen and set(seen) <= {old_names, new_names}, set(seen) - {old_names, new_names}
    # the old files wait under _samsa/replaced/ for readers still reading them
    replaced = os.path.join(root, job.REPLACED, f"{summary.run}-reload",
                            state.hour_partition("page_views", target))
    assert set(os.listdir(replaced)) == set(before[target]) | {"_SUCCESS"}
    assert not os.listdir(os.path.join(root, job.STAGING))
    # ... until a load keep_replaced_s later
    job.load(dataclasses.replace(config, keep_replaced_s=0.0), spark)
    assert os.listdir(os.path.join(root, job.REPLACED)) == []
    # an hour no load wrote rows of: nothing to rebuild, nothing changed
    quiet = job.load(config, spark, reload_hour_ms=BASE + 10 * HOUR)
    assert quiet.reloaded == {}
    assert {h: files(root, h) for h in hours} == after
    # a topic with rows of the hour but no record of where they came from
    # (loaded before hour records were kept): refused, nothing changed
    unknown = os.path.join(root, state.hour_partition("clicks", target))
    os.makedirs(unknown)
    open(os.path.join(unknown, "part-0.parquet"), "wb").close()
    with pytest.raises(job.ReloadError, match="clicks hold rows of the hour, but no load "
                                              "recorded the offsets they came from"):
        job.load(config, spark, reload_hour_ms=target)
    assert {h: files(root, h) for h in hours} == after


def test_an_hour_cut_by_retention_is_refused_and_left_as_it_was(clusters, spark, tmp_path):
    cluster = clusters("analysis")
    registry = SchemaRegistry.open(f"zookeeper://{cluster.connect}")
    try:
        registry.register("page_views", catalog.load("samsa.events.PageViewEvent"))
        registry.register("page_views", catalog.load("samsa.events.PageViewEvent.v2"))
        # small segments, so that retention can delete the start of the data
        cluster.create_topic("page_views", 1, config={"segment.bytes": "512"})
        produce(cluster, registry, 60, BASE, batch_size=5)
    finally:
        registry.close()
    config = config_for(cluster, tmp_path)
    root = config.output_dir
    job.load(config, spark)
    before = files(root, BASE)
    # the broker's retention deletes the start of every loaded hour, but not
    # the loader's position
    first_kept, end = cut_by_retention(cluster, "page_views")
    assert 0 < first_kept <= end

    with pytest.raises(job.ReloadError) as refused:
        job.load(config, spark, reload_hour_ms=BASE)
    message = str(refused.value)
    assert "left the brokers' retention" in message and "page_views/0-0" in message
    assert f"keeps data only from {first_kept}" in message
    assert "left as they are" in message
    assert files(root, BASE) == before                       # untouched
    assert not os.path.exists(os.path.join(root, job.REPLACED))

    # the command line: one line, exit status 3
    out = subprocess.run([sys.executable, "-m", "hadoop_loader", "--zookeeper", cluster.connect,
                          "--output", root, "--whitelist", "page_views", "--set", "audit=false",
                          "--reload-hour", state.hour_id(BASE).replace("/", "T")],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 3, out.stderr[-3000:]
    errors = [line for line in out.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "left the brokers' retention" in errors[0], out.stderr[-3000:]
    assert files(root, BASE) == before


def test_hour_records_merge_and_a_run_adds_its_ranges_to_the_hours_it_wrote(tmp_path):
    assert state.merge_ranges([[5, 9], [0, 3], [3, 4], [8, 12], [20, 21]]) == \
        [[0, 4], [5, 12], [20, 21]]
    units = [WorkUnit("a", "0-0", 0, "h:1", 100, 200), WorkUnit("a", "0-0", 0, "h:1", 200, 250),
             WorkUnit("a", "0-1", 1, "h:1", 7, 9), WorkUnit("b", "1-0", 0, "h:2", 0, 40)]
    rows = {"a": {"2027-01-15/08": 3, "2027-01-15/09": 1}, "b": {"2027-01-15/09": 2}}
    added = job.hour_ranges(units, rows)
    assert added == {"2027-01-15/08": {"a/0-0": [100, 250], "a/0-1": [7, 9]},
                     "2027-01-15/09": {"a/0-0": [100, 250], "a/0-1": [7, 9],
                                       "b/1-0": [0, 40]}}
    records = state.HourRanges(str(tmp_path))
    assert records.get("2027-01-15/08") is None
    records.add(added)
    records.add(added)                  # a finished interrupted publish adds them again
    records.add({"2027-01-15/08": {"a/0-0": [250, 300]}})
    assert records.get("2027-01-15/08") == {"a/0-0": [[100, 300]], "a/0-1": [[7, 9]]}
    assert os.path.exists(tmp_path / "_samsa" / "hours" / "date=2027-01-15" / "hour=08.json")
    (tmp_path / "_samsa" / "hours" / "date=2027-01-15" / "hour=09.json").write_text("{")
    with pytest.raises(state.StateError, match="unreadable hour record"):
        records.get("2027-01-15/09")


def test_swap_dir_replaces_a_directory_whole_and_only_on_a_local_output(tmp_path):
    out = OutputFS(str(tmp_path))
    out.write_text(("old", "a.parquet"), "old")
    out.write_text(("new", "b.parquet"), "new")
    assert out.swap_dir("new", "old", "aside/old") is True
    assert out.listdir("old") == ["b.parquet"] and out.listdir("aside", "old") == ["a.parquet"]
    assert not out.exists("new")
    out.write_text(("fresh", "c.parquet"), "c")
    assert out.swap_dir("fresh", "t/none/yet", "aside/x") is False     # nothing to replace
    assert out.listdir("t", "none", "yet") == ["c.parquet"] and not out.exists("aside", "x")
    with pytest.raises(OutputError, match="needs a local output"):
        OutputFS("s3a://bucket/wh").swap_dir("a", "b", "c")


def test_the_reload_hour_option():
    assert parse_hour("2027-01-15T08") == parse_hour("2027-01-15T08:00:00+00:00") == \
        parse_hour("2027-01-15T09:00:00+01:00") == 1_800_000_000_000 - 1_800_000_000_000 % HOUR
    for bad, why in (("2027-01-15T08:30", "not the start of an hour"),
                     ("yesterday", "not an hour")):
        with pytest.raises(ValueError, match=why):
            parse_hour(bad)
    out = subprocess.run([sys.executable, "-m", "hadoop_loader", "--zookeeper", "h:1/a",
                          "--reload-hour", "2027-01-15T08:30"], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 2 and out.stderr.strip().splitlines() == [
        "error: --reload-hour '2027-01-15T08:30': not the start of an hour"]
