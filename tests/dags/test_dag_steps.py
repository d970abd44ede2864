"""The warehouse DAGs' steps (hadoop_loader/dag_steps.py) against a real
audit service over HTTP (its database filled with monitoring events as the
tiers would publish them), outside Airflow: the shortfall, the markers, the
gate when the audit cannot be asked, the day's report."""
from __future__ import annotations

import datetime as dt
import json
import os
import uuid

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from audit.config import ServeConfig
from audit.counting import CounterConfig, TierCounter
from audit.service import AuditService
from hadoop_loader import dag_steps
from hadoop_loader.dag_steps import StepFailed

HOUR = 3_600_000
WINDOW = 600_000


def envelope(eid: bytes) -> bytes:
    return b"\x00\x00\x00\x00\x01\x02\x00\x00" + eid


def tier_events(tier, cluster, ids, at_ms, now_ms, topic="page_views") -> list[dict]:
    counter = TierCounter(CounterConfig(tier=tier, datacenter=cluster, cluster=cluster,
                                        window_ms=WINDOW, dedup_ids=tier != "producer"))
    counter.add_values(topic, [envelope(i) for i in ids], at_ms, now_ms=now_ms)
    return counter.drain(now_ms=now_ms)


@pytest.fixture
def audit(zookeeper, zk_chroot, tmp_path):
    service = AuditService(ServeConfig(zookeeper=zookeeper.connect_string(zk_chroot),
                                       http_port=0, data_dir=str(tmp_path), grace_ms=60_000))
    port = service.serve_http()
    yield service, f"http://127.0.0.1:{port}"
    service.close()


def settings_file(tmp_path, audit_url: str, output) -> str:
    path = tmp_path / "warehouse.toml"
    path.write_text(f'[loader]\nzookeeper = "127.0.0.1:1/none"\noutput = "{output}"\n'
                    f'cluster_name = "analysis"\n[warehouse]\naudit_url = "{audit_url}"\n')
    return str(path)


def at(ms: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc)


def write_rows(output, topic: str, hour_ms: int, ids: list[bytes], at_ms: int) -> None:
    """Rows of the loader's shape (an event header with its id) in a file of
    the topic's hour partition."""
    directory = os.path.join(str(output), dag_steps.hour_partition(topic, hour_ms))
    os.makedirs(directory, exist_ok=True)
    headers = [{"time_ms": at_ms, "host": "h", "service": "s", "event_id": i} for i in ids]
    pq.write_table(pa.table({"header": headers, "member_id": list(range(len(ids)))}),
                   os.path.join(directory, f"part-{uuid.uuid4().hex}.parquet"))


def test_validate_fails_on_a_shortfall_even_under_copies_and_marks_nothing(audit, tmp_path):
    service, url = audit
    now = dag_steps._ms(dt.datetime.now(dt.timezone.utc))
    hour = now - now % HOUR - 3 * HOUR
    ids = [uuid.uuid4().bytes for _ in range(20)]
    search_ids = [uuid.uuid4().bytes for _ in range(4)]
    events = (tier_events("producer", "dc-a", ids, hour + 1, now)
              + tier_events("cluster", "analysis", ids, hour + 1, now)
              + tier_events("producer", "dc-a", search_ids, hour + WINDOW, now, "searches")
              + tier_events("cluster", "analysis", search_ids, hour + WINDOW, now, "searches"))
    service.store.add_events(events, now)
    output = tmp_path / "wh"
    config = settings_file(tmp_path, url, output)
    write_rows(output, "page_views", hour, ids[:15], hour + 1)
    write_rows(output, "page_views", hour, ids[15:18], hour + 1)   # two files: 18 of 20 ids
    write_rows(output, "searches", hour, search_ids, hour + WINDOW)
    write_rows(output, "page_views", hour + HOUR, [uuid.uuid4().bytes] * 50,
               hour + HOUR + 1)                                       # the next hour: not counted

    assert dag_steps.audit_gate(at(hour), at(hour + HOUR), config) is True
    with pytest.raises(StepFailed, match=r"page_views: 18 rows loaded, 20 produced, 2 missing"):
        dag_steps.validate(at(hour), at(hour + HOUR), config)
    # three copies make 21 rows for 20 produced: still 2 missing (issue 25: the
    # count alone passed a loss hidden under duplicates)
    write_rows(output, "page_views", hour, ids[:3], hour + 1)
    with pytest.raises(StepFailed, match=r"21 rows loaded, 20 produced, 2 missing and 3 "):
        dag_steps.validate(at(hour), at(hour + HOUR), config)
    assert not os.path.exists(os.path.join(str(output), dag_steps.hour_partition("page_views",
                                                                                 hour),
                                           "_SUCCESS"))

    write_rows(output, "page_views", hour, ids[18:], hour + 1)       # the missing two arrive
    counts = dag_steps.validate(at(hour), at(hour + HOUR), config)
    assert counts == {"page_views": {"produced": 20, "loaded": 23, "duplicated": 3},
                      "searches": {"produced": 4, "loaded": 4, "duplicated": 0}}
    markers = dag_steps.mark_success(at(hour), at(hour + HOUR), counts, config)
    assert len(markers) == 2
    assert json.load(open(markers[0])) == {"topic": "page_views", "hour_ms": hour,
                                           "produced": 20, "loaded": 23, "duplicated": 3}


