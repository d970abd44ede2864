"""The lag service's settings (config/lag.toml lists each with its default)."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from broker.security.credentials import ServiceCredentials
from broker.service_kit.http_security import HttpSecurity
from broker.lag.evaluator import Thresholds
from broker.coordination.named_cluster import NamedCluster


@dataclass(frozen=True)
class LagServiceConfig:
    clusters: tuple[NamedCluster, ...] = ()
    """The clusters whose groups are evaluated (at least one)."""
    http_host: str = "127.0.0.1"
    http_port: int = 8091
    """JSON under /v3/kafka/..., Prometheus text under /metrics; 0 = any free port."""
    interval_s: float = 5.0
    """Seconds between evaluations (each reads every group's commits once)."""
    groups: str = ".*"
    """Regex: evaluate the groups whose whole name matches."""
    window_size: int = 10
    """Commits kept per partition for the WARN and STALL rules."""
    stop_min_ms: int = 10_000
    """No commit for this long while behind is STOP, at the least..."""
    stop_intervals: float = 3.0
    """...or for this many times the partition's median time between commits."""
    log_level: str = "INFO"
    log_format: str = "text"
    credentials: ServiceCredentials = field(default_factory=ServiceCredentials)
    """The user it fetches the log ends with, where the brokers ask for SCRAM
    ([credentials] sasl_username, sasl_password_file; docs/security.md)."""
    http: HttpSecurity = field(default_factory=HttpSecurity)
    """TLS and users of the HTTP port ([http] tls_cert_file, tls_key_file,
    tls_ca_file, tls_client_auth, users_file; docs/security.md)."""

    def __post_init__(self) -> None:
        if not self.clusters:
            raise ValueError("give at least one cluster (--cluster NAME=ZOOKEEPER)")
        names = [c.name for c in self.clusters]
        if len(set(names)) != len(names):
            raise ValueError(f"cluster names repeat: {names}")
        if self.interval_s <= 0 or not 0 <= self.http_port < 65536:
            raise ValueError("interval_s must be > 0 and http_port a port")
        try:
            re.compile(self.groups)
        except re.error as exc:
            raise ValueError(f"groups is not a regular expression: {exc}") from None
        self.thresholds()                      # validates them

    def thresholds(self) -> Thresholds:
        return Thresholds(self.window_size, self.stop_min_ms, self.stop_intervals)
