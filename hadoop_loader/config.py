"""The loader's settings (TOML ``[loader]`` table, then options, then ``--set``;
every setting and its default: config/loader.toml)."""
from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class LoaderConfig:
    zookeeper: str
    """The analysis cluster's ZooKeeper connect string with its chroot."""
    output: str = "warehouse"
    """Where the Parquet goes: a local path or file:// URI (the embedded default)."""
    registry: str = ""
    """Schema registry URL (default: zookeeper://<zookeeper>)."""
    whitelist: str = ".*"
    blacklist: str = ""
    master: str = "local[*]"
    """Spark master: local[*] by default, any master by configuration."""
    max_unit_bytes: int = 64 << 20
    """A partition range longer than this is split at segment starts into several tasks."""
    fetch_bytes: int = 1 << 20
    on_retention_gap: str = "fail"
    """Committed offsets older than the brokers' retention: "fail", or "skip"
    to the earliest and report the bytes lost (the audit shows them as loss)."""
    audit: bool = True
    """After each publish, send the hadoop tier's monitoring events (counted
    from what was written) to the cluster's audit topic."""
    cluster_name: str = "analysis"
    """The cluster loaded, as the audit names it."""
    datacenter: str = ""
    """Where the loader runs (default: the cluster's name)."""
    audit_window_ms: int = 600_000
    progress_interval_s: float = 10.0
    """A progress line this often while the tasks pull (work units done, MB, MB/s)."""
    app_name: str = "samsa-hadoop-loader"
    log_level: str = "INFO"
    log_format: str = "text"

    def __post_init__(self) -> None:
        if self.on_retention_gap not in ("fail", "skip"):
            raise ValueError("on_retention_gap is 'fail' or 'skip'")
        if self.max_unit_bytes <= 0 or self.fetch_bytes <= 0:
            raise ValueError("max_unit_bytes and fetch_bytes must be positive")

    @property
    def output_dir(self) -> str:
        path = self.output[len("file://"):] if self.output.startswith("file://") else self.output
        if "://" in path:
            raise ValueError(f"output {self.output}: only local paths (file://) are supported "
                             f"so far")
        return os.path.abspath(path)

    @property
    def effective_registry(self) -> str:
        return self.registry or f"zookeeper://{self.zookeeper}"
