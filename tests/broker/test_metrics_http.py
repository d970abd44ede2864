"""The service kit's HTTP serving (broker/service_kit/json_http.py and
metrics_http.py), over real sockets: collectors exposed as Prometheus text
that prometheus_client's parser reads back with the families the services
have always had; the format, gzip and ``name[]`` as the scraper asks; a
service's JSON answers beside /metrics, 400 for a BadRequest, 500 for a
failure, 404 as the service says; the port freed by stop()."""
from __future__ import annotations

import gzip
import json
import socket
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from audit.counting import CounterConfig, MonitoringPublisher, TierCounter
from audit.metrics import CounterMetrics
from broker.service_kit.json_http import BadRequest, Request, json_response, parse_request
from broker.service_kit.metrics_http import serve_metrics
from mirror.metrics import MirrorMetrics

MIRROR_FAMILIES = {
    "samsa_mirror_messages": ("counter", "Messages copied and acknowledged by the target"),
    "samsa_mirror_bytes": ("counter", "Payload bytes copied and acknowledged by the target"),
    "samsa_mirror_lag_bytes": ("gauge", "Bytes of the source partition not yet copied"),
    "samsa_mirror_lag_messages": ("gauge", "Messages of the source partition not yet copied "
                                           "(estimated: bytes behind / mean message size)"),
    "samsa_mirror_lag_status": ("gauge", "The group's status on the source partition "
                                         "(docs/lag.md): 0 OK, 1 WARN, 2 STALL, 3 STOP, "
                                         "4 REWIND"),
    "samsa_mirror_record_age_seconds": ("gauge", "now - timestamp of the last message "
                                                 "copied, when written"),
    "samsa_mirror_unacknowledged_messages": ("gauge", "Messages sent to the target and not "
                                                      "yet acknowledged"),
    "samsa_mirror_resent_messages": ("counter", "Messages sent again after a retriable "
                                                "failure"),
    "samsa_mirror_corrupt_skipped_bytes": ("counter", "Corrupt source bytes skipped "
                                                      "(on_corrupt=skip)"),
    "samsa_mirror_send_errors": ("counter", "Failed sends to the target"),
    "samsa_mirror_write_age_seconds": ("histogram", "Age of each chunk's newest message "
                                                    "when written"),
}
COUNTER_FAMILIES = {
    "samsa_audit_messages_counted": ("counter", "Messages counted"),
    "samsa_audit_events_published": ("counter", "Monitoring events delivered"),
    "samsa_audit_publish_failures": ("counter", "Publishes that failed (retried)"),
    "samsa_audit_unsent_events": ("gauge", "Monitoring events not delivered yet"),
}


def get(port: int, path: str, **headers: str):
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers=headers)
    try:
        r = urllib.request.urlopen(request, timeout=10)
    except urllib.error.HTTPError as exc:
        r = exc
    with r:
        return r.code, r.headers, r.read()


def families(body: bytes) -> dict:
    return {f.name: f for f in text_string_to_metric_families(body.decode())}


def test_collectors_exposed_as_before_on_every_path():
    mirror = MirrorMetrics()
    mirror.copied("dc-a", {("clicks", "0-0"): (10, 1000)})
    mirror.written("dc-a", {("clicks", "0-0"): 0.5}, 0.5)
    mirror.set_lag("dc-a", {("clicks", "0-0"): 300}, {("clicks", "0-0"): 1})
    mirror.send_error("dc-a", "NOT_LEADER")
    counter = TierCounter(CounterConfig(tier="cluster", datacenter="dc-a", cluster="dc-a"))
    publisher = MonitoringPublisher(counter, encode=bytes, send=lambda values, times: None)
    server = serve_metrics("127.0.0.1", 0, mirror, CounterMetrics(counter, publisher))
    try:
        for path in ("/metrics", "/", "/anything"):       # as prometheus_client's own server
            status, headers, body = get(server.port, path)
            assert status == 200
            assert headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
            found = families(body)
            assert {n: (f.type, f.documentation) for n, f in found.items()} == \
                {**MIRROR_FAMILIES, **COUNTER_FAMILIES}
        samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
                   for f in found.values() for s in f.samples}
        key = (("partition", "0-0"), ("source", "dc-a"), ("topic", "clicks"))
        assert samples[("samsa_mirror_messages_total", key)] == 10
        assert samples[("samsa_mirror_lag_messages", key)] == 3
        assert samples[("samsa_mirror_send_errors_total",
                        (("error", "NOT_LEADER"), ("source", "dc-a")))] == 1
        assert samples[("samsa_mirror_write_age_seconds_count", (("source", "dc-a"),))] == 1
        assert samples[("samsa_audit_messages_counted_total",
                        (("cluster", "dc-a"), ("tier", "cluster")))] == 0

        # what a scraper may ask: OpenMetrics, gzip, some series only
        status, headers, body = get(server.port, "/metrics",
                                    Accept="application/openmetrics-text; version=1.0.0")
        assert headers["Content-Type"].startswith("application/openmetrics-text")
        assert body.endswith(b"# EOF\n")
        status, headers, body = get(server.port, "/metrics", **{"Accept-Encoding": "gzip"})
        assert headers["Content-Encoding"] == "gzip"
        assert set(families(gzip.decompress(body))) == set(MIRROR_FAMILIES) | \
            set(COUNTER_FAMILIES)
        status, headers, body = get(server.port,
                                    "/metrics?name[]=samsa_mirror_lag_bytes")
        assert set(families(body)) == {"samsa_mirror_lag_bytes"}
    finally:
        server.stop()


