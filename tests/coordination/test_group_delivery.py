"""What consumer groups deliver (GroupConsumer, at-least-once), on 3 real
brokers: nothing is lost while consumers join, leave and lose their
sessions under load, and the duplicates stay within the uncommitted window;
each group gets every message and a group splits the partitions among its
consumers; a new group starts at the earliest or latest offset as set;
offsets are committed only for messages the application has taken."""
from __future__ import annotations

import pytest
import collections
import threading
import time

from broker.client.producer import Producer
from broker.coordination import offsets as zk_offsets
from broker.harness.kazoo_faults import expire_session
from broker_helpers import wait_until
from coordination_helpers import OwnershipMonitor, wait_settled

TOTAL = 100_000
PRODUCER_THREADS = 4
AUTO_COMMIT_MS = 200
# How long after its last auto-commit interval a consumer may still hand
# out messages without committing: it commits at the first chunk boundary
# after the interval (a chunk is iterated in milliseconds here), possibly
# after waiting for a rebalance to let go of the consumer's lock.
COMMIT_SLACK_S = 0.5


@pytest.mark.slow
def test_no_message_is_lost_while_consumers_join_leave_and_expire(
        shared_cluster, group_consumers, cluster_producers, consume, topic):
    partitions = shared_cluster.create_topic(topic, 4)            # 3 brokers x 4
    zk, group = shared_cluster.zk, "lossless"
    consumers = []                                    # the group now (the monitor reads it)
    ever = []                                         # every consumer that took part
    apps = {}                                         # consumer id -> its application thread

    def join(cid: str) -> None:
        consumer = group_consumers(shared_cluster.connect, group, [topic], consumer_id=cid,
                                   auto_commit_interval_ms=AUTO_COMMIT_MS)
        consumers.append(consumer)
        ever.append(consumer)
        apps[cid] = consume(consumer)

    def by_id(cid: str):
        return next(c for c in consumers if c.consumer_id == cid)

    def leave(cid: str) -> None:                      # a clean close, on the app's thread
        consumers.remove(by_id(cid))
        apps[cid].stop()

    expiries = []                                     # (consumer id, started, ended)

    def expire(cid: str) -> None:                     # stays in the group: it registers again
        started = time.monotonic()
        expire_session(by_id(cid).client)
        expiries.append((cid, started, time.monotonic()))

    for cid in ("c0", "c1", "c2"):
        join(cid)
    wait_settled(consumers, zk, group, topic, partitions)
    monitor = OwnershipMonitor(consumers, zk, group, topic, interval=0.005)
    monitor.start()

    producer = cluster_producers(shared_cluster.connect, acks="written", linger_ms=2)
    sent = [0] * PRODUCER_THREADS
    per_thread = TOTAL // PRODUCER_THREADS

    # each change at a point of the production: the producers wait at that
    # point until the change is made (not until the group settles), so on a
    # slow machine the churn still happens while messages are being sent
    steps = [(0.10, lambda: join("c3")), (0.22, lambda: leave("c0")),
             (0.34, lambda: expire("c1")), (0.46, lambda: join("c4")),
             (0.58, lambda: leave("c2")), (0.70, lambda: expire("c3"))]
    gates = {int(fraction * per_thread): threading.Event() for fraction, _change in steps}

    def produce(n: int) -> None:
        for i in range(per_thread):
            gate = gates.get(i)
            if gate is not None:
                gate.wait(120)
            producer.send(topic, b"p%d-%06d" % (n, i))
            sent[n] += 1
            if i % 250 == 249:
                time.sleep(0.03)    # pacing, not waiting: spread the load over the churn

    producers = [threading.Thread(target=produce, args=(n,), name=f"producer-{n}")
                 for n in range(PRODUCER_THREADS)]
    for thread in producers:
        thread.start()

    changed_at = []
    try:
        for fraction, change in steps:
            at = int(fraction * per_thread)
            wait_until(lambda: sum(sent) >= PRODUCER_THREADS * at, 60, interval=0.005,
                       what=f"{fraction:.0%} of the messages to be sent")
            changed_at.append(sum(sent))
            change()
            gates[at].set()                 # producers go on during the rebalance
            wait_settled(consumers, zk, group, topic, partitions, timeout=30)
        for thread in producers:
            thread.join(120)
        producer.flush(timeout=60)
        assert producer.failed_batches == 0
        # every change happened while messages were still being sent
        assert changed_at[-1] < TOTAL, changed_at

        wanted = {b"p%d-%06d" % (n, i) for n in range(PRODUCER_THREADS)
                  for i in range(per_thread)}

        def missing() -> int:
            taken = set()
            for app in apps.values():
                taken.update(value for value, *_ in list(app.taken))
            return len(wanted - taken)

        wait_until(lambda: missing() == 0, 90, interval=0.2,
                   what="the group to deliver every message")
    finally:
        for gate in gates.values():
            gate.set()
        monitor.stop()
        for cid in [c.consumer_id for c in consumers]:
            leave(cid)
    assert monitor.violations == [], monitor.violations[:10]

    deliveries = collections.defaultdict(list)       # value -> [(time, consumer id)]
    for cid, app in apps.items():
        for value, _bp, _offset, at in app.taken:
            deliveries[value].append((at, cid))
    assert set(deliveries) == wanted                  # all of them, and nothing else

    # Each delivery after the first is a duplicate, explained by what the
    # consumer that delivered the message before had committed:
    # * That consumer's session expired soon after: it commits nothing more
    #   once paused, and its partitions' next owners start at its last
    #   commit. It commits every AUTO_COMMIT_MS (plus COMMIT_SLACK_S), so such
    #   a message was taken at most that long before its expiry began. All
    #   of them together: at most what it took in that window (+1 in hand).
    # * Otherwise the consumer was live: it commits what its application has
    #   taken before any partition leaves it (and before its fetchers restart
    #   at a rebalance); only the one message the application holds then
    #   (handed out, not yet taken) may come again: at most one per rebalance
    #   of each consumer and one per close.
    def soon_expired(cid: str, at: float) -> bool:
        return any(cid == expired and started - AUTO_COMMIT_MS / 1000 - COMMIT_SLACK_S
                   <= at <= ended for expired, started, ended in expiries)

    after_expiry = after_handover = 0
    for value, times in deliveries.items():
        times.sort()
        for (at, cid), _again in zip(times, times[1:]):
            if soon_expired(cid, at):
                after_expiry += 1
            else:
                after_handover += 1
    expiry_window = sum(apps[cid].taken_between(started - AUTO_COMMIT_MS / 1000
                                                - COMMIT_SLACK_S, ended) + 1
                        for cid, started, ended in expiries)
    rebalances = sum(c.member.rebalances for c in ever)
    print(f"\n{TOTAL} messages: {after_expiry} delivered again after an expiry (bound "
          f"{expiry_window}), {after_handover} after a rebalance or close (bound "
          f"{rebalances} rebalances + {len(ever)} closes); monitor: {monitor.samples} "
          f"samples, {monitor.busy_samples} during rebalances")
    assert after_expiry <= expiry_window
    assert after_handover <= rebalances + len(ever)