def test_the_gate_waits_while_the_audit_cannot_be_asked(tmp_path, caplog):
    config = settings_file(tmp_path, "http://127.0.0.1:9", tmp_path / "wh")   # discard port
    hour = 1_800_000_000_000 - 1_800_000_000_000 % HOUR
    assert dag_steps.audit_gate(at(hour), at(hour + HOUR), config) is False
    assert "cannot be asked" in caplog.text
    with pytest.raises(StepFailed, match="not one whole hour"):
        dag_steps.audit_gate(at(hour), at(hour + 2 * HOUR), config)


def test_the_day_report_is_kept_beside_the_data_and_a_loss_fails_it(audit, tmp_path):
    service, url = audit
    now = dag_steps._ms(dt.datetime.now(dt.timezone.utc))
    day = now - now % (24 * HOUR) - 24 * HOUR            # yesterday (UTC)
    ids = [uuid.uuid4().bytes for _ in range(30)]
    # reported in time (an hour after the windows), as a producer with a right clock does
    service.store.add_events(tier_events("producer", "dc-a", ids, day + 5 * HOUR, now)
                             + tier_events("cluster", "analysis", ids, day + 5 * HOUR, now),
                             day + 6 * HOUR)
    output = tmp_path / "wh"
    config = settings_file(tmp_path, url, output)
    result = dag_steps.audit_report(at(day), at(day + 24 * HOUR), config)
    assert result["summary"]["complete"] >= 2 and result["summary"]["lost"] == 0
    folder = output / "_audit" / f"date={at(day):%Y-%m-%d}"
    assert json.loads((folder / "report.json").read_text())["verdicts"]
    assert "page_views" in (folder / "report.html").read_text()

    lost = [uuid.uuid4().bytes for _ in range(10)]
    service.store.add_events(tier_events("producer", "dc-a", lost, day + 7 * HOUR, now)
                             + tier_events("cluster", "analysis", lost[3:], day + 7 * HOUR,
                                           now), day + 8 * HOUR)
    with pytest.raises(StepFailed, match="1 windows with lost messages"):
        dag_steps.audit_report(at(day), at(day + 24 * HOUR), config)
    report = json.loads((folder / "report.json").read_text())
    assert report["summary"]["lost"] == 1
    with pytest.raises(StepFailed, match="not one whole day"):
        dag_steps.audit_report(at(day), at(day + HOUR), config)


@pytest.mark.parametrize("first_ask_h, timeout_h, grace_h, gives_up_h", [
    # hours after the end of the hour loaded
    (2.0, 6.0, 0.5, 8.0),           # an old hour: the timeout after the first ask
    (0.05, 0.25, 0.5, 0.5 + 10 / 3600),     # just ended, a timeout shorter than the grace:
                                    # not before the grace has passed (+ two asks of 5 s)
    (0.1, 0.5, 0.5, 0.6),           # the timeout ends after the grace: the timeout
])
def test_the_sensor_never_gives_up_before_the_audit_can_call_the_hour_lost(
        first_ask_h, timeout_h, grace_h, gives_up_h):
    """The demo's 900 s timeout against the audit's 30-minute grace (issue 25):
    a run of an hour that just ended gave up while the audit still called
    its windows pending."""
    hour_end = 1_800_000_000_000 - 1_800_000_000_000 % HOUR
    ms = lambda h: int(round(h * HOUR))  # noqa: E731
    assert dag_steps.sensor_deadline_ms(hour_end + ms(first_ask_h), timeout_h * 3600,
                                        hour_end + ms(grace_h), 5.0) == hour_end + ms(gives_up_h)


def test_the_sensor_waits_out_a_grace_that_a_late_report_extended(audit, tmp_path):
    """Producers whose clock is behind (or a backfill) report into an hour
    long ended: the audit keeps its windows pending a grace after that
    report, and the sensor's deadline follows (docs/audit.md, "Producer
    clocks"), not the hour's end + the grace."""
    service, url = audit
    now = dag_steps._ms(dt.datetime.now(dt.timezone.utc))
    hour = now - now % HOUR - 3 * HOUR
    ids = [uuid.uuid4().bytes for _ in range(10)]
    service.store.add_events(tier_events("producer", "dc-a", ids, hour + 5 * WINDOW, now)
                             + tier_events("cluster", "analysis", ids[2:], hour + 5 * WINDOW,
                                           now), now)           # reported just now
    state, grace_ends, _lines = dag_steps.ask_audit(at(hour), at(hour + HOUR),
                                                    settings_file(tmp_path, url,
                                                                  tmp_path / "wh"))
    assert state == "waiting"                # the loss is not called yet
    assert now + 60_000 <= grace_ends <= now + 60_000 + 5_000    # the fixture's grace
    assert dag_steps.sensor_deadline_ms(now, 30, grace_ends, 5.0) == grace_ends + 10_000


def test_a_run_whose_logical_date_is_outside_its_hour_is_refused_with_what_to_do():
    """`airflow dags trigger --logical-date H` gives the run the hour of the
    call, not H: the sensor refuses it (issue 25's review)."""
    hour = at(1_800_000_000_000 - 1_800_000_000_000 % HOUR)
    later = hour + dt.timedelta(hours=4)
    assert dag_steps.run_outside_its_hour(hour, hour, hour + dt.timedelta(hours=1)) is None
    assert dag_steps.run_outside_its_hour(hour + dt.timedelta(minutes=25), hour,
                                          hour + dt.timedelta(hours=1)) is None   # the UI's "now"
    assert dag_steps.run_outside_its_hour(None, hour, hour + dt.timedelta(hours=1)) is None
    refused = dag_steps.run_outside_its_hour(hour, later, later + dt.timedelta(hours=1))
    assert "is outside the hour it would load" in refused
    assert "airflow backfill create" in refused and "REST API" in refused
