"""Topic administration and offset look-ups against one broker."""
from __future__ import annotations

import ssl

from broker.protocol import api
from broker.protocol.errors import ErrorCode, SamsaError

from .authentication import SaslLogin
from .connection import BrokerConnection, check, parse_address


class AdminClient:
    """Create, delete, list and describe topics; look up offsets.

    Not thread-safe: one thread per client."""

    def __init__(self, bootstrap: str, client_id: str = "samsa-admin",
                 request_timeout: float = 30.0, tls: "ssl.SSLContext | None" = None,
                 sasl: "SaslLogin | None" = None) -> None:
        """``tls``: a client context, for a broker's TLS listener; ``sasl``: a
        user and password, for a listener that asks for SCRAM."""
        host, port = parse_address(bootstrap)
        self.conn = BrokerConnection(host, port, client_id, request_timeout=request_timeout,
                                     tls=tls, sasl=sasl)

    def create_topic(self, name: str, partitions: int,
                     config: dict[str, str] | None = None) -> None:
        self.conn.request(api.CreateTopicRequest(
            name, partitions, tuple((str(k), str(v)) for k, v in (config or {}).items())))

    def delete_topic(self, name: str) -> None:
        self.conn.request(api.DeleteTopicRequest(name))

    def metadata(self, topics: list[str] | tuple[str, ...] = ()) -> api.MetadataResponse:
        """Topics (all when none named) with partitions and offsets."""
        return self.conn.request(api.MetadataRequest(tuple(topics)))

    def list_topics(self) -> list[str]:
        return [t.name for t in self.metadata().topics]

    def describe_topic(self, name: str) -> api.TopicInfo:
        info = self.metadata([name]).topics[0]
        check(info.error, info.message)
        return info

    def partition_count(self, topic: str) -> int | None:
        """Partitions of ``topic``, or None if the broker does not know it."""
        info = self.metadata([topic]).topics[0]
        if info.error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            return None
        check(info.error, info.message)
        return len(info.partitions)

    def offsets(self, topic: str, partition: int, time: int, max_offsets: int = 1) -> list[int]:
        """Offsets before ``time`` (ms), or [latest] / [earliest] for
        api.LATEST / api.EARLIEST."""
        resp = self.conn.request(api.OffsetsRequest(topic, partition, time, max_offsets))
        check(resp.error, resp.message)
        return list(resp.offsets)

    def earliest_offset(self, topic: str, partition: int) -> int:
        return self.offsets(topic, partition, api.EARLIEST)[0]

    def latest_offset(self, topic: str, partition: int) -> int:
        return self.offsets(topic, partition, api.LATEST)[0]

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> "AdminClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


__all__ = ["AdminClient", "SamsaError"]
