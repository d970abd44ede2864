"""ZooKeeper dies under the running lab (kill -9) and comes back: producers
behind the load balancer need no ZooKeeper and carry on; the brokers serve;
the mirror stops copying while its group cannot coordinate, stays up, and
copies everything once ZooKeeper is back. Nothing acknowledged is lost."""
from __future__ import annotations

import signal

from broker.client.producer import Producer
from broker_helpers import wait_until
from lab_helpers import small_topology, topic_values

TOPIC = "zk-outage"


def values_in(lab, cluster: str, brokers: int) -> set[bytes]:
    return set(topic_values(lab, cluster, TOPIC, range(brokers)))


def send(lab, first: int, count: int) -> set[bytes]:
    values = [b"v-%06d" % i for i in range(first, first + count)]
    with Producer(bootstrap=lab.lb_address("dc-a"), acks="flushed", batch_size=50) as producer:
        batches = [producer.send(TOPIC, v) for v in values]
        producer.flush(60)
    assert all(b.exception() is None for b in batches)
    return set(values)


def test_zookeeper_killed_and_back_under_the_lab(make_lab):
    lab = make_lab(small_topology(dc_brokers=2, analysis_brokers=1, mirror=True)).up()
    sent = send(lab, 0, 500)
    wait_until(lambda: values_in(lab, "analysis", 1) == sent, 30, what="the first copy")

    lab.kill_zookeeper(1, signal.SIGKILL)
    sent |= send(lab, 500, 500)                   # producers and brokers need no ZooKeeper
    assert sent <= values_in(lab, "dc-a", 2)
    alive = {p["name"]: p["alive"] for p in lab.status(zookeeper_timeout=1)["processes"]}
    assert alive["to-analysis.mirror-0"] and alive["dc-a.broker-0"] and alive["dc-a.broker-1"]

    lab.restart_zookeeper(1)
    wait_until(lambda: values_in(lab, "analysis", 1) == sent, 90,
               what="the mirror to copy what was produced while ZooKeeper was down")
    status = lab.status()
    assert all(p["alive"] for p in status["processes"])
    for cluster in status["clusters"]:
        assert len(cluster["brokers"]) == cluster["brokers_expected"], cluster