def test_a_service_answers_beside_metrics_and_the_port_is_freed():
    def answer(request: Request):
        if request.segments == ["echo", "a b"]:          # unquoted segment by segment
            return json_response({"query": request.query, "path": request.path})
        if request.path == "/bad":
            raise BadRequest("no good")
        if request.path == "/boom":
            raise RuntimeError("a bug")
        return json_response({"error": "none here"}, 404)

    mirror = MirrorMetrics()
    server = serve_metrics("127.0.0.1", 0, mirror, answer=answer, name="test")
    port = server.port
    try:
        status, headers, body = get(port, "/metrics")
        assert status == 200 and set(families(body)) == set(MIRROR_FAMILIES)
        status, headers, body = get(port, "/echo/a%20b?x=1&x=2&y=%41&&z")
        assert (status, headers["Content-Type"], headers["Cache-Control"]) == \
            (200, "application/json", "no-store")
        assert headers["Server"].startswith("samsa-test")
        assert json.loads(body) == {"query": {"x": "2", "y": "A"}, "path": "/echo/a%20b"}
        assert (get(port, "/bad")[0], json.loads(get(port, "/bad")[2])) == \
            (400, {"error": "no good"})
        assert (get(port, "/boom")[0], json.loads(get(port, "/boom")[2])) == \
            (500, {"error": "internal error"})
        assert get(port, "/elsewhere")[0] == 404
    finally:
        server.stop()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=5).close()


def test_parse_request_splits_path_and_query():
    request = parse_request("/v3/kafka/dc%2Da//consumer?a=1&b=&a=3", {"Accept": "x"})
    assert request.segments == ["v3", "kafka", "dc-a", "consumer"]
    assert request.query == {"a": "3"} and request.query_string == "a=1&b=&a=3"
    assert request.headers["Accept"] == "x"


def test_methods_beyond_get_and_the_body_limit():
    """GET only unless the service asks for more methods (405 otherwise); a
    body reaches the answer; one over ``max_body`` is read, dropped and 413."""
    seen = []

    def answer(request: Request):
        seen.append((request.method, request.body))
        return json_response({"method": request.method, "bytes": len(request.body)})

    get_only = serve_metrics("127.0.0.1", 0, answer=answer, name="get-only")
    both = serve_metrics("127.0.0.1", 0, answer=answer, name="posts",
                         methods=("GET", "POST"), max_body=1000)
    try:
        def call(server, method, data=None):
            request = urllib.request.Request(f"http://127.0.0.1:{server.port}/x", data=data,
                                             method=method)
            try:
                with urllib.request.urlopen(request, timeout=10) as r:
                    return r.status, json.loads(r.read())
            except urllib.error.HTTPError as exc:
                return exc.code, json.loads(exc.read())

        status, body = call(get_only, "POST", b"{}")
        assert status == 405 and "POST" in body["error"]
        assert call(both, "POST", b"x" * 1000) == (200, {"method": "POST", "bytes": 1000})
        status, body = call(both, "POST", b"x" * 300_000)         # beyond a socket buffer
        assert status == 413 and "1000" in body["error"]
        assert call(both, "GET") == (200, {"method": "GET", "bytes": 0})
        assert seen == [("POST", b"x" * 1000), ("GET", b"")]
    finally:
        get_only.stop()
        both.stop()


def test_connections_are_capped_and_idle_ones_closed(monkeypatch):
    """A stranger's idle connections hold neither threads nor the port for
    long: at most MAX_CONNECTIONS at once, each closed after the idle time."""
    import socket
    from broker.service_kit import json_http
    monkeypatch.setattr(json_http, "MAX_CONNECTIONS", 3)
    monkeypatch.setattr(json_http._Handler, "timeout", 1.0)
    server = json_http.JSONHTTPServer("127.0.0.1", 0, lambda r: json_response({"ok": 1}),
                                      "test").start()
    try:
        idle = [socket.create_connection(("127.0.0.1", server.port), timeout=5)
                for _ in range(3)]
        extra = socket.create_connection(("127.0.0.1", server.port), timeout=5)
        assert extra.recv(1) == b""             # closed at once: no slot
        extra.close()
        for sock in idle:                        # the idle ones are closed after a second
            assert sock.recv(1) == b""
            sock.close()
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
            sock.sendall(b"GET / HTTP/1.0\r\n\r\n")
            assert sock.recv(100).startswith(b"HTTP/1.0 200")
    finally:
        server.stop()
