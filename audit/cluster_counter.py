"""The cluster tier: count every topic of one cluster, as a consumer group,
and publish the counts to the cluster's audit topic.

At least once, nothing skipped: the group's offsets are acknowledged only
after the monitoring events that count those messages were published (the
publish waits for the audit topic's acknowledgement); a crash before that
consumes and counts them again. Counting reads only the message timestamp,
the value's size and the event id in the envelope's header (no Avro
decoding): see audit/tally.py.

Known limit: a rebalance between two publishes hands partitions to another
member with their last acknowledged offsets, so what was counted and not yet
published is counted again there (reported as duplicates of this tier).
A short ``publish_interval_ms`` keeps that window small.
"""
from __future__ import annotations

import logging
import threading
import time

from kazoo.exceptions import KazooException
from kazoo.handlers.threading import KazooTimeoutError

from broker.client.cluster_producer import ClusterProducer
from broker.client.group_consumer import GroupConsumer, GroupConsumerConfig

from audit.config import CountConfig
from audit.counting import (
    AUDIT_TOPIC,
    CounterConfig,
    MonitoringPublisher,
    TierCounter,
    kernel_name,
    monitoring_writer,
    producer_sender,
)

log = logging.getLogger(__name__)


class ClusterCounter:
    def __init__(self, config: CountConfig) -> None:
        self.config = config
        self.counter = TierCounter(CounterConfig(
            tier="cluster", datacenter=config.effective_datacenter, cluster=config.cluster,
            window_ms=config.window_ms, dedup_ids=config.dedup_ids,
            dedup_windows=config.dedup_windows))
        self.registry, writer = monitoring_writer(
            config.effective_registry,
            config.credentials.zookeeper_tls_settings().kazoo_options())
        blacklist = AUDIT_TOPIC if not config.blacklist else f"{AUDIT_TOPIC}|{config.blacklist}"
        self.consumer = GroupConsumer(GroupConsumerConfig(
            zookeeper=config.zookeeper, group=config.effective_group,
            whitelist=config.whitelist, blacklist=blacklist,
            auto_offset_reset=config.auto_offset_reset, explicit_acknowledgement=True,
            on_corrupt="skip", **config.credentials.group_settings()))
        self.producer = ClusterProducer(
            config.zookeeper, acks="all",
            zookeeper_tls=config.credentials.zookeeper_tls_settings(),
            **config.credentials.client_settings())
        self.publisher = MonitoringPublisher(self.counter, writer.encode,
                                             producer_sender(self.producer))
        self._unacknowledged: dict[tuple[str, str], int] = {}
        self._stop = threading.Event()
        self.consumed = 0
        self.publish_rounds = 0
        self.commit_failures = 0           # commits ZooKeeper failed (retried at the next publish)
        self._commit_pending = False
        self.metrics_port = None
        if config.metrics_port >= 0:
            from audit.metrics import CounterMetrics
            from broker.service_kit.metrics_http import serve_metrics
            self.metrics_port = serve_metrics("127.0.0.1", config.metrics_port,
                                              CounterMetrics(self.counter, self.publisher),
                                              name="audit-count",
                                              security=config.metrics_http).port
        log.info("counting cluster %s (%s) in group %s, windows of %d ms, publishing every "
                 "%d ms, counting kernel: %s, metrics port %s", config.cluster,
                 config.zookeeper, config.effective_group, config.window_ms,
                 config.publish_interval_ms, kernel_name(), self.metrics_port)

    def run(self) -> None:
        """Count until stop(); publish every interval and at the end."""
        interval = self.config.publish_interval_ms / 1000
        next_publish = time.monotonic() + interval
        try:
            while not self._stop.is_set():
                chunk = self.consumer.poll(timeout_ms=200)
                if chunk:
                    self.counter.add_messages(chunk)
                    self.consumed += len(chunk)
                    for m in chunk:
                        self._unacknowledged[(m.topic, m.partition)] = m.next_offset
                if time.monotonic() >= next_publish:
                    self.publish()
                    next_publish = time.monotonic() + interval
        finally:
            self.publish()

    def publish(self) -> None:
        """Publish the counts; once they are delivered, acknowledge the offsets
        of every message they count."""
        offsets, self._unacknowledged = self._unacknowledged, {}
        self.publisher.publish()
        self.publish_rounds += 1
        if self.publisher.unsent:      # not delivered: keep the offsets for the next try
            for key, offset in offsets.items():
                self._unacknowledged.setdefault(key, offset)
            return
        if offsets:
            self.consumer.acknowledge(offsets)
            self._commit_pending = True
        if self._commit_pending:
            try:
                self.consumer.commit()
                self._commit_pending = False
            except (KazooException, KazooTimeoutError) as exc:
                # ZooKeeper went away during the commit (a restarted server,
                # a lost quorum): the offsets stay acknowledged and the next
                # publish commits them; a crash before that counts them again
                self.commit_failures += 1
                log.warning("commit of %s's offsets failed (%s: %s); committed at the next "
                            "publish", self.config.cluster, type(exc).__name__, exc)

    def stop(self) -> None:
        self._stop.set()

    def close(self) -> None:
        try:
            self.consumer.close()
        finally:
            self.producer.close()
            self.registry.close()
