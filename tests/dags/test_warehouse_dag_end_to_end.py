"""warehouse_load and audit_report run by a real Airflow (``airflow dags
test``) over the real pipeline: a DC cluster with an audited producer, the
mirror into the analysis cluster (counting its tier), the analysis cluster's
counter, the audit service over HTTP, and the loader by spark-submit (Spark
local). The Parquet is read back with pyarrow, independently of Spark.

* hours 0-2: page views (v1 and v2 alternately) and searches: each hour's
  run passes the audit gate, loads, validates against the producers' counts
  and marks the hour's partitions; the first load is killed (kill -9 of the
  spark-submit process) mid-run and its retry loads every message exactly
  once (the retry, a second try, then rebuilds hour 0 from the offsets
  recorded for it); a new run of an hour adds nothing;
* hour 3: the producers' counts say 5 more page views than reached the
  cluster (a deliberate loss): the sensor does not pass, the run fails with
  the audit's numbers in its log, and no _SUCCESS is written; the day's
  audit_report fails naming the loss, its HTML and JSON kept beside the data.
"""
from __future__ import annotations

import datetime as dt
import glob
import json
import os
import re
import signal
import threading
import time
import uuid

import pyarrow.dataset as ds
import pytest

from airflow_helpers import airflow_env, dags_test, migrate, run_state
from audit.cluster_counter import ClusterCounter
from audit.config import CountConfig, ServeConfig
from audit.counting import (
    AUDIT_TOPIC,
    AuditedProducer,
    CounterConfig,
    MonitoringPublisher,
    TierCounter,
    producer_sender,
)
from audit.service import AuditService
from broker.client.cluster_producer import ClusterProducer
from broker.service_kit.process import command_lines
from broker_helpers import wait_until
from broker.coordination.named_cluster import NamedCluster
from mirror.config import MirrorConfig
from mirror.mirror import Mirror
from schemas import catalog
from schemas.registry import SchemaRegistry
from schemas.wire import ValueWriter

HOUR = 3_600_000
WINDOW = 600_000
LOST = 5
# Only hour 3's sensor waits out its timeout: a few asks (one a second) show
# that it does not pass. Hour 0 is asked seconds after the traffic, maybe
# before the mirror and the counter have caught up, but a sensor never gives
# up before the audit's grace (60 s from the producers' last report) has run
# out, whatever its timeout (hadoop_loader/audit_wait.py).
SENSOR_TIMEOUT_S = 5.0
# Spark's driver JVM runs seconds per load here: C1 only (C2 never pays off
# in a job that short, on two cores), the serial GC, no UI (tests/hadoop_loader/
# conftest.py runs its Spark without one too). Speed only: the same job
# and command, as [warehouse] spark_args adds options to it.
SPARK_ARGS = ("--conf spark.ui.enabled=false "
              "--driver-java-options '-XX:TieredStopAtLevel=1 -XX:+UseSerialGC'")


def registry_of(cluster) -> SchemaRegistry:
    registry = SchemaRegistry.open(f"zookeeper://{cluster.connect}")
    registry.register("page_views", catalog.load("samsa.events.PageViewEvent"))
    registry.register("page_views", catalog.load("samsa.events.PageViewEvent.v2"))
    registry.register("searches", catalog.load("samsa.events.SearchEvent"))
    registry.register(AUDIT_TOPIC, catalog.load(catalog.MONITORING_EVENT))
    return registry


def header(t: int) -> dict:
    return {"time_ms": t, "host": "web-1", "service": "frontend", "event_id": uuid.uuid4().bytes}


def page_view(registry, i: int, t: int) -> bytes:
    rec = {"header": header(t), "member_id": i, "page_key": "feed", "url": f"/u/{i}",
           "referrer": None, "user_agent": "ua", "duration_ms": i}
    if i % 2:
        rec["session_id"] = f"s{i}"
    return ValueWriter(registry, "page_views", version=2 if i % 2 else 1).encode(rec)


def search(registry, i: int, t: int) -> bytes:
    return ValueWriter(registry, "searches").encode({
        "header": header(t), "member_id": i, "query": f"q{i}", "vertical": "JOBS",
        "result_count": i % 7, "page": 0})


def iso(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).isoformat()


def hour_dir(root, topic, hour_ms) -> str:
    t = dt.datetime.fromtimestamp(hour_ms / 1000, dt.timezone.utc)
    return os.path.join(root, topic, f"date={t:%Y-%m-%d}", f"hour={t:%H}")


