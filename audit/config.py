"""Settings of the audit's processes (TOML files, then command-line options,
then ``--set KEY=VALUE``; every setting and its default: config/audit.toml).
"""
from __future__ import annotations

from dataclasses import dataclass

from broker import settings
from broker.settings import ConfigError

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
    """Keep the ids of recent windows: exact duplicate counts (memory: ~70
    bytes per message of the last ``dedup_windows`` windows)."""
    dedup_windows: int = 3
    auto_offset_reset: str = "earliest"
    """Where a new group starts: "earliest" counts what the cluster holds."""
    metrics_port: int = -1
    """Prometheus /metrics port; 0 = any free, -1 = off."""
    log_level: str = "INFO"
    log_format: str = "text"

    def __post_init__(self) -> None:
        if not self.cluster:
            raise ValueError("cluster must be named")
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


def load_count_config(path: str | None, overrides: dict | None = None) -> CountConfig:
    return settings.load(CountConfig, path, overrides)


__all__ = ["CountConfig", "ConfigError", "load_count_config"]
