"""The Prometheus endpoint of a real broker process reports what traffic did:
messages and bytes in by topic, requests by API, errors, flushes, log sizes
and offsets per partition."""
from __future__ import annotations

from broker.client.consumer import Consumer
from broker.client.producer import Producer

from broker_helpers import connect, fetch, log_sizes, metric, scrape_metrics


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


def test_error_results_are_counted_by_api_and_error(broker, admin):
    with connect(broker.address) as conn:
        assert fetch(conn, "missing", 0, 0).error != 0
    m = scrape_metrics(broker.metrics_port)
    assert metric(m, "samsa_request_errors_total", api="fetch",
                  error="UNKNOWN_TOPIC_OR_PARTITION") == 1