def read_topic(root: str, topic: str) -> list[dict]:
    return ds.dataset(os.path.join(root, topic), partitioning="hive").to_table().to_pylist()


def produce(dc, registry, hours: list[int]) -> dict[tuple[str, int], int]:
    """Audited page views and searches over ``hours[:3]``; in ``hours[3]``
    the producer counts LOST more page views than it sends. Returns the
    rows expected per (topic, hour)."""
    producer = ClusterProducer(dc.connect, acks="flushed")
    counter = TierCounter(CounterConfig(tier="producer", datacenter="dc-a", cluster="dc-a",
                                        window_ms=WINDOW))
    sender = AuditedProducer(producer, counter)
    publisher = MonitoringPublisher(counter, ValueWriter(registry, AUDIT_TOPIC).encode,
                                    producer_sender(producer))
    expected: dict[tuple[str, int], int] = {}
    try:
        for i in range(900):
            hour = hours[i % 3]
            t = hour + (i * 3_989) % HOUR
            sender.send("page_views", page_view(registry, i, t), timestamp=t)
            expected[("page_views", hour)] = expected.get(("page_views", hour), 0) + 1
            if i % 4 == 0:
                sender.send("searches", search(registry, i, t), timestamp=t)
                expected[("searches", hour)] = expected.get(("searches", hour), 0) + 1
        lossy = hours[3]
        values = [page_view(registry, i, lossy + i * 1000) for i in range(40)]
        stamps = [lossy + i * 1000 for i in range(40)]
        for v, t in zip(values[LOST:], stamps[LOST:]):
            sender.send("page_views", v, timestamp=t)
        # the LOST first ones were acknowledged (counted) and never stored
        counter.add_values("page_views", values[:LOST], stamps[:LOST])
        expected[("page_views", lossy)] = len(values) - LOST
        sender.flush()
        publisher.close()
    finally:
        producer.close()
    return expected


def write_config(path, analysis, output, audit_url) -> None:
    path.write_text(f"""
[loader]
zookeeper = "{analysis.connect}"
output = "file://{output}"
master = "local[2]"
cluster_name = "analysis"
progress_interval_s = 1.0
lock_timeout_s = 120.0

[warehouse]
audit_url = "{audit_url}"
start_date = "2026-01-01T00:00:00+00:00"
sensor_poke_s = 1.0
sensor_timeout_s = {SENSOR_TIMEOUT_S}
retries = 1
retry_delay_s = 1.0
max_retry_delay_s = 2.0
spark_args = "{SPARK_ARGS}"
""")


