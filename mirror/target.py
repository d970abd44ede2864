"""The target cluster as the mirror writes to it: topics created on first
use (with the configured partition count, on every live broker, marked as
mirrored; through one broker, cluster-wide, where the brokers replicate),
messages routed as any producer would route them (a key to its key's
partition), acknowledged with acks=all (every in-sync replica of a
replicated topic; flushed on an unreplicated one).

Never retries forever itself: a failed batch comes back to the mirror, which
decides (re-send after a back-off, or stop).
"""
from __future__ import annotations

import logging
import threading

from broker.client.admin import AdminClient
from broker.client.cluster_producer import ClusterProducer
from broker.client.producer import Batch, ProducerConfig
from broker.coordination import paths
from broker.protocol.errors import ErrorCode, SamsaError

from broker.coordination.named_cluster import NamedCluster

from .config import MirrorConfig
from .marks import mark_mirrored

log = logging.getLogger(__name__)

# errors a re-send cannot cure: the mirror stops rather than skip the data
FATAL_ERRORS = frozenset({ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.CORRUPT_MESSAGE,
                          ErrorCode.INVALID_REQUEST, ErrorCode.INVALID_TOPIC,
                          ErrorCode.INVALID_CONFIG, ErrorCode.UNSUPPORTED_VERSION})


def is_retriable(error: BaseException) -> bool:
    """Can sending the same messages again succeed later? (Connection
    failures, a target broker gone or full, a timeout: yes.)"""
    return not (isinstance(error, SamsaError) and error.code in FATAL_ERRORS)


class TargetUnavailable(SamsaError):
    """No broker of the target cluster can take the messages now."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.UNKNOWN, message)


def _holders(view, topic: str) -> set[int]:
    """The live brokers that hold partitions of ``topic`` (an unreplicated
    one: a replicated topic is the cluster's, not its brokers')."""
    return {paths.parse_broker_partition(bp)[0] for bp in view.partitions(topic)
            if not bp.isdigit()}


class TargetCluster:
    """Thread-safe: every source pipe writes through it."""

    def __init__(self, ref: NamedCluster, config: MirrorConfig) -> None:
        self.ref = ref
        self.config = config
        self.producer = ClusterProducer(ref.zookeeper, ProducerConfig(
            client_id=f"mirror-{config.group}", acks="all", batch_size=config.batch_size,
            batch_bytes=4 << 20, linger_ms=config.linger_ms, max_in_flight=32,
            # throughput over order under retries: the mirror re-sends whole
            # chunks itself, so its order holds only without failures anyway
            # (docs/mirror.md); one request per partition would halve its speed
            max_in_flight_per_partition=32,
            compression=config.compression,
            buffer_messages=max(config.max_unacknowledged * 2, config.batch_size * 4),
            retries=2, retry_backoff_ms=config.retry_backoff_ms,
            retry_backoff_max_ms=config.retry_backoff_max_ms, request_timeout_ms=30_000,
            **config.credentials.client_settings()),
            session_timeout_ms=config.session_timeout_ms,
            # the marks of mirrored topics are written with the mirror's identity
            zookeeper_auth_file=config.credentials.zookeeper_auth_file,
            zookeeper_tls=config.credentials.zookeeper_tls_settings())
        self.cluster = self.producer.cluster
        self._lock = threading.Lock()
        self._ready: set[tuple[str, str]] = set()     # (topic, source) marked and made

    def ensure_topic(self, topic: str, source: str) -> None:
        """Mark ``topic`` as mirrored from ``source`` and create it where missing."""
        if (topic, source) in self._ready:
            return
        with self._lock:
            if (topic, source) in self._ready:
                return
            mark_mirrored(self.producer.client, topic, source)
            brokers = self.cluster.brokers()
            if not brokers:
                raise TargetUnavailable(f"no broker of the target cluster {self.ref.name} is "
                                        f"registered at {self.ref.zookeeper}")
            holders = _holders(self.cluster, topic)
            for broker_id, (host, port) in sorted(brokers.items()):
                if broker_id in holders or self.cluster.is_replicated(topic):
                    # a broker of a replicating cluster creates it cluster-wide
                    continue
                try:
                    with AdminClient(f"{host}:{port}", "samsa-mirror", request_timeout=10,
                                     **self.config.credentials.admin_options()) as a:
                        a.create_topic(topic, self.config.target_partitions)
                    log.info("created topic %s on target broker %d (%s:%d) with %d partitions",
                             topic, broker_id, host, port, self.config.target_partitions)
                except SamsaError as exc:
                    if exc.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                        raise
                except OSError as exc:
                    raise TargetUnavailable(f"cannot create {topic} on target broker "
                                            f"{broker_id}: {exc}") from None
            if not self.cluster.wait_for(
                    lambda view: set(brokers) <= _holders(view, topic) or not view.brokers()
                    or view.is_replicated(topic),
                    timeout=15):
                raise TargetUnavailable(f"topic {topic} did not appear in the target's "
                                        f"ZooKeeper in time")
            self._ready.add((topic, source))

    def send(self, topic: str, values: list[bytes], timestamps: list[int],
             keys: list[bytes | None] | None) -> list[Batch]:
        return self._sending(topic, self.producer.send_records, topic, values, timestamps, keys)

    def send_message_set(self, topic: str, message_set: bytes, count: int,
                         max_timestamp: int) -> list[Batch]:
        """As ``send``, for a fetched message set forwarded as bytes."""
        return self._sending(topic, self.producer.send_message_set, topic, message_set, count,
                             max_timestamp)

    def _sending(self, topic: str, send, *args) -> list[Batch]:
        """``send(*args)``; a topic the target lost, or a producer closed
        under us (its broker left), is TargetUnavailable (retried)."""
        try:
            return send(*args)
        except SamsaError as exc:
            if exc.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                self._ready = {r for r in self._ready if r[0] != topic}   # make it again
                raise TargetUnavailable(str(exc)) from None
            raise
        except RuntimeError as exc:
            raise TargetUnavailable(str(exc)) from None

    def close(self, timeout: float = 5.0) -> None:
        """Close the producer; what the target has not acknowledged by then is
        not committed in the sources either, and is copied again after a restart."""
        self.producer.close(timeout)
