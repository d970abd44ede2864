"""The audit service against a real analysis cluster: monitoring events in
(each once, however often delivered; malformed values counted and skipped),
verdicts out over HTTP and from the report command, on SQLite and PostgreSQL."""
from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid

import pytest

from audit.config import ServeConfig
from audit.counting import AUDIT_TOPIC, CounterConfig, TierCounter
from audit.service import AuditService
from audit.store import Store
from audit_helpers import WINDOW
from broker.client.cluster_producer import ClusterProducer
from broker_helpers import wait_until
from schemas import catalog
from schemas.registry import SchemaRegistry
from schemas.wire import ValueWriter

HOUR = 3_600_000


def value(eid: bytes) -> bytes:
    return b"\x00\x00\x00\x00\x01\x02\x00\x00" + eid


def tier_events(tier, cluster, ids, begin, now, dedup=False, dc=None) -> list[dict]:
    c = TierCounter(CounterConfig(tier=tier, datacenter=dc or cluster, cluster=cluster,
                                  window_ms=WINDOW, dedup_ids=dedup))
    c.add_values("page_views", [value(i) for i in ids], begin + 1, now_ms=now)
    return c.drain(now_ms=now)


def scenario(now: int) -> tuple[list[dict], int, int]:
    """Events of three windows of the last hours: complete, 3 lost at the
    analysis cluster, and (counts equal) 2 lost + 2 duplicated there."""
    base = now - now % HOUR - 2 * HOUR
    events = []
    for k, begin in enumerate((base, base + WINDOW, base + 2 * WINDOW)):
        ids = [uuid.uuid4().bytes for _ in range(50)]
        seen = {0: ids, 1: ids[3:], 2: ids[2:] + ids[10:12]}[k]
        events += tier_events("producer", "dc-a", ids, begin, now)
        events += tier_events("cluster", "dc-a", ids, begin, now, dedup=True)
        events += tier_events("cluster", "analysis", seen, begin, now, dedup=True)
    return events, base, base + 3 * WINDOW


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'audit.db'}"
    return request.getfixturevalue("postgres_url")


