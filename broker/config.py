"""Broker settings: a frozen dataclass loaded from a TOML file, with command-line
overrides, validated together when built.

File format (every key optional; see config/broker.toml for the documented
defaults)::

    broker_id = 0
    port = 9092
    data_dir = "/var/lib/samsa"
    [log]                       # defaults for every topic (per-topic overrides
    segment_bytes = 1073741824  #  use the dotted names: segment.bytes ...)
    flush_ms = 50
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from broker.service_kit import settings
from broker.service_kit.http_security import HttpSecurity
from broker.service_kit.settings import ConfigError
from broker.storage.log_config import LogConfig

__all__ = ["BrokerConfig", "ConfigError", "load_config", "to_toml"]


@dataclass(frozen=True)
class BrokerConfig:
    broker_id: int = 0
    """This broker's id, unique in its cluster."""
    host: str = "127.0.0.1"
    """Address to listen on ("0.0.0.0" for every interface)."""
    port: int = 9092
    """TCP port of the Samsa protocol (0 picks a free port, logged at start-up)."""
    advertised_host: str = ""
    """Host name clients should use to reach this broker (default: host)."""
    data_dir: str = "./samsa-data"
    """Directory holding the topics' segment files."""
    metrics_port: int = 9093
    """HTTP port for Prometheus metrics at /metrics; 0 picks a free port, -1 disables."""
    auto_create_topics: bool = True
    """Create an unknown topic on its first produce (fetches never create)."""
    default_partitions: int = 2
    """Partitions of a topic auto-created on its first produce (`topics --create`
    sends its own --partitions, 1 by default)."""
    max_request_bytes: int = 64 << 20
    """Largest request frame accepted; a larger one closes the connection before
    its payload is read."""
    max_message_bytes: int = 1 << 20
    """Largest single message (or compressed wrapper) accepted in a produce.
    Published in Metadata: a length above it at a fetch offset means the
    offset is not a message boundary."""
    max_decompressed_bytes: int = 16 << 20
    """Most bytes one compressed wrapper may inflate to; a produce holding a
    larger one fails with CORRUPT_MESSAGE."""
    inline_decompress_bytes: int = 1 << 20
    """Compressed wrappers are checked on the event loop while they inflate to
    at most this; a produce with a larger one is checked on a worker thread
    (its connection's later requests wait for it, other connections do not)."""
    max_fetch_wait_ms: int = 30_000
    """Upper bound on a fetch's long-poll wait."""
    socket_send_buffer_bytes: int = -1
    """SO_SNDBUF of every client connection (Kafka's socket.send.buffer.bytes);
    -1: the kernel's autotuning, up to net.ipv4.tcp_wmem's maximum. A consumer
    across a WAN receives at most this much per round trip: a fixed buffer
    smaller than the link's bandwidth x round trip caps it."""
    tls_port: int = -1
    """Port of a TLS listener beside the plaintext one (both serve the same
    protocol: a migration runs them side by side); -1: none, 0 picks a free
    port. Fetches on it are encrypted in user space (no sendfile)."""
    tls_cert_file: str = ""
    """This broker's certificate (PEM) for tls_port; a renewal in place is
    taken by the next connection."""
    tls_key_file: str = ""
    """The key of tls_cert_file (PEM)."""
    tls_ca_file: str = ""
    """The authorities trusted for clients' certificates (tls_client_auth)."""
    tls_client_auth: str = "none"
    """Whether the TLS listener asks clients for a certificate: "none",
    "optional" (checked when sent) or "required"."""
    inter_broker_tls: bool = False
    """Followers fetch from their leaders' TLS listeners (registered in
    ZooKeeper, /brokers/tls), checking the leader's certificate and host name
    against tls_ca_file and presenting tls_cert_file as their own client
    certificate; needs tls_port, and tls_ca_file."""
    authentication: str = "none"
    """What a client of the plaintext port must prove: "none" (every client
    is ``User:ANONYMOUS``) or "scram" (SCRAM-SHA-512 before any other
    request; the credentials are in ZooKeeper: ``python -m broker.tools
    users``). docs/security.md."""
    tls_authentication: str = "none"
    """The same for the TLS listener: "none", "scram" or "certificate" (the
    principal is the client certificate's subject, ``User:CN=...``; needs
    tls_client_auth = "required")."""
    authentication_timeout_ms: int = 10_000
    """A connection that has not authenticated this long after it opened is
    closed (until then it may send nothing but the handshake, in small frames)."""
    max_unauthenticated_connections: int = 1000
    """At most this many connections may be in the SASL exchange at once; a
    new one beyond is closed at once (what strangers can hold: this many
    sockets and 4 KiB each)."""
    max_unauthenticated_connections_per_address: int = 100
    """Of those, at most this many from one address (one host cannot shut
    the others out by itself; above max_unauthenticated_connections, that
    one decides)."""
    authorization: bool = False
    """Enforce the ACLs kept in ZooKeeper (``python -m broker.tools acls``):
    what no entry allows is refused (TOPIC_/CLUSTER_AUTHORIZATION_FAILED),
    nothing appended or changed. Needs zookeeper."""
    super_users: tuple[str, ...] = ()
    """Principals that may do everything whatever the ACLs say ("User:admin",
    the brokers' own "User:broker" for replication)."""
    allow_if_no_acl: bool = False
    """With authorization: allow what no entry at all names (a migration's
    setting: turn ACLs on resource by resource). Off: refuse."""
    sasl_username: str = ""
    """The user this broker authenticates as to the other brokers
    (replication), when their listener asks for SCRAM."""
    sasl_password_file: str = ""
    """A file holding sasl_username's password (one line)."""
    max_queued_requests_per_connection: int = 1000
    """Stop reading a connection while more than this many of its requests
    wait for their reply (parked long-poll fetches included); resume once half
    of them are answered. Bounds what one pipelining client makes the broker
    hold."""
    queued_max_request_bytes: int = 100 << 20
    """Broker-wide budget (Kafka's queued.max.request.bytes) for request frames
    being read: a frame is reserved whole once its size is known; a connection
    whose frame does not fit waits, unread, until memory is released."""
    connections_max_idle_ms: int = 600_000
    """Close a connection that sent nothing and waits for nothing this long
    (Kafka's connections.max.idle.ms, 10 min)."""
    retention_check_ms: int = 60_000
    """How often retention runs over every partition."""
    checkpoint_interval_ms: int = 10_000
    """How often recovery points are persisted (bounds the rescan after a crash)."""
    zookeeper: str = ""
    """ZooKeeper connect string with the cluster's chroot ("h1:2181,h2:2181/dc-a"):
    the broker registers itself and its topics there. Empty: standalone."""
    zookeeper_auth_file: str = ""
    """A file holding ``user:password`` (first line): the broker authenticates
    to ZooKeeper as the cluster's identity and creates its nodes so that only
    that identity may change them, and only it may read the users' credentials
    and the ACLs (docs/security.md, "ZooKeeper"). Empty: open nodes."""
    zookeeper_tls: bool = False
    """Connect to ZooKeeper over TLS (its secureClientPort, which
    ``zookeeper`` then names; docs/security.md, "ZooKeeper")."""
    zookeeper_tls_ca_file: str = ""
    """The authorities of ZooKeeper's certificate (empty: the system's)."""
    zookeeper_tls_cert_file: str = ""
    """A client certificate for ZooKeeper (a server with ssl.clientAuth=need)."""
    zookeeper_tls_key_file: str = ""
    zookeeper_tls_verify_hostname: bool = True
    """ZooKeeper's address must be on its certificate."""
    zookeeper_session_timeout_ms: int = 6000
    """ZooKeeper session timeout: how long after a crash the broker's
    registration lingers."""
    rack: str = ""
    """The rack or availability zone of this broker: replicas of a partition
    are spread across racks (docs/replication.md). Empty: none declared."""
    replication_factor: int = 0
    """Replicas of each partition of a topic created (or auto-created) through
    this broker, cluster-wide, with leaders elected through ZooKeeper (needs
    ``zookeeper``; a CreateTopic may ask for its own with the topic setting
    ``replication.factor``). 0: the paper's topics, whose partitions live on
    each broker on their own, unreplicated."""
    min_insync_replicas: int = 1
    """Fewest in-sync replicas with which an acks=all produce is taken
    (NOT_ENOUGH_REPLICAS otherwise); topic setting ``min.insync.replicas``."""
    replica_lag_time_max_ms: int = 10_000
    """A follower that has not caught up with its leader's log end for this
    long leaves the in-sync set."""
    replica_fetch_wait_ms: int = 500
    """How long a follower's fetch waits at the leader for new bytes."""
    replica_fetch_max_bytes: int = 1 << 20
    """Bytes a follower asks for per partition and fetch (at least
    max_message_bytes)."""
    unclean_leader_election: bool = False
    """Let a replica that is not in sync lead when no in-sync one is live:
    the partition comes back sooner, and loses what that replica lacks
    (committed messages included). Topic setting
    ``unclean.leader.election.enable``."""
    controlled_shutdown_timeout_ms: int = 5000
    """At a clean shutdown, how long the broker waits for its followers to
    catch up before handing its partitions' leadership to them."""
    drop_behind: str = "auto"
    """Drop flushed log data from the page cache beyond ``page_cache_budget_bytes``
    (see broker/storage/page_cache.py): "on", "off" (leave caching to the
    operating system, Kafka's behaviour), or "auto": on only where the kernel
    hands freed memory back to a hypervisor (virtio-balloon free page
    reporting), where a growing page cache costs a host page fault per page."""
    page_cache_budget_bytes: int = 1 << 30
    """With drop-behind on: the most recently flushed bytes (all partitions
    together) left in the page cache for consumers that keep up."""
    log_level: str = "INFO"
    log_format: str = "text"
    """"text" or "json" (one JSON object per line)."""
    log: LogConfig = field(default_factory=LogConfig)
    """Defaults for every partition log; topics may override them."""
    metrics_http: HttpSecurity = field(default_factory=HttpSecurity)
    """TLS and users of the metrics port ([metrics_http] tls_cert_file,
    tls_key_file, tls_ca_file, tls_client_auth, users_file: as the HTTP
    services' [http], docs/security.md); empty: plain HTTP, anyone."""

    def __post_init__(self) -> None:
        for name in ("authentication", "tls_authentication"):
            allowed = ("none", "scram", "certificate") if name.startswith("tls") \
                else ("none", "scram")
            if getattr(self, name) not in allowed:
                raise ConfigError(f"{name} must be {', '.join(allowed)}, not "
                                  f"{getattr(self, name)!r}")
        if self.tls_authentication == "certificate" and self.tls_client_auth != "required":
            raise ConfigError('tls_authentication = "certificate" needs tls_client_auth = '
                              '"required"')
        if "scram" in (self.authentication, self.tls_authentication) and not self.zookeeper:
            raise ConfigError("SCRAM authentication needs zookeeper: the credentials are kept "
                              "there")
        if self.authorization and not self.zookeeper:
            raise ConfigError("authorization needs zookeeper: the ACLs are kept there")
        for principal in self.super_users:
            if not principal.startswith("User:") or len(principal) < 6 or \
                    principal == "User:*":
                raise ConfigError(f"super_users: a principal is User:<name>, not "
                                  f"{principal!r}")
        if self.zookeeper_auth_file:
            if not self.zookeeper:
                raise ConfigError("zookeeper_auth_file needs zookeeper")
            from broker.coordination.zk_acls import read_auth_file
            try:
                read_auth_file(self.zookeeper_auth_file)
            except ValueError as exc:
                raise ConfigError(str(exc)) from None
        if self.zookeeper_tls and not self.zookeeper:
            raise ConfigError("zookeeper_tls needs zookeeper")
        try:
            self.zookeeper_tls_settings().kazoo_options()      # the files, readable
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        if self.max_unauthenticated_connections < 1:
            raise ConfigError("max_unauthenticated_connections must be >= 1")
        if self.max_unauthenticated_connections_per_address < 1:
            raise ConfigError("max_unauthenticated_connections_per_address must be >= 1")
        if self.authentication_timeout_ms < 100:
            raise ConfigError("authentication_timeout_ms must be >= 100")
        if bool(self.sasl_username) != bool(self.sasl_password_file):
            raise ConfigError("sasl_username and sasl_password_file go together")
        if not -1 <= self.tls_port <= 65535:
            raise ConfigError(f"tls_port must be -1..65535, got {self.tls_port}")
        if self.tls_port >= 0 and not (self.tls_cert_file and self.tls_key_file):
            raise ConfigError("tls_port needs tls_cert_file and tls_key_file")
        if self.tls_client_auth not in ("none", "optional", "required"):
            raise ConfigError(f"tls_client_auth must be none, optional or required, not "
                              f"{self.tls_client_auth!r}")
        if self.inter_broker_tls and (self.tls_port < 0 or not self.tls_ca_file):
            raise ConfigError("inter_broker_tls needs tls_port (a TLS listener of this broker) "
                              "and tls_ca_file (the authority of the other brokers' "
                              "certificates)")
        if self.tls_client_auth != "none" and not self.tls_ca_file:
            raise ConfigError("tls_client_auth needs tls_ca_file: the authorities its "
                              "clients' certificates are checked against")
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"port must be 0..65535, got {self.port}")
        if not -1 <= self.metrics_port <= 65535:
            raise ConfigError(f"metrics_port must be -1..65535, got {self.metrics_port}")
        if self.socket_send_buffer_bytes == 0 or self.socket_send_buffer_bytes < -1:
            raise ConfigError(f"socket_send_buffer_bytes must be -1 (the kernel's "
                              f"autotuning) or a size in bytes, got "
                              f"{self.socket_send_buffer_bytes}")
        if self.broker_id < 0:
            raise ConfigError(f"broker_id must be >= 0, got {self.broker_id}")
        if not 1 <= self.default_partitions <= 10_000:
            raise ConfigError("default_partitions must be 1..10000")
        if self.max_message_bytes < 64:
            raise ConfigError("max_message_bytes must be >= 64")
        if not 1024 <= self.inline_decompress_bytes <= self.max_decompressed_bytes:
            raise ConfigError("inline_decompress_bytes must be 1024..max_decompressed_bytes")
        if self.max_request_bytes < self.max_message_bytes + 1024:
            raise ConfigError("max_request_bytes must exceed max_message_bytes by 1 KiB at least")
        if self.log_format not in ("text", "json"):
            raise ConfigError(f"log_format must be 'text' or 'json', got {self.log_format!r}")
        if self.log_level.upper() not in ("DEBUG", "INFO", "WARNING", "ERROR"):
            raise ConfigError(f"unknown log_level {self.log_level!r}")
        if self.drop_behind not in ("auto", "on", "off"):
            raise ConfigError(f"drop_behind must be 'auto', 'on' or 'off', "
                              f"got {self.drop_behind!r}")
        if not 0 <= self.replication_factor <= 100:
            raise ConfigError(f"replication_factor must be 0..100, got {self.replication_factor}")
        if self.replication_factor and not self.zookeeper:
            raise ConfigError("replication_factor needs zookeeper: replicas are placed and "
                              "leaders elected through it")
        if self.min_insync_replicas < 1:
            raise ConfigError("min_insync_replicas must be >= 1")
        if self.page_cache_budget_bytes < 0:
            raise ConfigError("page_cache_budget_bytes must be >= 0")
        if self.zookeeper:
            from broker.coordination.zk import split_connect_string
            try:
                split_connect_string(self.zookeeper)
            except ValueError as exc:
                raise ConfigError(str(exc)) from None
        for name in ("max_fetch_wait_ms", "retention_check_ms", "checkpoint_interval_ms",
                     "zookeeper_session_timeout_ms", "max_queued_requests_per_connection",
                     "queued_max_request_bytes", "connections_max_idle_ms",
                     "replica_lag_time_max_ms", "replica_fetch_wait_ms",
                     "replica_fetch_max_bytes", "controlled_shutdown_timeout_ms"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1")

    @property
    def public_host(self) -> str:
        return self.advertised_host or ("127.0.0.1" if self.host in ("", "0.0.0.0") else self.host)

    def zookeeper_tls_settings(self):
        """The zookeeper_tls* settings as one (a ZooKeeperTls); ValueError
        for files that will not do."""
        from broker.coordination.zk_tls import ZooKeeperTls
        return ZooKeeperTls(self.zookeeper_tls, self.zookeeper_tls_ca_file,
                            self.zookeeper_tls_cert_file, self.zookeeper_tls_key_file,
                            self.zookeeper_tls_verify_hostname)


def load_config(path: str | None = None, overrides: dict[str, Any] | None = None) -> BrokerConfig:
    """Settings from ``path`` (TOML; None for defaults) with ``overrides`` on
    top. Override keys may be dotted for nested tables: ``log.flush_ms``."""
    return settings.load(BrokerConfig, path, overrides)


def to_toml(config: BrokerConfig) -> str:
    """The effective settings as TOML (for --print-config)."""
    return settings.to_toml(config)
