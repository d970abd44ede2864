"""Helpers of the coordination tests (plain classes and functions; the
fixtures that start things are in tests/coordination/conftest.py).

* ``Cluster``, ``chroot_client``: from tests/cluster_helpers.py.
* ``zk_owners``, ``range_assignment``, ``group_settled``: what ZooKeeper
  says a group owns, what the paper's rule says it should own, and whether
  both and every consumer's own view agree.
* ``OwnershipMonitor``: a thread that samples a group's ownership during
  churn and records every moment a partition had two owners.
* ``ConsumerThread``: the application side of one GroupConsumer.

They only read ZooKeeper and the clients' public state; they never change
what they observe.
"""
from __future__ import annotations

import threading
import time

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from broker.client.group_consumer import GroupConsumer
from broker.coordination import paths
from broker_helpers import wait_until
from cluster_helpers import Cluster, chroot_client  # noqa: F401 - re-exported


# ------------------------------------------------------------------ ownership

def zk_owners(zk: KazooClient, group: str, topic: str) -> dict[str, str]:
    """{broker-partition: consumer id} of the group's owner nodes now (read
    with pipelined gets, so one sample takes about one round trip)."""
    try:
        children = zk.get_children(paths.owners_path(group, topic))
    except NoNodeError:
        return {}
    pending = [(bp, zk.get_async(paths.owners_path(group, topic, bp))) for bp in children]
    owners = {}
    for bp, result in pending:
        try:
            owners[bp] = result.get(timeout=10)[0].decode()
        except NoNodeError:
            continue           # released meanwhile
    return owners


def range_assignment(partitions: list[str], consumer_ids: list[str]) -> dict[str, set[str]]:
    """The paper's rule, written out independently of the code under test:
    consumer i of the sorted ids takes the i-th contiguous range of the
    sorted partitions, |P|/|C| each and the first |P| mod |C| one more."""
    n, extra = divmod(len(partitions), len(consumer_ids))
    out, start = {}, 0
    for i, cid in enumerate(sorted(consumer_ids)):
        size = n + (1 if i < extra else 0)
        out[cid] = set(partitions[start:start + size])
        start += size
    return out


def group_settled(consumers: list[GroupConsumer], zk: KazooClient, group: str, topic: str,
                  partitions: list[str]) -> bool:
    """Every consumer has finished rebalancing, owns (in its own view)
    exactly its range of ``partitions``, and ZooKeeper's owner nodes say
    the same, partition by partition."""
    if not all(c.member.balanced.is_set() for c in consumers):
        return False
    views = {c.consumer_id: {bp for t, bp in c.owned() if t == topic} for c in consumers}
    wanted = range_assignment(partitions, list(views))
    if views != wanted:
        return False
    return zk_owners(zk, group, topic) == {bp: cid for cid, bps in wanted.items()
                                           for bp in bps}


def wait_settled(consumers: list[GroupConsumer], zk: KazooClient, group: str, topic: str,
                 partitions: list[str], timeout: float = 20.0) -> float:
    """Wait for group_settled(); return how long it took."""
    started = time.monotonic()
    wait_until(lambda: group_settled(consumers, zk, group, topic, partitions), timeout,
               interval=0.02, what=f"group {group} to own {len(partitions)} partitions of "
                                   f"{topic} by the range rule")
    return time.monotonic() - started


class OwnershipMonitor(threading.Thread):
    """Samples a group's ownership every ``interval`` s until ``stop()``.

    One sample: every consumer's ``owned()`` (pass A), ZooKeeper's owner
    nodes, every consumer's ``owned()`` again (pass B). A consumer counts
    as holding a partition if both passes show it: it held it all through
    the sample, so two consumers holding one partition is a real overlap,
    never an artefact of reading them one after the other (a partition
    handed from c0 to c2 between reading c0 and reading c2 shows in only
    one pass of each). Recorded as violations:

    * a partition held by two consumers;
    * a partition a consumer holds whose owner node (read between the two
      passes) names someone else or is missing.

    ``consumers`` is the test's own list: the test adds and removes
    consumers while the monitor runs (each sample takes a copy).
    """

    def __init__(self, consumers: list[GroupConsumer], zk: KazooClient, group: str,
                 topic: str, interval: float = 0.002) -> None:
        super().__init__(name=f"ownership-monitor-{group}", daemon=True)
        self.consumers = consumers
        self.zk = zk
        self.group = group
        self.topic = topic
        self.interval = interval
        self.samples = 0
        self.busy_samples = 0          # samples taken while a rebalance was under way
        self.violations: list[str] = []
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.is_set():
            consumers = list(self.consumers)
            first = [c.owned() for c in consumers]
            owners = zk_owners(self.zk, self.group, self.topic)
            second = [c.owned() for c in consumers]
            held: dict[str, str] = {}
            for c, a, b in zip(consumers, first, second):
                for topic, bp in a & b:
                    if topic != self.topic:
                        continue
                    if bp in held:
                        self.violations.append(f"sample {self.samples}: {bp} held by "
                                               f"{held[bp]} and {c.consumer_id}")
                    held[bp] = c.consumer_id
                    if owners.get(bp) != c.consumer_id:
                        self.violations.append(
                            f"sample {self.samples}: {c.consumer_id} holds {bp} but its "
                            f"owner node names {owners.get(bp)!r}")
            self.samples += 1
            if not all(c.member.balanced.is_set() for c in consumers):
                self.busy_samples += 1
            self._stop_event.wait(self.interval)

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=30)
        assert not self.is_alive(), "the ownership monitor did not stop"


# ------------------------------------------------------------------ the application

class ConsumerThread(threading.Thread):
    """The application of one GroupConsumer: iterates ``messages()`` until
    ``stop()``, recording each message taken as (value, broker-partition,
    offset, monotonic time), then closes the consumer on this same thread
    (a GroupConsumer's application side is single-threaded)."""

    def __init__(self, consumer: GroupConsumer) -> None:
        super().__init__(name=f"app-{consumer.consumer_id}", daemon=True)
        self.consumer = consumer
        self.taken: list[tuple[bytes, str, int, float]] = []
        self.error: BaseException | None = None
        self._stopping = threading.Event()

    def run(self) -> None:
        try:
            # (closed by someone else, e.g. a fixture at teardown: messages() ends at once)
            while not self._stopping.is_set() and not self.consumer._closed:
                for m in self.consumer.messages(timeout_ms=100):
                    self.taken.append((m.value, m.partition, m.offset, time.monotonic()))
                    if self._stopping.is_set():
                        break
        except BaseException as exc:   # noqa: BLE001 - reported by stop()
            self.error = exc
        finally:
            try:
                self.consumer.close()
            except Exception as exc:   # noqa: BLE001
                self.error = self.error or exc

    def stop(self, timeout: float = 30.0) -> None:
        """Stop taking messages and close the consumer (a clean leave)."""
        self._stopping.set()
        self.join(timeout)
        assert not self.is_alive(), f"{self.name} did not stop in {timeout}s"
        if self.error is not None:
            raise AssertionError(f"{self.name} failed: {self.error!r}") from self.error

    def taken_between(self, start: float, end: float) -> int:
        return sum(1 for *_, t in self.taken if start <= t <= end)
