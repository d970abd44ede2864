"""A producer for a whole cluster, found through ZooKeeper.

It watches the brokers and their partitions (ClusterView) and sends each
message to a broker-partition of the topic: ``crc32(key) % partitions`` over
the cluster's sorted broker-partitions for a keyed message (so one key goes
to one partition from every producer while the cluster does not change);
a key-less one, as ``partitioner`` says: "sticky" (default) sticks to one
broker-partition until the batch it joined leaves that broker's
accumulator, then goes to the next one, round-robin
(partitioner.StickyPartitioner over the sorted broker-partitions);
"random", a random broker-partition per message; "any", a random broker
holding the topic, which picks its partition. One
``Producer`` per broker does the batching and sending; producers of brokers
that left are flushed and closed, new brokers are used as soon as they
register. A send that finds no broker registered at all waits up to
``broker_wait_ms`` for one (a cluster still starting).

A topic not yet known in ZooKeeper is sent to a random live broker with
"any partition" (auto-created there), as Kafka 0.7 did.

A replicated topic (docs/replication.md) has partitions numbered cluster-
wide, each served by its leader: a message goes to partition
``crc32(key) % partitions`` (or as ``partitioner`` says), through one
``Producer`` per partition whose connection follows the partition's leader
in ZooKeeper: a batch refused with NOT_LEADER_FOR_PARTITION is sent again,
in order, to the leader ZooKeeper names by then.
"""
from __future__ import annotations

import logging
import random
import threading
from dataclasses import replace
from typing import Callable

from broker.coordination import paths
from broker.coordination.cluster import ClusterView
from broker.coordination.zk import make_client, start_client
from broker.coordination.zk_acls import Identity
from broker.coordination.zk_tls import ZooKeeperTls
from broker.protocol import api
from broker.protocol.errors import ErrorCode, SamsaError
from broker.protocol.message import route_by_key

from .partitioner import StickyPartitioner, key_partition
from .producer import Batch, Producer, ProducerConfig

log = logging.getLogger(__name__)