def test_every_group_gets_every_message_and_one_group_splits_them(
        shared_cluster, group_consumers, cluster_producers, consume, topic):
    partitions = shared_cluster.create_topic(topic, 4)
    zk = shared_cluster.zk
    trio = [group_consumers(shared_cluster.connect, "split", [topic], consumer_id=f"s{i}")
            for i in range(3)]
    solo = [group_consumers(shared_cluster.connect, "whole", [topic], consumer_id="w0")]
    wait_settled(trio, zk, "split", topic, partitions)
    wait_settled(solo, zk, "whole", topic, partitions)
    apps = {c.consumer_id: consume(c) for c in trio + solo}

    producer = cluster_producers(shared_cluster.connect, acks="written")
    wanted = {b"k%d|%d" % (k, i) for k in range(60) for i in range(50)}
    for value in sorted(wanted):
        producer.send(topic, value, key=value.split(b"|")[0])
    producer.flush(timeout=30)
    assert producer.failed_batches == 0

    def values(cids) -> list[bytes]:
        return [value for cid in cids for value, *_ in list(apps[cid].taken)]

    wait_until(lambda: set(values(["s0", "s1", "s2"])) == wanted
               and set(values(["w0"])) == wanted, 30, interval=0.05,
               what="both groups to receive every message")
    # no rebalance during the delivery: each message exactly once per group
    assert len(values(["s0", "s1", "s2"])) == len(wanted) and len(values(["w0"])) == len(wanted)
    # the trio split the partitions: each took only those it owns, all non-empty
    for consumer in trio:
        own = {bp for _, bp in consumer.owned()}
        from_partitions = {bp for _, bp, *_ in apps[consumer.consumer_id].taken}
        assert from_partitions <= own and len(own) == 4
        assert apps[consumer.consumer_id].taken
    assert {bp for _, bp, *_ in apps["w0"].taken} == set(partitions)


