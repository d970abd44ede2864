"""GroupConsumer hands partitions over in order (issue 16): the member giving
partitions up stops fetching them, waits for its application to finish what
it was handed, commits, and only then releases them; partitions it keeps go
on from what was handed. So under load a member joining, a member leaving
cleanly (its application commits what it took, then closes) and a member
restarting deliver every message to the group exactly once. Before, a
rebalance restarted even the kept partitions from what had been taken, and
the application's message in progress was delivered again (masked when the
application finishes it while the fetchers stop, ~0.1 s: the test has slow
messages now and then)."""
from __future__ import annotations

import collections
import threading
import time

import pytest

from broker_helpers import wait_until
from coordination_helpers import zk_owners

TOTAL = 20_000


class App(threading.Thread):
    """An application that takes messages one by one, doing a little work on
    each, and on stop commits what it took and closes the consumer (a clean
    leave), all on its own thread."""

    def __init__(self, consumer, seen: collections.Counter, lock: threading.Lock) -> None:
        super().__init__(daemon=True, name=f"app-{consumer.consumer_id}")
        self.consumer = consumer
        self.seen, self.lock = seen, lock
        self.stopping = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stopping.is_set():
                for m in self.consumer.messages(timeout_ms=100):
                    with self.lock:
                        self.seen[m.value] += 1
                    if m.value.endswith(b"00"):
                        time.sleep(0.25)     # now and then a slow message: a rebalance
                    #                          finds the application in the middle of it
                    if self.stopping.is_set():
                        break
            self.consumer.commit()          # done with the last one it was handed
        except BaseException as exc:   # noqa: BLE001 - reported by stop()
            self.error = exc
        finally:
            self.consumer.close()

    def stop(self) -> None:
        self.stopping.set()
        self.join(30)
        assert not self.is_alive() and self.error is None, self.error


@pytest.mark.slow
def test_joins_leaves_and_restarts_under_load_deliver_each_message_once(
        shared_cluster, group_consumers, cluster_producers, topic):
    shared_cluster.create_topic(topic, 2)                           # 6 partitions
    zk, connect, group = shared_cluster.zk, shared_cluster.connect, "handover"
    seen: collections.Counter = collections.Counter()
    lock = threading.Lock()
    apps: dict[str, App] = {}

    def join(cid: str) -> None:
        consumer = group_consumers(connect, group, [topic], consumer_id=cid,
                                   auto_commit_interval_ms=200)
        apps[cid] = App(consumer, seen, lock)
        apps[cid].start()

    def delivered() -> int:
        with lock:
            return sum(seen.values())

    producer = cluster_producers(connect, acks="flushed", batch_size=200)
    sent = [b"m%06d" % i for i in range(TOTAL)]

    def produce() -> None:
        for i, value in enumerate(sent):
            producer.send(topic, value, key=value)
            if i % 5000 == 4999:
                producer.flush(timeout=30)
        producer.flush(timeout=30)

    join("a")
    join("b")
    feeder = threading.Thread(target=produce, daemon=True)
    feeder.start()
    wait_until(lambda: delivered() >= 3_000, 60, what="the group to be consuming")
    join("c")                                                        # a member joins
    wait_until(lambda: set(zk_owners(zk, group, topic).values()) == {"a", "b", "c"}, 30,
               what="three owners")
    wait_until(lambda: delivered() >= 8_000, 60, what="more consumption")
    apps.pop("b").stop()                                             # a member leaves
    wait_until(lambda: set(zk_owners(zk, group, topic).values()) == {"a", "c"}, 30,
               what="two owners")
    wait_until(lambda: delivered() >= 12_000, 60, what="more consumption")
    apps.pop("c").stop()                                             # ... and restarts
    join("c")
    wait_until(lambda: set(zk_owners(zk, group, topic).values()) == {"a", "c"}, 30,
               what="the restarted member to own its share")
    feeder.join(120)
    wait_until(lambda: delivered() >= TOTAL, 120, what="everything delivered")
    for app in list(apps.values()):
        app.stop()
    assert set(seen) == set(sent), "a message was lost"
    twice = {v: n for v, n in seen.items() if n > 1}
    assert not twice, f"{len(twice)} messages delivered more than once"
