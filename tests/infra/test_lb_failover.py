"""Load-balancer failover: a producer sends through a datacenter's HAProxy
without stopping while the broker it is connected to is killed (kill -9).
HAProxy's health check takes that broker out; the producer's lost requests are
resent through the load balancer to the remaining broker; no send fails, and
every acknowledged message is on a broker's disk (acks=flushed). Restarted,
the broker is UP in HAProxy again."""
from __future__ import annotations

import pytest
import signal

from broker.client.admin import AdminClient
from broker.client.producer import Producer
from broker_helpers import wait_until
from lab_helpers import ROUND, TOPIC, Sender, connected_broker, small_topology, topic_values

@pytest.mark.slow
def test_producer_carries_on_through_the_load_balancer_when_a_broker_dies(make_lab):
    lab = make_lab(small_topology(dc_brokers=2, analysis_brokers=0)).up()
    producer = Producer(bootstrap=lab.lb_address("dc-a"), acks="flushed", batch_size=ROUND,
                        linger_ms=2)
    sender = Sender(producer)
    sender.start()
    try:
        wait_until(lambda: sender.acknowledged >= 300 or sender.error, timeout=30,
                   what="300 messages acknowledged before the crash")
        assert sender.error is None, sender.error
        # kill the broker this producer's connection goes to
        victim = connected_broker(lab, "dc-a")
        survivor = 1 - victim
        lab.kill_broker("dc-a", victim, signal.SIGKILL)
        at_kill = sender.acknowledged

        wait_until(lambda: sender.acknowledged >= at_kill + 300 or sender.error, timeout=30,
                   what="300 more messages acknowledged after the crash")
        assert sender.error is None, sender.error
        states = wait_until(
            lambda: (lambda s: s if s[victim] == "DOWN" else None)(
                {int(b["server"].split("-")[1]): b["status"] for b in lab.lb_backends("dc-a")}),
            timeout=10, what="HAProxy's health check to mark the killed broker DOWN")
        assert states[survivor] == "UP"
        status = lab.status()
        alive = {p["name"]: p["alive"] for p in status["processes"]}
        assert not alive[f"dc-a.broker-{victim}"] and alive[f"dc-a.broker-{survivor}"]
    finally:
        sender.stop.set()
        sender.join(timeout=90)
        producer.close()
    assert sender.error is None, sender.error
    failed = [(v, b.exception()) for v, b in sender.batches if b.exception() is not None]
    assert not failed and producer.failed_batches == 0, failed[:5]
    acknowledged = {v for v, b in sender.batches if b.done() and b.exception() is None}
    assert len(acknowledged) >= at_kill + 300

    # Read every partition of both brokers back, the killed one restarted
    # (what it acknowledged as flushed survived the crash).
    lab.restart_broker("dc-a", victim)
    wait_until(lambda: all(b["status"] == "UP" for b in lab.lb_backends("dc-a")), timeout=10,
               what="HAProxy's health check to mark the restarted broker UP again")
    for i in (0, 1):
        with AdminClient(lab.broker_address("dc-a", i)) as admin:
            assert admin.partition_count(TOPIC), \
                f"broker {i} holds no partition of {TOPIC}: it took no messages"
    stored = topic_values(lab, "dc-a", TOPIC, (0, 1))
    missing = acknowledged - set(stored)
    assert not missing, f"{len(missing)} acknowledged messages are on no broker: {sorted(missing)[:10]}"


@pytest.mark.slow
def test_producers_spread_again_once_the_broker_is_back(make_lab):
    """A producer reopens its connection every reconnect_interval_ms (Kafka
    0.7's reconnect.time.interval.ms): after a failover it does not stay on
    the survivor for good; the load balancer sends it back to the restarted
    broker, and nothing sent is lost on the way."""
    lab = make_lab(small_topology(dc_brokers=2, analysis_brokers=0)).up()
    producer = Producer(bootstrap=lab.lb_address("dc-a"), acks="flushed", batch_size=ROUND,
                        linger_ms=2, reconnect_interval_ms=200)
    sender = Sender(producer)
    sender.start()
    try:
        wait_until(lambda: sender.acknowledged >= 200 or sender.error, 30, what="a start")
        lab.kill_broker("dc-a", 0, signal.SIGKILL)
        wait_until(lambda: {b["server"]: b["status"] for b in lab.lb_backends("dc-a")}
                   ["broker-0"] == "DOWN", 10, what="broker 0 DOWN")
        lab.restart_broker("dc-a", 0)
        wait_until(lambda: all(b["status"] == "UP" for b in lab.lb_backends("dc-a")), 10,
                   what="broker 0 UP again")
        at_return = {b["server"]: b["total"] for b in lab.lb_backends("dc-a")}
        wait_until(lambda: {b["server"]: b["total"] for b in lab.lb_backends("dc-a")}
                   ["broker-0"] > at_return["broker-0"] or sender.error, 20,
                   what="the producer to reconnect to the returned broker")
        at = sender.acknowledged
        wait_until(lambda: sender.acknowledged >= at + 200 or sender.error, 30,
                   what="sends to go on")
    finally:
        sender.stop.set()
        sender.join(timeout=90)
        producer.close()
    assert sender.error is None, sender.error
    assert producer.failed_batches == 0
