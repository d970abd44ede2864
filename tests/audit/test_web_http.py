"""The audit service's HTTP answers, path by path (issue 26, point 8: served by
the service kit's JSON server and metrics exposition now; the answers are the
ones it gave before): JSON and pages, 400 with the reason for a malformed
query, 404 for a page that does not exist, /metrics as Prometheus text with
the same families and HELP as before. A real service (ZooKeeper, SQLite) whose
events are stored straight into its database."""
from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from audit.config import ServeConfig
from audit.service import AuditService
from test_service import HOUR, scenario

FAMILIES = {   # name: (type, HELP), as the service has always exposed them (and one more)
    "samsa_audit_events_read": ("counter", "Monitoring events read"),
    "samsa_audit_events_stored": ("counter", "Monitoring events stored (new)"),
    "samsa_audit_events_deduplicated": ("counter", "Monitoring events read again, dropped"),
    "samsa_audit_malformed_events": ("counter", "Values of the audit topic that are not "
                                                "monitoring events"),
    "samsa_audit_store_failures": ("counter", "Writes of monitoring events the database "
                                              "refused (tried again)"),
    "samsa_audit_windows": ("gauge", "Verdicts per state over the default period"),
}


def get(port: int, path: str):
    """(status, Content-Type, Cache-Control, body: JSON decoded, else text)."""
    try:
        r = urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10)
    except urllib.error.HTTPError as exc:
        r = exc
    with r:
        body = r.read()
        kind = r.headers["Content-Type"]
        return (r.status if hasattr(r, "status") else r.code, kind, r.headers["Cache-Control"],
                json.loads(body) if kind == "application/json" else body.decode())


def test_every_path_answers_as_before(zookeeper, zk_client, zk_chroot, tmp_path):
    now = int(time.time() * 1000)
    events, begin, end = scenario(now)
    config = ServeConfig(zookeeper=zookeeper.connect_string(zk_chroot), http_port=0,
                         grace_ms=60_000, data_dir=str(tmp_path))
    service = AuditService(config)
    try:
        service.store.add_events(events, received_ms=end)      # as the windows ended
        service.consumed, service.stored, service.duplicates, service.malformed = 9, 7, 2, 1
        port = service.serve_http()

        assert get(port, "/healthz") == (200, "text/plain", "no-store", "ok\n")
        status, kind, cache, body = get(port, f"/api/verdicts?topic=page_views&from={begin}"
                                              f"&to={end}")
        assert (status, kind, cache) == (200, "application/json", "no-store")
        assert set(body) == {"from_ms", "to_ms", "now_ms", "grace_ms", "summary", "verdicts"}
        assert (body["from_ms"], body["to_ms"]) == (begin, end) and len(body["verdicts"]) == 9
        # names without values, empty pairs and stray '&' are passed over, as before
        assert get(port, f"/api/verdicts?&&topic&=x&topic=page_views&from={begin}&to={end}"
                   )[3]["verdicts"] == body["verdicts"]
        status, _kind, _cache, body = get(port, f"/api/completeness?topic=page_views"
                                                f"&window={begin}")
        assert status == 200 and body["complete"] is True and body["windows"] == 1
        hour = begin - begin % HOUR
        status, _kind, _cache, body = get(port, f"/api/completeness?topic=page_views&hour={hour}")
        assert status == 200 and body["complete"] is False and body["lost"] is True

        for path, error in (
                ("/api/verdicts?hours=many", "hours must be a number"),
                ("/api/verdicts?from=yesterday", "bad time 'yesterday': ms since the epoch or "
                                                 "ISO 8601"),
                ("/api/verdicts?from=2&to=1", "from must be before to"),
                ("/api/verdicts?from=%zz", "bad time '%zz': ms since the epoch or ISO 8601"),
                ("/api/completeness?topic=page_views", "give window=<window start> or "
                                                       "hour=<hour start>"),
                ("/api/completeness?window=1", "missing parameter 'topic'"),
                ("/api/completeness?topic=&window=1", "missing parameter 'topic'"),
                (f"/api/completeness?topic=page_views&hour={hour + 1}",
                 "hour must be the start of an hour"),
                ("/window?topic=page_views", "missing parameter 'begin'"),
                ("/?hours=x", "hours must be a number")):
            assert get(port, path) == (400, "application/json", "no-store", {"error": error}), \
                path
        for path in ("/nothing", "/api", "/api/verdicts/more", "/metrics/x"):
            assert get(port, path) == (404, "application/json", "no-store",
                                       {"error": f"no such page: {path}"}), path

        status, kind, _cache, page = get(port, "/?hours=6")
        assert (status, kind) == (200, "text/html; charset=utf-8") and "tier: cluster" in page
        status, kind, _cache, page = get(port, f"/window?topic=page_views&begin={begin}")
        assert (status, kind) == (200, "text/html; charset=utf-8") and "analysis" in page

        status, kind, _cache, text = get(port, "/metrics")
        assert (status, kind) == (200, "text/plain; version=0.0.4; charset=utf-8")
        families = {f.name: f for f in text_string_to_metric_families(text)}
        assert {n: (f.type, f.documentation) for n, f in families.items()} == FAMILIES
        samples = {(s.name, tuple(s.labels.items())): s.value
                   for f in families.values() for s in f.samples}
        assert {k: v for k, v in samples.items() if not k[1]} == {
            ("samsa_audit_events_read_total", ()): 9, ("samsa_audit_events_stored_total", ()): 7,
            ("samsa_audit_events_deduplicated_total", ()): 2,
            ("samsa_audit_malformed_events_total", ()): 1,
            ("samsa_audit_store_failures_total", ()): 0}
        windows = {k[1][0][1]: v for k, v in samples.items() if k[1]}
        assert windows["lost"] == 1 and windows["lost_and_duplicated"] == 1
        assert windows["complete"] == 7
    finally:
        service.close()
