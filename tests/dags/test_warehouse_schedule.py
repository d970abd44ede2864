"""warehouse_load as it runs in production: Airflow's own scheduler,
triggerer and LocalExecutor (``make airflow-up``'s stack), not ``airflow
dags test``, against a real audit service reading a real cluster's audit
topic, the loader by spark-submit.

Three past hours, catchup on, and one of them triggered by hand first:

* hour A: its page views were delivered, but the analysis tier's counter
  starts only six pokes after the sensor first asked: the hour is pending
  at the first ask and complete later, and it loads (the sensor in
  reschedule mode failed after its second or third poke: issue 25);
* hour B: the producers counted 3 page views more than reached the cluster:
  the sensor waits its whole timeout, then fails with "Sensor has timed
  out" in its log;
* hour C: run by hand (logical date: the end of the hour) before the
  schedule reached it; the scheduler then makes no run of its own for C
  and goes on (a manual run used to take the logical date of the next
  hour's scheduled run, which was never made).

Every hour has exactly one run, and the schedule's next run is the hour
after them. Then hour A is reloaded the documented way, by clearing its
run through the REST API: it runs again, no run is added, and its load
rebuilds the hour (the same event ids in new files, hour B untouched).
Then the broker's retention deletes the start of hour A's data, and
clearing the hour again fails its load at once ("left the brokers'
retention"), the partition left as it was.
"""
from __future__ import annotations

import datetime as dt
import glob
import json
import os
import threading
import time
import urllib.error
import uuid

import pyarrow.dataset as ds
import pytest

from airflow_helpers import call
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
from broker_helpers import unused_port, wait_until
from cluster_helpers import cut_by_retention
from infra.local import airflow_stack
from schemas import catalog
from schemas.registry import SchemaRegistry
from schemas.wire import ValueWriter

HOUR = 3_600_000
WINDOW = 600_000
# The sensor asks every 2 s: hour A stays pending for six asks (12 s; the
# reschedule-mode sensor failed by its third poke, issue 25), then turns
# complete. The timeout is the whole wait of hour B, which never completes:
# long enough for hour A's six pokes, its counter's start and a poke with
# room to spare (A's sensor must not time out), no longer.
SENSOR_POKE_S = 2.0
PENDING_POKES = 6
SENSOR_TIMEOUT_S = 30.0
LOST = 3
# Spark's driver JVM runs seconds per load here: C1 only (C2 never pays off
# in a job that short, on two cores), the serial GC, no UI (tests/hadoop_loader/
# conftest.py runs its Spark without one too). Speed only: the same job
# and command, as [warehouse] spark_args adds options to it.
SPARK_ARGS = ("--conf spark.ui.enabled=false "
              "--driver-java-options '-XX:TieredStopAtLevel=1 -XX:+UseSerialGC'")


def iso(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).isoformat()


def page_view(writer, i: int, t: int) -> bytes:
    return writer.encode({
        "header": {"time_ms": t, "host": "web-1", "service": "frontend",
                   "event_id": uuid.uuid4().bytes},
        "member_id": i, "page_key": "feed", "url": f"/u/{i}", "referrer": None,
        "user_agent": "ua", "duration_ms": i})


def produce(cluster, registry, hour_a: int, hour_b: int) -> int:
    """30 page views in hour A; 10 in hour B, whose producer also counts LOST
    more that never reach the cluster. Returns the rows expected in A."""
    writer = ValueWriter(registry, "page_views", version=1)
    # small batches: many small segments, which retention can delete later
    producer = ClusterProducer(cluster.connect, acks="flushed", batch_size=5)
    counter = TierCounter(CounterConfig(tier="producer", datacenter="analysis",
                                        cluster="analysis", window_ms=WINDOW))
    sender = AuditedProducer(producer, counter)
    publisher = MonitoringPublisher(counter, ValueWriter(registry, AUDIT_TOPIC).encode,
                                    producer_sender(producer))
    try:
        for i in range(30):
            t = hour_a + i * 60_000
            sender.send("page_views", page_view(writer, i, t), timestamp=t)
        for i in range(10):
            t = hour_b + i * 60_000
            sender.send("page_views", page_view(writer, 100 + i, t), timestamp=t)
        stamps = [hour_b + i * 1000 for i in range(LOST)]
        counter.add_values("page_views", [page_view(writer, 200 + i, t)
                                          for i, t in enumerate(stamps)], stamps)
        sender.flush()
        publisher.close()
    finally:
        producer.close()
    return 30


