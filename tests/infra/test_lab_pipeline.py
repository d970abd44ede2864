"""The whole multi-DC path in the lab: producers publish through the
datacenter's HAProxy (no ZooKeeper), the mirror copies into the analysis
cluster. One DC broker is killed with -9 while the mirror is held back, so
some of what that broker acknowledged can only be copied once it is back:
the producer carries on through the other broker, and the mirror resumes
the returned broker's partitions; every acknowledged message ends up in the
analysis cluster."""
from __future__ import annotations

import pytest
import os
import signal

from broker.client.producer import Producer
from broker_helpers import wait_until
from lab_helpers import ROUND, TOPIC, Sender, connected_broker, small_topology, topic_values


def stored_values(lab, cluster: str, brokers: tuple[int, ...]) -> list[bytes]:
    return topic_values(lab, cluster, TOPIC, brokers)


@pytest.mark.slow
def test_a_dc_broker_dies_and_returns_while_mirrored(make_lab):
    lab = make_lab(small_topology(dc_brokers=2, analysis_brokers=1, mirror=True)).up()
    mirror_pid = lab.pids()["to-analysis.mirror-0"]
    producer = Producer(bootstrap=lab.lb_address("dc-a"), acks="flushed", batch_size=ROUND,
                        linger_ms=2)
    sender = Sender(producer)
    sender.start()
    try:
        wait_until(lambda: sender.acknowledged >= 300 or sender.error, timeout=30,
                   what="messages acknowledged through the load balancer")
        assert sender.error is None, sender.error
        wait_until(lambda: len(stored_values(lab, "analysis", (0,))) >= 300, 30,
                   what="the mirror to copy the first messages")
        victim = connected_broker(lab, "dc-a")
        os.kill(mirror_pid, signal.SIGSTOP)          # the mirror falls behind...
        try:
            at_pause = sender.acknowledged
            wait_until(lambda: sender.acknowledged >= at_pause + 200 or sender.error, 30,
                       what="more messages on the victim the mirror has not copied")
            lab.kill_broker("dc-a", victim, signal.SIGKILL)   # ...and the broker dies
            at_kill = sender.acknowledged
        finally:
            os.kill(mirror_pid, signal.SIGCONT)
        wait_until(lambda: sender.acknowledged >= at_kill + 300 or sender.error, 30,
                   what="the producer to carry on through the other broker")
        assert sender.error is None, sender.error
    finally:
        sender.stop.set()
        sender.join(timeout=90)
        producer.close()
    assert sender.error is None and producer.failed_batches == 0
    acknowledged = {v for v, b in sender.batches if b.done() and b.exception() is None}

    def missing() -> set[bytes]:
        return acknowledged - set(stored_values(lab, "analysis", (0,)))

    # the mirror copies everything of the surviving broker; what it had not copied
    # of the killed one waits for it
    on_survivor = set(stored_values(lab, "dc-a", (1 - victim,)))
    wait_until(lambda: not on_survivor - set(stored_values(lab, "analysis", (0,))), 30,
               what="the mirror to copy the surviving broker's messages")
    assert missing(), "the mirror was meant to be behind on the killed broker"
    lab.restart_broker("dc-a", victim)
    wait_until(lambda: not missing(), 60,
               what="the mirror to resume the returned broker's partitions")
    assert lab.status()["processes"] and all(
        p["alive"] for p in lab.status()["processes"])
