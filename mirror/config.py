"""Mirror settings: which clusters to copy from, into which, what, and how.

File format (TOML; every key but ``sources`` and ``target`` has a default)::

    group = "mirror-analysis"        # consumer group in every source cluster
    whitelist = "clicks|views|.*-log"
    [target]
    name = "analysis"
    zookeeper = "127.0.0.1:2181/analysis"
    [[sources]]
    name = "dc-a"
    zookeeper = "127.0.0.1:2181/dc-a"
    [[sources]]
    name = "dc-b"
    zookeeper = "127.0.0.1:2181/dc-b"

Each cluster is a ``NamedCluster`` (broker/coordination/named_cluster.py):
a name and a ZooKeeper connect string with chroot. Two are the same cluster
when their ensembles share a server and their chroots are equal; the mirror
refuses a target that is one of its sources, and two sources that are one
cluster.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from broker.security.credentials import ServiceCredentials
from broker.coordination.named_cluster import NamedCluster
from broker.service_kit.http_security import HttpSecurity
from broker.service_kit.settings import ConfigError


@dataclass(frozen=True)
class MirrorConfig:
    sources: tuple[NamedCluster, ...] = ()
    """The clusters to copy from (at least one)."""
    target: NamedCluster | None = None
    """The cluster to copy into (the analysis cluster)."""
    group: str = "samsa-mirror"
    """Consumer group in every source cluster; mirror processes of one group share
    the partitions."""
    whitelist: str = ".*"
    """Regex: mirror every topic whose whole name matches..."""
    blacklist: str = ""
    """...and does not match this one (empty: none)."""
    consumer_id: str = ""
    """This process's id in the group (default host-pid-random)."""
    target_partitions: int = 2
    """Partitions per target broker of a topic the mirror creates in the
    target (in all, where the target replicates: docs/replication.md)."""
    batch_size: int = 1000
    """Messages per produce request to the target."""
    linger_ms: int = 20
    """How long a target batch waits to fill."""
    compression: str = "none"
    """Codec of the batches written to the target: none, gzip, lz4 or zstd (the
    copies' keys, values and timestamps are the same either way)."""
    forward_bytes: bool = True
    """Copy fetched message sets as bytes (checked, routed by key and counted
    for the audit in C; never a Python object per message). Data holding
    compressed wrappers, or corrupt data, takes the decoding path either
    way; false forces it for everything (the copies are the same)."""
    max_unacknowledged: int = 200_000
    """Messages sent to the target and not yet acknowledged (acks=all): the window
    re-sent (as duplicates) after a crash; fetching pauses when it is full."""
    commit_interval_ms: int = 1000
    """How often acknowledged source offsets are committed to ZooKeeper."""
    fetch_max_bytes: int = 1 << 20
    """Bytes per partition per fetch from a source broker on a LAN (more
    across a long round trip: ``fetch_rate_bytes``)."""
    fetch_rate_bytes: int = 64_000_000
    """Across a WAN a source broker's partitions deliver at most their
    fetches' bytes per round trip (docs/mirror.md, "Across a WAN"): each
    partition's fetch asks for the connection's measured round trip x this
    many bytes per second (64 MB/s: 6.4 MB at 100 ms), between
    ``fetch_max_bytes`` and ``fetch_rtt_max_bytes``. 0: always
    ``fetch_max_bytes``."""
    fetch_rtt_max_bytes: int = 16 << 20
    """The most a partition's fetch asks for across a long round trip."""
    fetchers_per_source_broker: int = 2
    """Connections to each source broker, each with a fetch in flight, that
    share the partitions this process copies from it."""
    socket_receive_buffer_bytes: int = -1
    """SO_RCVBUF of the connections to source brokers; -1 (default): the
    kernel's autotuning, which grows it to the link's bandwidth x round trip
    (up to net.ipv4.tcp_rmem's maximum). A fixed size caps each connection
    at that many bytes per round trip."""
    retry_backoff_ms: int = 200
    """First wait before re-sending to the target after a retriable failure..."""
    retry_backoff_max_ms: int = 5000
    """...doubling up to this while the target stays unreachable (never gives up)."""
    session_timeout_ms: int = 6000
    """ZooKeeper session timeout of the group membership."""
    on_corrupt: str = "raise"
    """Corrupt data in a source partition: "raise" stops the mirror (CRITICAL,
    exit 1) with nothing past the damage committed, so an operator decides;
    "skip" copies around it, logs a WARNING and counts the skipped bytes
    (samsa_mirror_corrupt_skipped_bytes_total)."""
    audit: bool = True
    """Count what is copied, per source cluster and topic and window (the
    mirror tier of the audit), and publish monitoring events to the target's
    audit topic (_audit) every ``audit_publish_interval_ms`` and on stop. The
    source offsets a publish covers are committed only after it (a crash
    counts again, never loses counts)."""
    audit_datacenter: str = ""
    """The datacenter the mirror's counts are reported from (default: the target's name)."""
    audit_registry: str = ""
    """Schema registry of the monitoring events (default: the target's ZooKeeper)."""
    audit_window_ms: int = 600_000
    audit_dedup_ids: bool = True
    """Keep the ids of recent windows (as the cluster tier does): the mirror
    tier then reports missing and duplicated apart and exactly, instead of
    counts that net one against the other. 16-32 bytes per message copied in
    the last ``audit_dedup_windows`` windows."""
    audit_dedup_windows: int = 3
    audit_publish_interval_ms: int = 1_000
    """How often the counts are published; the source offsets they cover are
    committed right after, so this is also how far commits may lag."""
    metrics_host: str = "127.0.0.1"
    """Address the metrics endpoint listens on ("0.0.0.0": every interface)."""
    metrics_port: int = 9095
    """HTTP port of the Prometheus metrics (/metrics); 0 picks one, -1 disables."""
    metrics_http: HttpSecurity = field(default_factory=HttpSecurity)
    """TLS and users of the metrics port ([metrics_http] tls_cert_file,
    tls_key_file, tls_ca_file, tls_client_auth, users_file: as the HTTP
    services' [http], docs/security.md); empty: plain HTTP, anyone."""
    log_level: str = "INFO"
    log_format: str = "text"
    credentials: ServiceCredentials = field(default_factory=ServiceCredentials)
    """What the mirror authenticates with, to its sources and its target
    ([credentials] sasl_username, sasl_password_file, zookeeper_auth_file)."""
    """"text" or "json"."""

    def __post_init__(self) -> None:
        if not self.sources:
            raise ValueError("a mirror needs at least one [[sources]] cluster")
        if self.target is None:
            raise ValueError("a mirror needs a [target] cluster")
        for source in self.sources:
            if source.same_cluster(self.target):
                raise ValueError(f"source {source.name!r} ({source.zookeeper}) is the target "
                                 f"cluster itself: a mirror into its own source would loop")
        names = [s.name for s in self.sources] + [self.target.name]
        if len(set(names)) != len(names):
            raise ValueError(f"cluster names must differ: {names}")
        for i, a in enumerate(self.sources):
            for b in self.sources[i + 1:]:
                if a.same_cluster(b):
                    raise ValueError(f"sources {a.name!r} and {b.name!r} are the same cluster")
        for what in ("whitelist", "blacklist"):
            try:
                re.compile(getattr(self, what))
            except re.error as exc:
                raise ValueError(f"bad {what} {getattr(self, what)!r}: {exc}") from None
        if not self.group or "/" in self.group:
            raise ValueError(f"bad group name {self.group!r}")
        for name in ("target_partitions", "batch_size", "max_unacknowledged",
                     "commit_interval_ms", "fetch_max_bytes", "fetchers_per_source_broker",
                     "retry_backoff_ms",
                     "retry_backoff_max_ms", "session_timeout_ms"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")
        if self.fetch_rate_bytes < 0:
            raise ValueError("fetch_rate_bytes must be >= 0 (0: off)")
        if self.fetch_rate_bytes and \
                not self.fetch_max_bytes <= self.fetch_rtt_max_bytes <= 64 << 20:
            raise ValueError("fetch_rtt_max_bytes must be between fetch_max_bytes and 64 MiB")
        if self.socket_receive_buffer_bytes == 0 or self.socket_receive_buffer_bytes < -1:
            raise ValueError("socket_receive_buffer_bytes must be -1 (the kernel's "
                             "autotuning) or a size in bytes")
        if self.on_corrupt not in ("raise", "skip"):
            raise ValueError(f"on_corrupt must be raise or skip, not {self.on_corrupt!r}")
        if self.compression not in ("none", "gzip", "lz4", "zstd"):
            raise ValueError(f"compression must be none, gzip, lz4 or zstd, not "
                             f"{self.compression!r}")
        if self.linger_ms < 0:
            raise ValueError("linger_ms must be >= 0")
        if not -1 <= self.metrics_port <= 65535:
            raise ValueError("metrics_port must be -1..65535")
        if self.log_format not in ("text", "json"):
            raise ValueError("log_format must be text or json")


__all__ = ["ConfigError", "MirrorConfig"]