def get(port: int, path: str):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
            body = r.read()
            return r.status, (json.loads(body) if r.headers.get_content_type()
                              == "application/json" else body.decode())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_service_end_to_end(clusters, db_url, tmp_path):
    analysis = clusters("analysis")
    now = int(time.time() * 1000)
    events, begin, end = scenario(now)
    with SchemaRegistry.open(f"zookeeper://{analysis.connect}") as registry:
        registry.register(AUDIT_TOPIC, catalog.load(catalog.MONITORING_EVENT))
        writer = ValueWriter(registry, AUDIT_TOPIC)
        producer = ClusterProducer(analysis.connect, acks="flushed")
        try:
            for e in events + events[:4]:          # four events delivered twice
                producer.send(AUDIT_TOPIC, writer.encode(e))
            producer.send(AUDIT_TOPIC, b"not a monitoring event")
            # an envelope naming a schema no registry has
            producer.send(AUDIT_TOPIC, b"\x00\xde\xad\xbe\xef" + writer.encode(events[0])[5:])
            producer.send(AUDIT_TOPIC, writer.encode({**events[0], "window_end_ms": 0}))
            producer.flush()
        finally:
            producer.close()
    # the reports of these old windows reach the audit now: a grace (1 s)
    # after that, what is missing is lost
    config = ServeConfig(zookeeper=analysis.connect, db_url=db_url, http_port=0,
                         grace_ms=1_000, data_dir=str(tmp_path))
    service = AuditService(config)
    try:
        port = service.serve_http()
        wait_until(lambda: service.step() >= 0 and service.consumed + service.malformed
                   >= len(events) + 7, 60, what="every event read")
        assert (service.stored, service.duplicates, service.malformed) == (len(events), 4, 3)
        wait_until(lambda: any(v.state == "lost" for v in service.verdicts("page_views", begin,
                                                                           end)),
                   30, what="the grace after the reports to pass")

        status, body = get(port, f"/api/verdicts?topic=page_views&from={begin}&to={end}")
        assert status == 200
        states = {(v["window_begin_ms"], v["tier"], v["cluster"]): (v["state"], v["missing"],
                                                                    v["duplicated"])
                  for v in body["verdicts"]}
        assert states[(begin, "cluster", "analysis")] == ("complete", 0, 0)
        assert states[(begin + WINDOW, "cluster", "analysis")] == ("lost", 3, 0)
        assert states[(begin + 2 * WINDOW, "cluster", "analysis")] == \
            ("lost_and_duplicated", 2, 2)
        assert states[(begin + WINDOW, "cluster", "dc-a")] == ("complete", 0, 0)

        status, body = get(port, f"/api/completeness?topic=page_views&window={begin}")
        assert status == 200 and body["complete"] is True
        status, body = get(port, f"/api/completeness?topic=page_views&window={begin + WINDOW}")
        assert body["complete"] is False and body["lost"] is True
        status, body = get(port, f"/api/completeness?topic=page_views&window={begin + WINDOW}"
                                 f"&tier=producer")
        assert body["complete"] is True
        hour = begin - begin % HOUR
        status, body = get(port, f"/api/completeness?topic=page_views&hour={hour}&tier=cluster")
        assert body["complete"] is False and body["windows"] == 3
        status, body = get(port, "/api/completeness?topic=page_views")
        assert status == 400 and "window=" in body["error"]

        status, page = get(port, "/?hours=6")
        assert status == 200 and "tier: cluster" in page and "lost and duplicated" in page
        status, page = get(port, f"/window?topic=page_views&begin={begin + WINDOW}")
        assert status == 200 and "analysis" in page and "lost" in page
        status, metrics = get(port, "/metrics")
        assert "samsa_audit_events_deduplicated_total 4" in metrics
        assert "samsa_audit_malformed_events_total 3" in metrics
        assert 'samsa_audit_windows{state="lost"} 1' in metrics
    finally:
        service.close()

    # the report command reads the same database
    report = [sys.executable, "-m", "audit", "report", "--db", db_url, "--topic", "page_views",
              "--from", str(begin), "--to", str(end), "--grace-ms", "1000"]
    out = subprocess.run(report, capture_output=True, text=True, timeout=60)
    assert out.returncode == 1, out.stderr        # something is lost
    assert "lost_and_duplicated" in out.stdout and "summary:" in out.stdout
    out = subprocess.run(report + ["--json", "--tier", "producer"], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0
    assert json.loads(out.stdout)["summary"]["complete"] == 3


def test_late_data_is_pending_within_the_grace_then_complete(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'audit.db'}")
    store.upgrade()
    now = int(time.time() * 1000)
    begin = now - now % WINDOW - WINDOW          # the window that just ended
    ids = [uuid.uuid4().bytes for _ in range(20)]
    store.add_events(tier_events("producer", "dc-a", ids, begin, now), now)
    store.add_events(tier_events("cluster", "analysis", ids[:15], begin, now, dedup=True), now)
    from audit import report
    (v,) = report.verdicts(store, "page_views", begin, begin + 1, now, 30 * 60_000, "cluster")
    assert v.state == "pending" and v.missing == 5
    store.add_events(tier_events("cluster", "analysis", ids[15:], begin, now, dedup=True), now)
    (v,) = report.verdicts(store, "page_views", begin, begin + 1, now, 30 * 60_000, "cluster")
    assert v.state == "complete"
    store.close()


def test_serve_help_and_report_without_a_database(tmp_path):
    out = subprocess.run([sys.executable, "-m", "audit", "serve", "--help"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "/api/completeness" in out.stdout
    out = subprocess.run([sys.executable, "-m", "audit", "report", "--data-dir", str(tmp_path)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "no audit database" in out.stderr
    out = subprocess.run([sys.executable, "-m", "audit", "report", "--data-dir", str(tmp_path),
                          "--from", "yesterday"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "bad time 'yesterday'" in out.stderr


def test_report_on_a_database_behind_the_schema_says_how_to_upgrade(tmp_path):
    """A database a service of an older release made (schema 0001, before the
    late-copy sums): the report says to upgrade instead of failing on the
    missing columns; after the upgrade it reads it."""
    from audit.store import Store, default_url
    store = Store(default_url(str(tmp_path)))
    store.upgrade("0001")
    store.close()
    report = [sys.executable, "-m", "audit", "report", "--data-dir", str(tmp_path)]
    out = subprocess.run(report, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "schema revision 0001" in out.stderr and "python -m audit db upgrade" in out.stderr
    upgrade = subprocess.run([sys.executable, "-m", "audit", "db", "upgrade", "--data-dir",
                              str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert upgrade.returncode == 0, upgrade.stderr
    out = subprocess.run(report, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr


def test_a_database_that_cannot_be_written_holds_the_chunk_and_loses_nothing(
        clusters, postgres_url, tmp_path, postgres_server):
    """The credentials file gone while the service runs (an operator's
    mistake; RDS's rotation rewrites it whole): the chunk read is kept and
    tried again, nothing is acknowledged meanwhile, the service keeps
    running, and once the file is back every event is stored once."""
    analysis = clusters("analysis")
    now = int(time.time() * 1000)
    events, _, _ = scenario(now)
    first, second = events[:5], events[5:]
    credentials = tmp_path / "audit-db.json"
    credentials.write_text(json.dumps({"username": postgres_server.user, "password": "unused"}))
    with SchemaRegistry.open(f"zookeeper://{analysis.connect}") as registry:
        registry.register(AUDIT_TOPIC, catalog.load(catalog.MONITORING_EVENT))
        writer = ValueWriter(registry, AUDIT_TOPIC)
        with ClusterProducer(analysis.connect, acks="flushed") as producer:
            for e in first:
                producer.send(AUDIT_TOPIC, writer.encode(e))
            producer.flush()
        service = AuditService(ServeConfig(zookeeper=analysis.connect, db_url=postgres_url,
                                           db_credentials_file=str(credentials), http_port=0,
                                           data_dir=str(tmp_path)))
        try:
            wait_until(lambda: service.step() >= 0 and service.stored == len(first), 60,
                       what="the first events stored")
            credentials.unlink()
            service.store.engine.dispose()         # the next write opens a new connection
            with ClusterProducer(analysis.connect, acks="flushed") as producer:
                for e in second:
                    producer.send(AUDIT_TOPIC, writer.encode(e))
                producer.flush()
            wait_until(lambda: service.step() >= 0 and service.store_failures >= 2, 60,
                       what="the write to fail twice")
            assert service.stored == len(first) and service.consumed == len(first)
            port = service.serve_http()
            status, metrics = get(port, "/metrics")
            assert status == 200
            failures = [line for line in metrics.splitlines()
                        if line.startswith("samsa_audit_store_failures_total ")]
            assert failures and float(failures[0].split()[1]) >= 2, failures
            credentials.write_text(json.dumps({"username": postgres_server.user,
                                               "password": "unused"}))
            wait_until(lambda: service.step() >= 0 and service.stored == len(events), 60,
                       what="the kept chunk stored once the file is back")
            assert service.consumed == len(events) and service.duplicates == 0
        finally:
            service.close()
    # every event once
    store = Store(postgres_url)
    try:
        with store.engine.connect() as conn:
            from sqlalchemy import text
            assert conn.execute(text("SELECT count(*) FROM monitoring_events")).scalar() == \
                len(events)
    finally:
        store.close()


def test_an_event_the_database_refuses_is_skipped_and_the_rest_stored(clusters, postgres_url,
                                                                        tmp_path):
    """A tier name longer than its column (32): PostgreSQL refuses the
    event; the chunk's other events are stored, the refused one counted as
    malformed, and the service goes on (it does not retry it forever)."""
    analysis = clusters("analysis")
    events, _, _ = scenario(int(time.time() * 1000))
    refused = {**events[0], "event_id": uuid.uuid4().bytes, "tier": "t" * 40}
    with SchemaRegistry.open(f"zookeeper://{analysis.connect}") as registry:
        registry.register(AUDIT_TOPIC, catalog.load(catalog.MONITORING_EVENT))
        writer = ValueWriter(registry, AUDIT_TOPIC)
        with ClusterProducer(analysis.connect, acks="flushed") as producer:
            for e in [refused, *events]:
                producer.send(AUDIT_TOPIC, writer.encode(e))
            producer.flush()
        service = AuditService(ServeConfig(zookeeper=analysis.connect, db_url=postgres_url,
                                           http_port=0, data_dir=str(tmp_path)))
        try:
            wait_until(lambda: service.step() >= 0 and service.stored == len(events), 60,
                       what="the other events stored")
            assert service.malformed == 1 and service.store_failures == 0
            assert service.consumed == len(events)
        finally:
            service.close()
