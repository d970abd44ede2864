"""Settings of the audit's processes (TOML files, then command-line options,
then ``--set KEY=VALUE``; every setting and its default: config/audit.toml).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from broker.security.credentials import ServiceCredentials
from broker.coordination.named_cluster import check_name
from broker.coordination.zk import split_connect_string
from broker.service_kit.http_security import HttpSecurity
from broker.service_kit.settings import ConfigError

from audit.counting import DEFAULT_WINDOW_MS


@dataclass(frozen=True)
class CountConfig:
    """``python -m audit count``: one cluster tier."""
    cluster: str
    """The cluster counted, by name (dc-a, analysis)."""
    zookeeper: str
    """Its ZooKeeper connect string with the cluster's chroot."""
    datacenter: str = ""
    """Where this counter runs (default: the cluster's name)."""
    registry: str = ""
    """Schema registry URL for the monitoring events (default: the cluster's
    ZooKeeper, zookeeper://<zookeeper>)."""
    group: str = ""
    """Consumer group in the cluster (default samsa-audit-<cluster>)."""
    whitelist: str = ".*"
    blacklist: str = ""
    """Topics not counted (the audit topic never is)."""
    window_ms: int = DEFAULT_WINDOW_MS
    publish_interval_ms: int = 60_000
    """Monitoring events are published this often; offsets are committed only
    after the events that count their messages are published."""
    dedup_ids: bool = True
    """Keep the ids of recent windows: exact duplicate counts (memory: 16 to
    32 bytes per message of the last ``dedup_windows`` windows, in C)."""
    dedup_windows: int = 3
    auto_offset_reset: str = "earliest"
    """Where a new group starts: "earliest" counts what the cluster holds."""
    metrics_port: int = -1
    """Prometheus /metrics port; 0 = any free, -1 = off."""
    metrics_http: HttpSecurity = field(default_factory=HttpSecurity)
    """TLS and users of the metrics port ([count.metrics_http] tls_cert_file,
    tls_key_file, tls_ca_file, tls_client_auth, users_file: as the HTTP
    services' [http], docs/security.md); empty: plain HTTP, anyone."""
    log_level: str = "INFO"
    log_format: str = "text"
    credentials: ServiceCredentials = field(default_factory=ServiceCredentials)
    """What it authenticates with ([credentials] sasl_username,
    sasl_password_file, zookeeper_auth_file; docs/security.md)."""

    def __post_init__(self) -> None:
        check_name(self.cluster)
        split_connect_string(self.zookeeper)
        if self.publish_interval_ms <= 0 or self.window_ms <= 0:
            raise ValueError("publish_interval_ms and window_ms must be positive")
        if self.auto_offset_reset not in ("earliest", "latest"):
            raise ValueError("auto_offset_reset is 'earliest' or 'latest'")

    @property
    def effective_datacenter(self) -> str:
        return self.datacenter or self.cluster

    @property
    def effective_registry(self) -> str:
        return self.registry or f"zookeeper://{self.zookeeper}"

    @property
    def effective_group(self) -> str:
        return self.group or f"samsa-audit-{self.cluster}"




@dataclass(frozen=True)
class ServeConfig:
    """``python -m audit serve``: the audit service of the analysis cluster."""
    zookeeper: str
    """The analysis cluster's ZooKeeper connect string with its chroot: where
    every tier's monitoring events arrive (the audit topic is mirrored)."""
    registry: str = ""
    """Schema registry (default: zookeeper://<zookeeper>)."""
    group: str = "samsa-audit-service"
    db_url: str = ""
    """SQLAlchemy URL of the database; empty = SQLite, <data_dir>/audit.db.
    PostgreSQL: postgresql+psycopg://user@host:port/database."""
    db_credentials_file: str = ""
    """A JSON file with the database's ``username`` and ``password`` (the
    form of RDS's managed master user secret), read for every new
    connection: a rotated password is taken without a restart; empty: the
    URL's."""
    data_dir: str = "."
    http_host: str = "127.0.0.1"
    http_port: int = 8090
    """Reports, the completeness endpoint and /metrics; 0 = any free port."""
    grace_ms: int = 30 * 60 * 1000
    """A window is "pending", not "lost", until this long after it ended and
    after the audit received the producers' last report of it (a producer
    whose clock is behind reports into windows long ended)."""
    default_hours: int = 24
    """The period the HTML report shows when none is asked for."""
    auto_offset_reset: str = "earliest"
    log_level: str = "INFO"
    log_format: str = "text"
    credentials: ServiceCredentials = field(default_factory=ServiceCredentials)
    """What it authenticates with ([credentials] sasl_username,
    sasl_password_file, zookeeper_auth_file; docs/security.md)."""
    http: HttpSecurity = field(default_factory=HttpSecurity)
    """TLS and users of the pages, the API and /metrics ([serve.http]
    tls_cert_file, tls_key_file, tls_ca_file, tls_client_auth, users_file;
    docs/security.md)."""

    def __post_init__(self) -> None:
        if self.grace_ms < 0 or self.default_hours <= 0:
            raise ValueError("grace_ms must be >= 0 and default_hours > 0")

    @property
    def effective_registry(self) -> str:
        return self.registry or f"zookeeper://{self.zookeeper}"

    @property
    def effective_db_url(self) -> str:
        from audit.store import default_url
        return self.db_url or default_url(self.data_dir)
__all__ = ["CountConfig", "ServeConfig", "ConfigError"]