def spark_submit_pids(config_path: str) -> list[int]:
    return [pid for pid, argv in command_lines()
            if b"org.apache.spark.deploy.SparkSubmit" in argv and config_path.encode() in argv]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_warehouse_load_and_audit_report_dags(clusters, tmp_path):
    dc, analysis = clusters("dc-a"), clusters("analysis")
    registries = [registry_of(dc), registry_of(analysis)]
    now = int(time.time() * 1000)
    first = now - now % HOUR - 5 * HOUR
    hours = [first + k * HOUR for k in range(4)]
    expected = produce(dc, registries[0], hours)

    mirror = Mirror(MirrorConfig(
        sources=(NamedCluster("dc-a", dc.connect),), target=NamedCluster("analysis",
                                                                      analysis.connect),
        group="mirror-dag", metrics_port=-1, audit_window_ms=WINDOW,
        audit_publish_interval_ms=300))
    counter = ClusterCounter(CountConfig(cluster="analysis", zookeeper=analysis.connect,
                                         window_ms=WINDOW, publish_interval_ms=300,
                                         group="count-analysis"))
    service = AuditService(ServeConfig(zookeeper=analysis.connect, http_port=0,
                                       data_dir=str(tmp_path), grace_ms=60_000))
    stop = threading.Event()
    reader = threading.Thread(target=lambda: [service.step() for _ in iter(stop.is_set, True)])
    counting = threading.Thread(target=counter.run)
    mirror.start()
    counting.start()
    reader.start()
    audit_url = f"http://127.0.0.1:{service.serve_http()}"
    output = tmp_path / "warehouse"
    config = tmp_path / "warehouse.toml"
    write_config(config, analysis, output, audit_url)
    env = airflow_env(tmp_path / "airflow", config)
    try:
        migrate(env)

        # -- hour 0: its load is killed mid-run (kill -9 of spark-submit); the retry
        #    of the same run finishes the job
        run = dags_test(env, "warehouse_load", iso(hours[0]), popen=True)
        output_lines: list[str] = []
        drain = threading.Thread(target=lambda: output_lines.extend(run.stdout))
        drain.start()
        staged = lambda: glob.glob(str(output / "_samsa" / "staging" / "*" / "avro"))  # noqa: E731
        wait_until(lambda: staged() and spark_submit_pids(str(config)), 240,
                   what="the load to stage data")
        victims = spark_submit_pids(str(config))
        for pid in victims:
            os.kill(pid, signal.SIGKILL)
        run.wait(600)
        drain.join(30)
        text = "".join(output_lines)
        assert run_state(text) == "success", text[-6000:]
        assert "spark-submit exit status -9" in text         # the first try was the one killed
        # the retry (the load's second try) loaded the rest, then rebuilt hour 0
        assert "reloaded page_views" in text and "reloaded searches" in text, text[-6000:]
        assert not glob.glob(str(output / "_samsa" / "publishing" / "*.json"))

        # -- hours 1 and 2: gate, (nothing new to) load, validate, mark
        for hour in hours[1:3]:
            state, text = dags_test(env, "warehouse_load", iso(hour))
            assert state == "success", text[-6000:]

        # exactly once: every message produced is a row, once (the kill included)
        for topic in ("page_views", "searches"):
            rows = read_topic(str(output), topic)
            ids = [r["header"]["event_id"] for r in rows]
            assert len(ids) == len(set(ids)), f"{topic}: duplicated rows"
            per_hour = {}
            for r in rows:
                h = r["header"]["time_ms"] - r["header"]["time_ms"] % HOUR
                per_hour[h] = per_hour.get(h, 0) + 1
            assert per_hour == {h: n for (t, h), n in expected.items() if t == topic}, topic
        views = read_topic(str(output), "page_views")
        v1 = [r for r in views if r["member_id"] % 2 == 0]
        v2 = [r for r in views if r["member_id"] % 2 == 1]
        assert v1 and all(r["session_id"] == "" for r in v1)        # v2's default on old rows
        assert v2 and all(r["session_id"] == f"s{r['member_id']}" for r in v2)
        for hour in hours[:3]:
            for topic in ("page_views", "searches"):
                marker = os.path.join(hour_dir(output, topic, hour), "_SUCCESS")
                counts = json.load(open(marker))
                assert counts["produced"] == expected[(topic, hour)] == counts["loaded"]

        # -- a new run of an hour (`airflow dags test` makes one: its load's first
        #    try) adds nothing and rebuilds nothing
        files = sorted(glob.glob(str(output / "*" / "date=*" / "hour=*" / "*.parquet")))
        state, text = dags_test(env, "warehouse_load", iso(hours[1]))
        assert state == "success", text[-6000:]
        assert "nothing new to load" in text and "reloaded" not in text
        assert sorted(glob.glob(str(output / "*" / "date=*" / "hour=*" / "*.parquet"))) == files

        # -- hour 3 lost 5 page views: the gate never passes; the run fails with numbers
        state, text = dags_test(env, "warehouse_load", iso(hours[3]))
        assert state == "failed"
        # (the tier may count some messages twice: at-least-once counting)
        assert re.search(rf"page_views: lost; produced 40, counted \d+ at the tier, missing "
                         rf"{LOST}\b", text), text[-6000:]
        assert "Sensor has timed out" in text or "AirflowSensorTimeout" in text
        assert not os.path.exists(os.path.join(hour_dir(output, "page_views", hours[3]),
                                               "_SUCCESS"))

        # -- the day's audit report: kept beside the data, and the run fails on the loss
        day = hours[3] - hours[3] % (24 * HOUR)
        state, text = dags_test(env, "audit_report", iso(day))
        assert state == "failed"
        assert "LOSS page_views window" in text and f"missing {LOST}" in text
        t = dt.datetime.fromtimestamp(day / 1000, dt.timezone.utc)
        saved = output / "_audit" / f"date={t:%Y-%m-%d}"
        report = json.loads((saved / "report.json").read_text())
        assert report["summary"]["lost"] >= 1
        assert "<table" in (saved / "report.html").read_text()
    finally:
        stop.set()
        reader.join(30)
        mirror.close()
        counter.stop()
        counting.join(30)
        counter.close()
        service.close()
        for r in registries:
            r.close()
