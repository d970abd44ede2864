"""The lag service when its cluster's ZooKeeper dies (issue 16, a path the
first tests left out): it keeps serving the last evaluation, says the cycle
failed (``last_error`` on the HTTP answers, the errors counter), never
answers with an empty or made-up status, and recovers once ZooKeeper is
back. Defect it found: the cycle hung in kazoo (a synchronous read waits for
the reconnection), so the failure was never reported."""
from __future__ import annotations

import json
import threading
import urllib.request

from kazoo.client import KazooClient

from broker.coordination.offsets import commit_offsets
from broker.coordination.named_cluster import NamedCluster
from broker.lag.config import LagServiceConfig
from broker.lag.service import LagService

from broker_helpers import metric, scrape_metrics, wait_until


def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.load(r)


def test_a_dead_zookeeper_keeps_the_last_evaluation_and_says_so(own_zookeeper):
    own_zookeeper.start()
    connect = own_zookeeper.connect_string("/dc")
    root = KazooClient(hosts=own_zookeeper.connect_string(), timeout=10)
    root.start(timeout=15)
    root.ensure_path("/dc")
    root.stop()
    root.close()
    zk = KazooClient(hosts=connect, timeout=10)
    zk.start(timeout=15)
    commit_offsets(zk, "watched", {("events", "0-0"): 1234, ("events", "0-1"): 99})
    zk.stop()
    zk.close()

    service = LagService(LagServiceConfig(clusters=(NamedCluster("dc", connect),),
                                          http_port=0, interval_s=3600)).start()
    base = f"http://127.0.0.1:{service.port}"
    try:
        assert service.wait_ready(30)
        before = _get(f"{base}/v3/kafka/dc/consumer/watched/lag")
        assert before["last_error"] is None
        committed = {p["broker_partition"]: p["committed"]
                     for p in before["status"]["partitions"]}
        assert committed == {"0-0": 1234, "0-1": 99}

        own_zookeeper.kill_all()            # kill -9 of the only server
        cycle = threading.Thread(target=service.evaluate_once, daemon=True)
        cycle.start()
        cycle.join(30)
        # before the fix, kazoo held the cycle until ZooKeeper came back
        assert not cycle.is_alive(), "the evaluation hung while ZooKeeper was down"
        after = _get(f"{base}/v3/kafka/dc/consumer/watched/lag")
        assert after["last_error"]           # the failed cycle, said
        assert {p["broker_partition"]: p["committed"] for p in after["status"]["partitions"]} \
            == committed                     # the last evaluation, kept
        assert _get(f"{base}/v3/kafka/dc/consumer")["consumers"] == ["watched"]
        samples = scrape_metrics(service.port)
        assert metric(samples, "samsa_lag_evaluation_errors_total", cluster="dc") >= 1

        own_zookeeper.start()                # back: the next cycle succeeds again
        def recovered() -> bool:
            service.evaluate_once()
            return _get(f"{base}/v3/kafka/dc/consumer/watched/lag")["last_error"] is None
        wait_until(recovered, 60, interval=0.5, what="an evaluation after ZooKeeper's restart")
    finally:
        service.stop()


def test_a_failure_without_a_message_is_named(monkeypatch):
    """Defect (seen once in a full run of the test above): kazoo's
    ConnectionLoss() has no message, so ``last_error`` was "" — falsy, as if
    nothing had failed. The exception's name is said then."""
    from kazoo.exceptions import ConnectionLoss
    service = LagService(LagServiceConfig(
        clusters=(NamedCluster("dc", "127.0.0.1:1/dc"),),
        http_port=0, interval_s=3600))

    def lost(cluster):
        raise ConnectionLoss()

    monkeypatch.setattr(service, "_monitor", lost)
    service.evaluate_once()
    assert service.snapshot()[3] == {"dc": "ConnectionLoss"}
