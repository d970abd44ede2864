"""The Prometheus endpoint of a real broker process reports what traffic did:
messages and bytes in by topic, requests by API, errors, flushes, log sizes
and offsets per partition."""
from __future__ import annotations

import os
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from broker.client.consumer import Consumer
from broker.client.producer import Producer
from broker.protocol import api
from broker.protocol.errors import ErrorCode

from broker_helpers import (connect, fetch, log_sizes, metric, raw_socket, read_frame,
                            scrape_metrics)

COUNTERS = ("messages_in", "bytes_in", "bytes_out", "messages_out", "requests", "request_errors",
            "flushes", "page_cache_dropped_bytes", "sendfile_bytes", "tls_fetch_bytes",
            "memory_trims", "authentications", "authorization_denials", "validations_off_loop", "produce_short_cuts",
            "connections_throttled", "connections_closed_idle", "request_memory_waits")
GAUGES = ("page_cache_budget_bytes", "connections", "request_memory_bytes", "log_size_bytes",
          "log_segments", "log_end_offset", "log_flushed_offset", "log_quarantined_bytes",
          "log_dir_free_bytes", "log_dir_capacity_bytes")


def test_metrics_after_traffic(broker, admin):
    admin.create_topic("clicks", 2)
    with Producer(bootstrap=broker.address, acks="flushed", batch_size=10,
                  linger_ms=60_000) as producer:
        for i in range(100):
            producer.send("clicks", b"click %d" % i)
    with Consumer(bootstrap=broker.address, max_wait_ms=100) as consumer:
        consumer.assign([("clicks", 0), ("clicks", 1)], start="earliest")
        consumed = 0
        while consumed < 100:
            batch = consumer.poll(timeout_ms=5000)
            assert batch, f"only {consumed} of 100 messages came back"
            consumed += len(batch)
    with connect(broker.address) as conn:
        sizes = log_sizes(conn, "clicks")

    m = scrape_metrics(broker.metrics_port)
    assert metric(m, "samsa_messages_in_total", topic="clicks") == 100
    assert metric(m, "samsa_bytes_in_total", topic="clicks") == sum(sizes)
    assert metric(m, "samsa_bytes_out_total", topic="clicks") == sum(sizes)
    assert metric(m, "samsa_messages_out_total", topic="clicks") == 100
    assert metric(m, "samsa_requests_total", api="produce") == 10
    assert metric(m, "samsa_requests_total", api="fetch") >= 1
    assert metric(m, "samsa_requests_total", api="create_topic") == 1
    assert metric(m, "samsa_flushes_total") >= 2          # acks=flushed: both partitions
    assert metric(m, "samsa_flush_seconds_count") == metric(m, "samsa_flushes_total")
    for p, size in enumerate(sizes):
        labels = {"topic": "clicks", "partition": str(p)}
        assert size > 0
        assert metric(m, "samsa_log_size_bytes", **labels) == size
        assert metric(m, "samsa_log_end_offset", **labels) == size
        assert metric(m, "samsa_log_flushed_offset", **labels) == size
        assert metric(m, "samsa_log_segments", **labels) == 1
    assert metric(m, "samsa_connections") >= 1                # the admin client's


def test_log_dir_space_is_the_data_dirs_file_system(broker):
    """The disk-full alert's gauges (infra/prometheus/alerts.yml): the file
    system of the broker's data_dir as statvfs sees it."""
    before = os.statvfs(broker.data_dir)
    m = scrape_metrics(broker.metrics_port)
    after = os.statvfs(broker.data_dir)
    capacity = metric(m, "samsa_log_dir_capacity_bytes")
    free = metric(m, "samsa_log_dir_free_bytes")
    assert capacity == before.f_blocks * before.f_frsize
    low, high = sorted((before.f_bavail * before.f_frsize, after.f_bavail * after.f_frsize))
    # other writers on the machine move it: within what was seen around the scrape
    assert 0 < free <= capacity
    assert low - 64 * 1024 * 1024 <= free <= high + 64 * 1024 * 1024


def test_error_results_are_counted_by_api_and_error(broker, admin):
    with connect(broker.address) as conn:
        assert fetch(conn, "missing", 0, 0).error != 0
    m = scrape_metrics(broker.metrics_port)
    assert metric(m, "samsa_request_errors_total", api="fetch",
                  error="UNKNOWN_TOPIC_OR_PARTITION") == 1


def test_replication_requests_are_counted_under_their_own_api(broker):
    """ReplicaFetch and LeaderEpochEnd decode but are not served yet: each is
    counted under its API's name, with its UNSUPPORTED_VERSION answer."""
    requests = [api.ReplicaFetchRequest(1, 0, 0, ()), api.LeaderEpochEndRequest(1, ())]
    with raw_socket(broker.address) as sock:
        for i, request in enumerate(requests):
            sock.sendall(api.encode_request(request, i, "raw"))
            cid, response = api.decode_response(request.API, read_frame(sock))
            assert (cid, response.error) == (i, ErrorCode.UNSUPPORTED_VERSION)
    m = scrape_metrics(broker.metrics_port)
    for name in ("replica_fetch", "leader_epoch_end"):
        assert metric(m, "samsa_requests_total", api=name) == 1
        assert metric(m, "samsa_request_errors_total", api=name,
                      error="UNSUPPORTED_VERSION") == 1


def test_every_family_is_exposed_as_before(broker, admin):
    """Issue 26, point 8: served by the service kit now, the text parses with
    the same families, types and HELP as from prometheus_client's own server."""
    admin.create_topic("clicks", 1)
    with urllib.request.urlopen(f"http://127.0.0.1:{broker.metrics_port}/metrics",
                                timeout=10) as r:
        assert r.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
        families = {f.name: f for f in text_string_to_metric_families(r.read().decode())}
    assert {name: f.type for name, f in families.items()} == {
        **{f"samsa_{n}": "counter" for n in COUNTERS}, **{f"samsa_{n}": "gauge" for n in GAUGES},
        "samsa_flush_seconds": "histogram"}
    assert families["samsa_requests"].documentation == "Requests handled, by API"
    assert families["samsa_log_flushed_offset"].documentation == \
        "Flushed end: consumers see messages below it"