class ClusterProducer:
    """Thread-safe, like Producer."""

    def __init__(self, zookeeper: str, config: ProducerConfig | None = None,
                 session_timeout_ms: int = 6000, zookeeper_auth_file: str = "",
                 zookeeper_tls: ZooKeeperTls | None = None, **settings) -> None:
        """``zookeeper_auth_file``: the ZooKeeper identity (``user:password``,
        zk_acls.py) the client authenticates as; the producer only reads,
        but its owner may write records of its own through ``client`` (the
        mirror's marks). ``zookeeper_tls``: how it reaches ZooKeeper over
        TLS. ValueError for a file that will not do."""
        self.zookeeper = zookeeper
        self.config = config or ProducerConfig(**settings)
        self.client = make_client(zookeeper, session_timeout_ms,
                                  identity=Identity.from_file(zookeeper_auth_file),
                                  tls=zookeeper_tls)
        start_client(self.client, zookeeper, what="cluster producer")
        self.cluster = ClusterView(self.client, tls=self.config.tls)
        self._lock = threading.Lock()
        self._producers: dict[int, Producer] = {}
        self._closed = False
        self._delivery_listener = None
        self._sticky = StickyPartitioner()
        self.cluster.add_listener(self._brokers_changed)

    @property
    def delivery_listener(self):
        """Producer.delivery_listener, for every broker's producer."""
        return self._delivery_listener

    @delivery_listener.setter
    def delivery_listener(self, listener) -> None:
        with self._lock:
            self._delivery_listener = listener
            for producer in self._producers.values():
                producer.delivery_listener = listener

    def send(self, topic: str, value: bytes, key: bytes | None = None,
             timestamp: int | None = None) -> Batch:
        return self._routed(topic, key, lambda producer, partition: producer.send(
            topic, value, key=key, partition=partition, timestamp=timestamp))

    def send_many(self, topic: str, values: list[bytes], key: bytes | None = None,
                  timestamp: int | None = None) -> Batch:
        return self._routed(topic, key, lambda producer, partition: producer.send_many(
            topic, values, key=key, partition=partition, timestamp=timestamp))

    def send_records(self, topic: str, values: list[bytes], timestamps: list[int],
                     keys: list[bytes | None] | None = None) -> list[Batch]:
        """Queue copies of existing messages (each keeps its timestamp and
        key): keyed ones go to their key's broker-partition, the key-less
        ones of this call together to one random broker-partition. Returns
        every batch they joined. The topic must have partitions in the
        cluster."""
        partitions = self.cluster.partitions(topic)
        if not partitions:
            raise SamsaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                             f"topic {topic!r} has no partitions in the cluster at "
                             f"{self.zookeeper}")
        unkeyed = random.choice(partitions)
        if keys is None or keys.count(None) == len(keys):
            groups = {unkeyed: (values, timestamps, None)}
        else:
            n = len(partitions)
            routed: dict[str, tuple[list, list, list]] = {}
            for value, ts, key in zip(values, timestamps, keys):
                bp = partitions[key_partition(key, n)] if key is not None else unkeyed
                group = routed.get(bp)
                if group is None:
                    group = routed[bp] = ([], [], [])
                group[0].append(value)
                group[1].append(ts)
                group[2].append(key)
            groups = routed
        batches: list[Batch] = []
        for bp, (vals, stamps, ks) in groups.items():
            target, partition = self._target(topic, bp)
            batches += self._producer(target).send_records(topic, partition, vals, stamps, ks)
        return batches

    def send_message_set(self, topic: str, message_set: bytes, count: int,
                         max_timestamp: int) -> list[Batch]:
        """Queue whole, valid, already encoded messages (a mirror's copy of
        a fetched message set) without decoding them: routed as
        ``send_records`` routes, keyed ones to their key's broker-partition
        (split in C: message_set.route_by_key), the key-less ones together to
        one random broker-partition. Returns every batch they joined."""
        partitions = self.cluster.partitions(topic)
        if not partitions:
            raise SamsaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                             f"topic {topic!r} has no partitions in the cluster at "
                             f"{self.zookeeper}")
        routed = route_by_key(message_set, len(partitions))
        if routed is None:
            groups = [(random.choice(partitions), message_set, count)]
        else:
            parts, counts, unkeyed, unkeyed_count = routed
            groups = [(bp, part, n) for bp, part, n in zip(partitions, parts, counts) if n]
            if unkeyed_count:
                groups.append((random.choice(partitions), unkeyed, unkeyed_count))
        batches: list[Batch] = []
        for bp, data, n in groups:
            target, partition = self._target(topic, bp)
            batches.append(self._producer(target).send_message_set(
                topic, partition, data, n, max_timestamp))
        return batches

    def flush(self, timeout: float | None = None) -> None:
        for producer in list(self._producers.values()):
            producer.flush(timeout)

    def close(self, timeout: float | None = 60.0) -> None:
        """Flush (up to ``timeout`` per broker) and close; see Producer.close."""
        if self._closed:
            return
        self._closed = True
        with self._lock:
            producers, self._producers = self._producers, {}
        for producer in producers.values():
            producer.close(timeout)
        self.client.stop()
        self.client.close()

    def __enter__(self) -> "ClusterProducer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def failed_batches(self) -> int:
        return sum(p.failed_batches for p in list(self._producers.values()))

    # ------------------------------------------------------------ routing

    def _routed(self, topic: str, key: bytes | None,
                send: Callable[[Producer, int], Batch]) -> Batch:
        """``send(producer of the chosen broker, partition on it)``; a
        key-less message's batch is told to the sticky partitioner."""
        target, partition, sticky = self._choose(topic, key)
        batch = send(self._producer(target), partition)
        if sticky is not None:
            self._sticky.joined(topic, sticky, batch)
        return batch

    def _choose(self, topic: str, key: bytes | None) -> tuple[object, int, int | None]:
        """(broker id, or (topic, partition) of a replicated one; partition
        on it; and for a key-less message its index among the sorted
        partitions, to tell the sticky partitioner which batch it joined;
        else None)."""
        partitions = self.cluster.partitions(topic)
        if partitions and partitions[0].isdigit():     # replicated: numbered partitions
            n = len(partitions)
            mode = self.config.partitioner
            if key is not None:
                index, sticky = key_partition(key, n), None
            elif mode == "sticky":
                index = sticky = self._sticky.partition(topic, n)
            else:
                index, sticky = random.randrange(n), None
            return (topic, index), index, sticky
        if partitions:
            mode = self.config.partitioner
            if key is not None:
                index, sticky = key_partition(key, len(partitions)), None
            elif mode == "sticky":
                index = sticky = self._sticky.partition(topic, len(partitions))
            elif mode == "random":
                index, sticky = random.randrange(len(partitions)), None
            else:                       # "any": a holder of the topic picks
                broker_id, _partition = paths.parse_broker_partition(random.choice(partitions))
                return broker_id, api.ANY_PARTITION, None
            return (*paths.parse_broker_partition(partitions[index]), sticky)
        brokers = sorted(self.cluster.brokers())
        if not brokers:
            wait_s = self.config.broker_wait_ms / 1000
            if wait_s > 0:
                self.cluster.wait_for(lambda view: view.brokers(), wait_s)
            brokers = sorted(self.cluster.brokers())
        if not brokers:
            raise SamsaError(ErrorCode.UNKNOWN, f"no broker is registered in ZooKeeper at "
                                                f"{self.zookeeper} (waited {wait_s:g} s)")
        if key is not None:
            raise SamsaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                             f"topic {topic!r} has no partitions in the cluster: create it "
                             f"before sending keyed messages")
        return random.choice(brokers), api.ANY_PARTITION, None

    def _producer(self, target) -> Producer:
        """The producer of a broker (its id), or of a replicated partition
        ((topic, partition): it follows the partition's leader)."""
        producer = self._producers.get(target)
        if producer is None:
            with self._lock:
                producer = self._producers.get(target)
                if producer is None:
                    if isinstance(target, tuple):
                        producer = Producer(replace(self.config,
                                                    bootstrap=self._leader_address(*target)
                                                    or "127.0.0.1:9"),
                                            leader=lambda t=target: self._leader_address(*t))
                    else:
                        address = self.cluster.address(target)
                        if address is None:
                            raise SamsaError(ErrorCode.UNKNOWN,
                                             f"broker {target} left the cluster")
                        producer = Producer(replace(self.config, bootstrap=address))
                    producer.delivery_listener = self._delivery_listener
                    self._producers[target] = producer
        return producer

    def _leader_address(self, topic: str, partition: int) -> str | None:
        leader = self.cluster.leader(topic, partition)
        return self.cluster.address(leader) if leader is not None else None

    def _target(self, topic: str, name: str) -> tuple[object, int]:
        """(producer target, partition) of a partition name."""
        if name.isdigit():
            return (topic, int(name)), int(name)
        return paths.parse_broker_partition(name)

    def _brokers_changed(self) -> None:
        """Close the producers of brokers that left (on a thread of its own:
        this runs on kazoo's thread, and closing flushes)."""
        live = self.cluster.brokers()
        with self._lock:
            # a replicated partition's producer stays: it follows its leader
            gone = [b for b in self._producers if not isinstance(b, tuple) and b not in live]
            closing = [self._producers.pop(b) for b in gone]
        if closing:
            log.info("brokers %s left: closing their producers", gone)
            threading.Thread(target=lambda: [p.close(timeout=30) for p in closing],
                             daemon=True).start()