def test_a_new_group_starts_at_earliest_or_latest_as_set(shared_cluster, group_consumers,
                                                         consume, topic):
    partitions = shared_cluster.create_topic(topic, 1)              # 0-0, 1-0, 2-0
    old = {b"old-%d-%d" % (b, i) for b in range(3) for i in range(40)}
    new = {b"new-%d-%d" % (b, i) for b in range(3) for i in range(40)}

    def produce(values) -> None:
        for b, broker in shared_cluster.brokers.items():
            with Producer(bootstrap=broker.address, acks="flushed") as producer:
                for value in sorted(values):
                    if value.split(b"-")[1] == b"%d" % b:
                        producer.send(topic, value, partition=0)

    produce(old)
    early = group_consumers(shared_cluster.connect, "early", [topic],
                            auto_offset_reset="earliest")
    late = group_consumers(shared_cluster.connect, "late", [topic], auto_offset_reset="latest")
    wait_settled([early], shared_cluster.zk, "early", topic, partitions)
    wait_settled([late], shared_cluster.zk, "late", topic, partitions)
    apps = {"early": consume(early), "late": consume(late)}

    def taken(name: str) -> set[bytes]:
        return {value for value, *_ in list(apps[name].taken)}

    wait_until(lambda: taken("early") == old, 20, what="the earliest group to take the old ones")
    # The latest group's fetchers seek to the end once it owns the partitions,
    # each on its own thread: send markers to every partition until the group
    # has taken one of each, which proves every fetcher is in place.
    markers: set[bytes] = set()

    def late_in_place() -> bool:
        if {value.split(b"-")[1] for value in taken("late") & markers} == {b"0", b"1", b"2"}:
            return True
        round_ = b"%d" % (len(markers) // 3)
        for b, broker in shared_cluster.brokers.items():
            with Producer(bootstrap=broker.address, acks="flushed") as producer:
                marker = b"marker-%d-%s" % (b, round_)
                producer.send(topic, marker, partition=0)
                markers.add(marker)
        return False

    wait_until(late_in_place, 20, interval=0.2, what="the latest group's fetchers to be in place")
    produce(new)
    wait_until(lambda: taken("early") >= new and taken("late") >= new, 20,
               what="both groups to take the new ones")
    assert taken("late") - markers == new              # nothing from before it started
    assert taken("early") - markers == old | new
    wait_until(lambda: taken("early") >= markers, 20, what="the earliest group to take all")


def test_offsets_are_committed_only_for_messages_taken(shared_cluster, group_consumers, topic):
    shared_cluster.create_topic(topic, 1, broker_ids=[0])            # one partition: 0-0
    values = [b"m%03d" % i for i in range(300)]
    with Producer(bootstrap=shared_cluster.brokers[0].address, acks="flushed") as producer:
        for value in values:
            producer.send(topic, value, partition=0)
    zk, group = shared_cluster.zk, "careful"

    def start():
        # no auto-commit: only close(), commit() and rebalances commit; small
        # fetches, so the 300 messages come in several chunks
        consumer = group_consumers(shared_cluster.connect, group, [topic],
                                   auto_commit_interval_ms=3_600_000, fetch_max_bytes=1024)
        wait_settled([consumer], zk, group, topic, ["0-0"])
        return consumer

    def committed() -> int | None:
        return zk_offsets.read_offset(zk, group, topic, "0-0")

    # take 30 by iterating: the 30th is handed out, and the application never
    # comes back for more, so it is not taken (though fetched, as were more)
    consumer = start()
    got = []
    for m in consumer.messages(timeout_ms=10_000):
        got.append(m)
        if len(got) == 30:
            break
    consumer.close()
    assert [m.value for m in got] == values[:30]
    assert committed() == got[-1].offset              # right after the last one taken

    # a restart resumes right there; commit() counts the message in hand
    consumer = start()
    got = []
    for m in consumer.messages(timeout_ms=10_000):
        got.append(m)
        if len(got) == 30:
            consumer.commit()                         # done with it: commit it too
            break
    assert [m.value for m in got] == values[29:59]
    assert committed() == got[-1].next_offset
    consumer.close()
    assert committed() == got[-1].next_offset

    # poll(): a chunk counts as taken at the next poll (or commit()), not when returned
    consumer = start()
    first = consumer.poll(timeout_ms=10_000)
    assert first and first[0].value == values[59]
    second = consumer.poll(timeout_ms=10_000)
    assert second and second[0].offset == first[-1].next_offset
    consumer.close()
    assert committed() == second[0].offset            # the first chunk, not the second

    consumer = start()
    assert consumer.poll(timeout_ms=10_000)[0].value == second[0].value
    consumer.close()
