"""The lag service's HTTP answers, path by path (issue 26, point 8: served by
the service kit's JSON server and metrics exposition; issue 27: Burrow's
answers, tests/coordination/test_lag_service_burrow.py holds their shape):
Burrow's JSON, Burrow's 404s for what does not exist, the query string
ignored however malformed, /healthz, and /metrics as Prometheus text with
the same families and HELP as before."""
from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from broker.coordination.offsets import commit_offsets
from broker.coordination.named_cluster import NamedCluster
from broker.lag.config import LagServiceConfig
from broker.lag.service import LagService

FAMILIES = {   # name: (type, HELP), as the service has always exposed them
    "samsa_group_status": ("gauge", "worst partition status: 0 OK, 1 WARN, 2 STALL, 3 STOP, "
                                    "4 REWIND"),
    "samsa_group_lag_bytes": ("gauge", "total lag of the group"),
    "samsa_partition_status": ("gauge", "0 OK, 1 WARN, 2 STALL, 3 STOP, 4 REWIND"),
    "samsa_partition_lag_bytes": ("gauge", "log end - committed offset"),
    "samsa_partition_lag_seconds": ("gauge", "age of the next message to consume; 0 when "
                                             "caught up"),
    "samsa_partition_owner_alive": ("gauge", "1 if a live member owns the partition"),
    "samsa_lag_evaluation_seconds": ("gauge", "duration of the last evaluation"),
    "samsa_lag_evaluation_errors": ("counter", "evaluations that failed"),
}


def get(url: str) -> tuple[int, str, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.headers["Content-Type"], r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers["Content-Type"], exc.read()


def get_json(url: str) -> tuple[int, dict]:
    status, kind, body = get(url)
    assert kind == "application/json", (url, kind)
    return status, json.loads(body)


def test_every_path_answers(zookeeper, zk_client, zk_chroot):
    commit_offsets(zk_client, "watched", {("events", "0-0"): 1234, ("events", "0-1"): 99})
    service = LagService(LagServiceConfig(
        clusters=(NamedCluster("dc", zookeeper.connect_string(zk_chroot)),),
        http_port=0, interval_s=3600)).start()
    base = f"http://127.0.0.1:{service.port}"
    host = socket.gethostname()

    def request(path: str) -> dict:
        return {"url": path, "host": host}
    try:
        assert service.wait_ready(30)
        assert get_json(f"{base}/healthz") == (200, {"ready": True})
        assert get_json(f"{base}/v3/kafka") == (200, {
            "error": False, "message": "cluster list returned", "clusters": ["dc"],
            "request": request("/v3/kafka")})
        # a malformed query string changes nothing: the service reads none
        assert get_json(f"{base}/v3/kafka?%zz&=&a=1&a") == get_json(f"{base}/v3/kafka")
        assert get_json(f"{base}/v3/kafka/dc/consumer") == (200, {
            "error": False, "message": "consumer list returned", "consumers": ["watched"],
            "last_error": None, "request": request("/v3/kafka/dc/consumer")})

        status, body = get_json(f"{base}/v3/kafka/dc/consumer/watched/lag")
        assert status == 200 and body["error"] is False and body["last_error"] is None
        assert body["message"] == "consumer status returned"
        lag = body["status"]
        assert lag["cluster"] == "dc" and lag["group"] == "watched"
        # no broker here: the commits are read, the lag is not known
        assert {p["broker_partition"]: (p["partition"], p["committed"], p["lag_bytes"],
                                        p["current_lag"], p["start"])
                for p in lag["partitions"]} == {"0-0": (0, 1234, None, 0, None),
                                                "0-1": (1, 99, None, 0, None)}
        status, body = get_json(f"{base}/v3/kafka/dc/consumer/watched/status")
        assert status == 200 and body["status"]["partitions"] == []      # none is bad
        assert set(body["status"]) == set(lag)

        assert get_json(f"{base}/v3/kafka/nowhere/consumer") == (404, {
            "error": True, "message": "cluster not found",
            "request": request("/v3/kafka/nowhere/consumer")})
        assert get_json(f"{base}/v3/kafka/dc/consumer/nobody/lag") == (404, {
            "error": False, "message": "consumer status returned",
            "status": {"cluster": "dc", "group": "nobody", "status": "NOTFOUND",
                       "complete": 1.0, "partitions": [], "partition_count": 0,
                       "maxlag": None, "totallag": 0},
            "request": request("/v3/kafka/dc/consumer/nobody/lag")})
        for path in ("/", "/nothing", "/v3", "/v3/kafka/dc/consumer/watched/other",
                     "/v3/kafka/dc/topic", "/v3/kafka/dc", "/v3/kafka/dc/consumer/watched",
                     "/v3/config"):                     # Burrow's, not served here
            assert get_json(base + path) == (404, {
                "error": True, "message": "invalid request type",
                "request": request(path)}), path

        status, kind, text = get(f"{base}/metrics")
        assert status == 200 and kind == "text/plain; version=0.0.4; charset=utf-8"
        families = {f.name: f for f in text_string_to_metric_families(text.decode())}
        assert {n: (f.type, f.documentation) for n, f in families.items()} == FAMILIES
        samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
                   for f in families.values() for s in f.samples}
        assert ("samsa_partition_status", (("cluster", "dc"), ("group", "watched"),
                                           ("partition", "0-0"), ("topic", "events"))) \
            in samples
        assert samples[("samsa_lag_evaluation_errors_total", (("cluster", "dc"),))] == 0
    finally:
        service.stop()