def marker_of(output, hour_ms: int) -> list[str]:
    """The _SUCCESS marker of the page views' hour, if written."""
    hour = dt.datetime.fromtimestamp(hour_ms / 1000, dt.timezone.utc)
    return glob.glob(str(output / "page_views" / f"date={hour:%Y-%m-%d}" / f"hour={hour:%H}"
                         / "_SUCCESS"))


def parquet_in(output, hour_ms: int) -> set[str]:
    """The Parquet files of the page views' hour partition."""
    hour = dt.datetime.fromtimestamp(hour_ms / 1000, dt.timezone.utc)
    return set(glob.glob(str(output / "page_views" / f"date={hour:%Y-%m-%d}" / f"hour={hour:%H}"
                             / "*.parquet")))


def ids_in(output, hour_ms: int) -> list[bytes]:
    """The event ids of the page views' hour partition, sorted."""
    return sorted(h["event_id"] for h in ds.dataset(
        sorted(parquet_in(output, hour_ms)), format="parquet").to_table(
            columns=["header"]).column("header").to_pylist())


def task_log(state_dir: str, run_id: str, task_id: str) -> str:
    """Everything Airflow logged for a task of a run: the worker's and the
    triggerer's files."""
    home = os.path.join(state_dir, "home", "logs", "dag_id=warehouse_load",
                        f"run_id={run_id}", f"task_id={task_id}")
    return "".join(open(p, errors="replace").read()
                   for p in sorted(glob.glob(os.path.join(home, "**", "*"), recursive=True))
                   if os.path.isfile(p))


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_scheduler_waits_for_the_audit_runs_each_hour_once_and_times_out(clusters,
                                                                            tmp_path):
    analysis = clusters("analysis")
    # one partition of small segments: retention can delete the start of an hour
    analysis.create_topic("page_views", 1, config={"segment.bytes": "512"})
    registry = SchemaRegistry.open(f"zookeeper://{analysis.connect}")
    registry.register("page_views", catalog.load("samsa.events.PageViewEvent"))
    registry.register(AUDIT_TOPIC, catalog.load(catalog.MONITORING_EVENT))
    now = int(time.time() * 1000)
    top = now - now % HOUR
    hour_a, hour_b, hour_c = top - 3 * HOUR, top - 2 * HOUR, top - HOUR
    rows_a = produce(analysis, registry, hour_a, hour_b)

    (tmp_path / "audit").mkdir()
    service = AuditService(ServeConfig(zookeeper=analysis.connect, http_port=0,
                                       data_dir=str(tmp_path / "audit"), grace_ms=60_000))
    stop = threading.Event()
    reader = threading.Thread(target=lambda: [service.step() for _ in iter(stop.is_set, True)])
    reader.start()
    counter = ClusterCounter(CountConfig(cluster="analysis", zookeeper=analysis.connect,
                                         window_ms=WINDOW, publish_interval_ms=300,
                                         group="count-analysis"))
    counting = threading.Thread(target=counter.run)
    output = tmp_path / "warehouse"
    config = tmp_path / "warehouse.toml"
    config.write_text(f"""
[loader]
zookeeper = "{analysis.connect}"
output = "file://{output}"
master = "local[2]"
whitelist = "page_views"

[warehouse]
audit_url = "http://127.0.0.1:{service.serve_http()}"
start_date = "{iso(hour_a)}"
catchup = true
sensor_poke_s = {SENSOR_POKE_S}
sensor_timeout_s = {SENSOR_TIMEOUT_S}
retries = 1
retry_delay_s = 2.0
spark_args = "{SPARK_ARGS}"
""")
    state_dir = str(tmp_path / "airflow")
    try:
        state = airflow_stack.up(state_dir, unused_port(), str(config), say=lambda *_: None)
        url = state["url"]
        token = call(f"{url}/auth/token", body={
            "username": "admin", "password": airflow_stack.password(state_dir)})["access_token"]
        runs_url = f"{url}/api/v2/dags/warehouse_load/dagRuns"

        # hour C by hand, the documented way: its logical date is the start of the hour
        manual = call(runs_url, token, {"logical_date": iso(hour_c), "dag_run_id": "by-hand-C"})
        assert manual["data_interval_start"] == iso(hour_c).replace("+00:00", "Z")
        call(f"{url}/api/v2/dags/warehouse_load", token, {"is_paused": False}, method="PATCH")

        def runs() -> dict[int, list[dict]]:
            by_hour: dict[int, list[dict]] = {}
            for r in call(f"{runs_url}?limit=100", token)["dag_runs"]:
                start = dt.datetime.fromisoformat(r["data_interval_start"].replace("Z", "+00:00"))
                by_hour.setdefault(int(start.timestamp() * 1000), []).append(r)
            return by_hour

        def sensor_of(hour: int) -> dict | None:
            found = runs().get(hour)
            if not found:
                return None
            try:
                return call(f"{runs_url}/{found[0]['dag_run_id']}/taskInstances/"
                            f"audit_complete", token)
            except urllib.error.HTTPError as exc:
                if exc.code == 404:         # the run's task instances are not made yet
                    return None
                raise

        # hour A is pending at the first ask (the analysis tier has not counted
        # it): the sensor defers; the counter starts six pokes later
        wait_until(lambda: (sensor_of(hour_a) or {}).get("state") == "deferred", 300,
                   interval=1.0, what=lambda: f"hour A's sensor to defer: {runs()}")
        deferred_at = time.monotonic()
        wait_until(lambda: time.monotonic() - deferred_at >= PENDING_POKES * SENSOR_POKE_S
                   and (sensor_of(hour_a) or {}).get("state") == "deferred", 90, interval=1.0,
                   what=f"hour A's sensor to stay deferred for {PENDING_POKES} pokes")
        counting.start()

        def finished() -> bool:
            found = runs()
            return all(found.get(h) and all(r["state"] in ("success", "failed") for r in found[h])
                       for h in (hour_a, hour_b, hour_c))
        wait_until(finished, 600, interval=1.0, what=lambda: f"every hour's run to end: {runs()}")

        found = runs()
        scheduler_log = open(os.path.join(state_dir, "logs", "scheduler.log")).read()
        # one run per hour; the manual run is hour C's, and the schedule went past it
        assert {h: len(found[h]) for h in (hour_a, hour_b, hour_c)} == \
            {hour_a: 1, hour_b: 1, hour_c: 1}, found
        # (a run of the hour ``top`` too, when the test outlived that hour's end)
        assert set(found) - {top} == {hour_a, hour_b, hour_c}, found
        assert found[hour_c][0]["dag_run_id"] == "by-hand-C"
        assert found[hour_c][0]["state"] == "success"
        # the schedule went past C (its run was the one by hand) to the hour
        # now running, due when it ends
        next_runs = (iso(top).replace("+00:00", ""), iso(top + HOUR).replace("+00:00", ""))
        wait_until(lambda: call(f"{url}/api/v2/dags/warehouse_load", token)[
            "next_dagrun_logical_date"].startswith(next_runs), 60, interval=1.0,
            what=lambda: call(f"{url}/api/v2/dags/warehouse_load", token))
        scheduler_log = open(os.path.join(state_dir, "logs", "scheduler.log")).read()
        assert 1 <= scheduler_log.count("run already exists") <= 2, scheduler_log[-4000:]

        # hour A: pending at the first ask, complete later, loaded
        run_a = found[hour_a][0]
        log_a = task_log(state_dir, run_a["dag_run_id"], "audit_complete")
        assert run_a["state"] == "success", log_a[-4000:] + scheduler_log[-4000:]
        assert "not complete yet" in log_a and "page_views: waiting" in log_a, log_a[-4000:]
        assert "page_views: ready" in log_a, log_a[-4000:]
        rows = ds.dataset(str(output / "page_views"), partitioning="hive").to_table()
        in_a = [r for r in rows.to_pylist() if hour_a <= r["header"]["time_ms"] < hour_a + HOUR]
        assert len(in_a) == rows_a
        marker = json.loads(open(marker_of(output, hour_a)[0]).read())
        assert marker["produced"] == marker["loaded"] == rows_a
        assert "state attribute is" not in scheduler_log

        # hour B: incomplete throughout; fails only at the sensor's timeout
        run_b = found[hour_b][0]
        sensor_b = sensor_of(hour_b)
        log_b = task_log(state_dir, run_b["dag_run_id"], "audit_complete")
        assert run_b["state"] == "failed" and sensor_b["state"] == "failed", log_b[-4000:]
        assert "Sensor has timed out" in log_b, log_b[-4000:]
        assert f"missing {LOST}" in log_b, log_b[-4000:]
        began = dt.datetime.fromisoformat(sensor_b["start_date"].replace("Z", "+00:00"))
        ended = dt.datetime.fromisoformat(sensor_b["end_date"].replace("Z", "+00:00"))
        assert (ended - began).total_seconds() >= SENSOR_TIMEOUT_S, sensor_b
        assert not marker_of(output, hour_b)

        # reload hour A, the documented way: clear its run. It runs again from
        # the sensor; the load finds nothing new and rebuilds hour A: the same
        # rows in new files, hour B's partition untouched; the schedule too
        files_a, files_b, ids_a = parquet_in(output, hour_a), parquet_in(output, hour_b), \
            ids_in(output, hour_a)
        assert files_a and files_b and len(ids_a) == rows_a
        run_url = f"{runs_url}/{run_a['dag_run_id']}"

        def clear_and_wait(attempt: int) -> str:
            call(f"{url}/api/v2/dags/warehouse_load/clearTaskInstances", token,
                 {"dry_run": False, "dag_run_id": run_a["dag_run_id"], "only_failed": False})

            def ended() -> bool:
                sensor = call(f"{run_url}/taskInstances/audit_complete", token)
                return sensor["try_number"] >= attempt and call(run_url, token)["state"] in (
                    "success", "failed")
            wait_until(ended, 300, interval=1.0, what=lambda: call(run_url, token))
            return call(run_url, token)["state"]

        assert clear_and_wait(2) == "success"
        load_log = task_log(state_dir, run_a["dag_run_id"], "load")
        assert "nothing new to load" in load_log, load_log[-4000:]
        assert f"reloaded page_views: {rows_a} rows" in load_log, load_log[-4000:]
        assert ids_in(output, hour_a) == ids_a
        reloaded = parquet_in(output, hour_a)
        assert reloaded and not reloaded & files_a
        assert parquet_in(output, hour_b) == files_b
        assert {h: [r["dag_run_id"] for r in rs] for h, rs in runs().items() if h != top} == \
            {h: [r["dag_run_id"] for r in rs] for h, rs in found.items() if h != top}
        assert marker_of(output, hour_a)

        # the brokers' retention deletes the start of hour A's data; clearing
        # the hour again fails its load at once, saying so, and leaves the
        # partition as it was (the audit's readers are done: stop them first)
        stop.set()
        reader.join(30)
        counter.stop()
        counting.join(30)
        cut_by_retention(analysis, "page_views")
        assert clear_and_wait(3) == "failed"
        load_ti = call(f"{run_url}/taskInstances/load", token)
        load_log = task_log(state_dir, run_a["dag_run_id"], "load")
        # failed at once: no retry after it
        assert load_ti["state"] == "failed" and load_ti["try_number"] >= 3, load_ti
        assert "cannot be rebuilt: part of it has left the brokers' retention" in load_log, \
            load_log[-4000:]
        assert "page_views/0-0 held them from offset 0" in load_log, load_log[-4000:]
        assert parquet_in(output, hour_a) == reloaded
        assert ids_in(output, hour_a) == ids_a
    finally:
        airflow_stack.down(state_dir, say=lambda *_: None)
        stop.set()
        reader.join(30)
        if counting.is_alive():
            counter.stop()
            counting.join(30)
        counter.close()
        service.close()
        registry.close()
