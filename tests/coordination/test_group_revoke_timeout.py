"""An application slower than ``revoke_timeout_ms`` (issue 16, a path the
first hand-over tests left out): a member joining must not wait for it
forever. The member giving partitions up waits up to the timeout, commits
what its application finished, and releases; the new owner starts from that
commit, so the message the slow application was in the middle of is
delivered again (the documented duplicate), and nothing is lost."""
from __future__ import annotations

import threading
import time

from broker_helpers import wait_until
from coordination_helpers import zk_owners


def test_a_stuck_application_delays_a_rebalance_by_the_timeout_only(
        shared_cluster, group_consumers, cluster_producers, topic):
    shared_cluster.create_topic(topic, 1)                         # 3 partitions
    zk, connect, group = shared_cluster.zk, shared_cluster.connect, "stuck-app"
    producer = cluster_producers(connect, acks="flushed")
    sent = [b"s%04d" % i for i in range(300)]
    for value in sent:
        producer.send(topic, value, key=value)
    producer.flush(timeout=30)

    slow = group_consumers(connect, group, [topic], consumer_id="slow",
                           auto_commit_interval_ms=100, revoke_timeout_ms=1000)
    first = []
    stuck = threading.Event()
    release = threading.Event()

    def app() -> None:
        for m in slow.messages():
            first.append((m.partition, m.value))
            if len(first) == 50:
                stuck.set()
                release.wait(60)        # stuck in the middle of its 50th message
                return
    thread = threading.Thread(target=app, daemon=True)
    thread.start()
    assert stuck.wait(30)
    wait_until(lambda: set(zk_owners(zk, group, topic).values()) == {"slow"}, 30,
               what="the slow member to own every partition")

    joined = time.monotonic()
    fresh = group_consumers(connect, group, [topic], consumer_id="fresh",
                            auto_commit_interval_ms=100)
    wait_until(lambda: "fresh" in set(zk_owners(zk, group, topic).values()), 20,
               what="the new member to own partitions")
    took = time.monotonic() - joined
    assert took < 1.0 + 5.0, took          # the timeout and a rebalance, not for ever
    try:
        moved = {bp for bp, owner in zk_owners(zk, group, topic).items() if owner == "fresh"}
        got = []
        for m in fresh.messages(timeout_ms=2000):   # its partitions, to their end
            got.append((m.partition, m.value))
        assert got, "the new member read nothing"
        assert {bp for bp, _v in got} <= moved       # Message.partition is the "b-p" name
        finished = {v for bp, v in first[:49] if bp in moved}
        in_progress_partition, in_progress = first[49]
        got_values = [v for _bp, v in got]
        # what the slow application finished was committed before the release: not again
        assert not finished & set(got_values), finished & set(got_values)
        # the message it was stuck in, if its partition moved, comes again (the duplicate)
        if in_progress_partition in moved:
            assert in_progress in got_values
        assert len(got_values) == len(set(got_values))      # and nothing twice within it
    finally:
        release.set()
        thread.join(10)
