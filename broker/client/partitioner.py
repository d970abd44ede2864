"""Which partition a message goes to when the caller names none.

* A keyed message: ``key_partition(key, count)`` = ``zlib.crc32(key) % count``.
  CRC-32 (IEEE 802.3, zlib's) and not Python's ``hash()``, which is salted
  per process: every producer, in any process or language, sends one key to
  one partition while the topic's partition count stays the same. It is the
  rule the codec splits a mirrored message set by
  (``broker.protocol.message.route_by_key``), so a mirror keeps keys where
  the producers put them. (Kafka hashes with murmur2; Samsa has used CRC-32
  from the start, and changing it would move every key.)
* A key-less message: ``StickyPartitioner`` (Kafka's sticky partitioner,
  KIP-480): all go to one partition until the batch they joined leaves the
  accumulator, then to the next partition, round-robin. A batch fills up
  instead of being split over every partition.

The caller learns the partition count from the broker (partition_counts.py)
or from ZooKeeper (cluster_producer.py).
"""
from __future__ import annotations

import random
import zlib

from .record_accumulator import Batch


def key_partition(key: bytes, count: int) -> int:
    """The partition of a keyed message among ``count``: crc32(key) % count."""
    return zlib.crc32(key) % count


class StickyPartitioner:
    """Key-less messages of a topic go to one partition while the batch the
    last of them joined still takes messages (``Batch.accepting``); the next
    message after that batch left (full, ``linger_ms`` old, flushed) goes to
    the next partition, round-robin. The first partition of a topic is
    random, so producers started together do not all begin on partition 0.

    The caller asks ``partition(topic, count)``, sends, and tells the batch
    the message joined with ``joined(topic, partition, batch)``. A hot path
    may read ``current[topic]`` = (partition, batch) itself and, while that
    batch is ``accepting``, send to that partition without asking (the
    answer ``partition()`` would give) nor telling (nothing changed).

    Thread-safety: no lock (dict reads and writes are atomic). Two threads
    racing may both move a topic on (a partition is skipped once) or one
    may join a batch that leaves meanwhile (it starts a new batch on the
    same partition): the spread is uneven for a moment, nothing more."""

    def __init__(self) -> None:
        self.current: dict[str, tuple[int, Batch | None]] = {}

    def partition(self, topic: str, count: int) -> int:
        current = self.current.get(topic)
        if current is None:
            p = random.randrange(count)
            self.current[topic] = (p, None)
            return p
        p, batch = current
        if p >= count:                      # the topic has fewer partitions now
            p = random.randrange(count)
        elif batch is None or batch.accepting:
            return p
        else:
            p = (p + 1) % count
        self.current[topic] = (p, None)
        return p

    def joined(self, topic: str, partition: int, batch: Batch) -> None:
        """A message sent to ``partition`` (as ``partition()`` answered)
        joined ``batch``."""
        current = self.current.get(topic)
        if current is None or current[0] != partition or current[1] is not batch:
            self.current[topic] = (partition, batch)
