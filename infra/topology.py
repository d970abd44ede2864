"""The multi-datacenter topology of the paper's section 5, as data.

A ZooKeeper ensemble serves every cluster, each under a chroot of its own. Each
*datacenter* runs a Samsa cluster behind a load balancer that spreads the
local producers over its brokers; an *analysis* cluster receives, through
*mirrors*, a copy of what every datacenter collects. This module is only the
model and its file: frozen dataclasses, validated together when built. It
never starts a process or opens a socket (``infra.local`` runs a topology on
one machine; a Terraform rendering can read the same model), and it knows no
directory but the optional ``data_dir`` of a cluster.

File format (TOML; every key has a default except the names, and
``docs/multi-dc.md`` explains each one)::

    name = "samsa-lab"
    host = "127.0.0.1"               # address every process binds and advertises
    base_port = 19000                # the port layout below starts here

    [zookeeper]
    size = 1                         # 1 standalone, 3 (any odd number <= 9) a quorum
    # client_port = 0                # first member's client port (0: from base_port)
    # peer_port = 0                  # first member's quorum port (0: from base_port)

    [[datacenters]]
    name = "dc-a"
    brokers = 2
    # chroot = "/dc-a"               # default "/<name>"
    default_partitions = 2           # partitions per broker of an auto-created topic
    # replication_factor = 0         # replicas per partition (0: unreplicated; <= brokers)
    broker_settings = ["log.flush_ms=20"]    # any other broker setting, as for --set
    # data_dir = ""                  # default data/<name> in the lab's state directory
    # broker_port = 0                # first broker's port, broker i at +i (0: layout)
    # metrics_port = 0               # first broker's /metrics port (0: layout, -1: off)
    [datacenters.load_balancer]      # required for a datacenter
    balance = "leastconn"            # or "roundrobin"
    health_check_ms = 500            # TCP check of every broker this often...
    fall = 2                         # ...DOWN after this many failures in a row,
    rise = 2                         # ...UP again after this many successes
    # port = 0                       # where producers connect (0: layout)
    # stats_port = 0                 # HAProxy's stats page (0: layout, -1: none)

    [analysis]                       # optional; same keys, load balancer optional
    name = "analysis"
    brokers = 2

    [[mirrors]]
    name = "to-analysis"
    sources = ["dc-a", "dc-b"]
    target = "analysis"
    whitelist = ".*"                 # whole topic names matching this...
    blacklist = ""                   # ...and not this (empty: none)
    processes = 2                    # mirror processes sharing the work (one group)
    target_partitions = 2
    # group = ""                     # consumer group (default "mirror-<name>")
    # metrics_port = 0               # first process's /metrics (0: layout, -1: off)
    # settings = ["batch_size=500"]  # any other mirror setting (mirror/config.py)

    [monitoring]                     # optional: the lag service and Prometheus that
    scrape_interval_s = 5.0          # `python -m infra.local up` starts (ports: free ones)
    evaluation_interval_s = 5.0      # how often Prometheus evaluates the alert rules
    lag_settings = []                # any other lag-service setting: ["stop_min_ms=30000"]

    [security]                       # optional: the secured lab (docs/security.md)
    enabled = false                  # `python -m infra.local up` turns it on unless --insecure

Port layout (a port set to 0 takes its place here; B is ``base_port``):

* ZooKeeper member i: client ``B+i``, quorum ``B+10+2i``, election ``B+11+2i``;
* the c-th cluster (datacenters in file order, then analysis), from
  ``K = B+100*(c+1)``: load balancer ``K``, its stats page ``K+1``, broker i
  ``K+10+i`` (secured: its TLS listener; its plaintext one, asking for
  SCRAM, on a free port), broker i's metrics ``K+50+i``;
* the m-th mirror, from ``M = B+100*(clusters+1)``: process i's metrics ``M+10*m+i``.

With the default base 19000 and file: ZooKeeper 19000, dc-a's load balancer
19100 (brokers 19110-19111), dc-b's 19200, analysis brokers 19310-19311,
mirror metrics 19400-19401. ``--set base_port=29000`` moves them all.
"""
from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field
from typing import Any

from broker.service_kit import settings
from broker.config import BrokerConfig
from broker.lag.config import LagServiceConfig
from broker.service_kit.settings import ConfigError
from mirror.config import MirrorConfig

_NAME = re.compile(r"[A-Za-z0-9_.-]+")
_CHROOT = re.compile(r"(/[A-Za-z0-9_.-]+)+")

#: Broker settings the topology itself gives each broker (not in broker_settings).
LAB_BROKER_KEYS = ("broker_id", "host", "advertised_host", "port", "data_dir", "metrics_port",
                   "zookeeper", "log_format", "default_partitions", "replication_factor")
#: Mirror settings the topology itself gives each process (not in settings).
LAB_MIRROR_KEYS = ("sources", "target", "group", "whitelist", "blacklist", "consumer_id",
                   "target_partitions", "metrics_port", "metrics_host", "log_format")
#: Lag-service settings the topology itself gives it (not in lag_settings).
LAB_LAG_KEYS = ("clusters", "http_host", "http_port", "log_format")

ZOOKEEPER_MAX_SIZE = 9
CLUSTER_BLOCK = 100          # ports per cluster in the layout
LAYOUT_MAX_BROKERS = 40      # brokers K+10 .. K+49, their metrics K+50 .. K+89
LAYOUT_MAX_PROCESSES = 10    # mirror processes per mirror in the layout


@dataclass(frozen=True)
class ZooKeeperSpec:
    size: int = 1
    """Members: 1 runs a standalone server, an odd number >= 3 a quorum (at most 9)."""
    client_port: int = 0
    """First member's client port; member i listens on client_port + i
    (0: base_port + i)."""
    peer_port: int = 0
    """First member's quorum port; member i uses peer_port + 2i (quorum) and
    peer_port + 2i + 1 (election) (0: base_port + 10 + 2i ...). Unused when size is 1."""

    def __post_init__(self) -> None:
        if not 1 <= self.size <= ZOOKEEPER_MAX_SIZE or self.size % 2 == 0:
            raise ConfigError(f"zookeeper.size must be odd, 1..{ZOOKEEPER_MAX_SIZE}: "
                              f"got {self.size} (an even quorum tolerates no more "
                              f"failures than the odd one below it)")
        _check_port_setting("zookeeper.client_port", self.client_port)
        _check_port_setting("zookeeper.peer_port", self.peer_port)


@dataclass(frozen=True)
class LoadBalancerSpec:
    port: int = 0
    """Where the datacenter's producers connect (0: from the layout)."""
    stats_port: int = 0
    """HTTP port of the load balancer's stats page (0: from the layout; -1: none)."""
    balance: str = "leastconn"
    """"leastconn" (a new connection goes to the broker with the fewest: producers
    hold long connections) or "roundrobin"."""
    health_check_ms: int = 500
    """Interval of the TCP health check of each broker."""
    fall: int = 2
    """Failed checks in a row that mark a broker DOWN (no new connections)."""
    rise: int = 2
    """Passed checks in a row that mark a DOWN broker UP again."""
    connect_timeout_ms: int = 2000
    """How long a connection to a broker may take before it is retried elsewhere."""
    client_timeout_ms: int = 60_000
    """Idle time allowed on the producer's side; must exceed the brokers'
    longest long-poll (max_fetch_wait_ms, 30 s by default)."""
    server_timeout_ms: int = 60_000
    """Idle time allowed on the broker's side (same rule)."""
    retries: int = 3
    """Connection attempts to brokers before the client's connection is dropped;
    each retry may go to another broker (redispatch)."""
    max_connections: int = 4096
    """Connections the load balancer accepts at once."""

    def __post_init__(self) -> None:
        _check_port_setting("load_balancer.port", self.port)
        _check_port_setting("load_balancer.stats_port", self.stats_port, off_allowed=True)
        if self.balance not in ("leastconn", "roundrobin"):
            raise ConfigError(f"load_balancer.balance must be leastconn or roundrobin, "
                              f"not {self.balance!r}")
        if self.health_check_ms < 10:
            raise ConfigError("load_balancer.health_check_ms must be >= 10")
        for name in ("fall", "rise", "connect_timeout_ms", "client_timeout_ms",
                     "server_timeout_ms", "max_connections"):
            if getattr(self, name) < 1:
                raise ConfigError(f"load_balancer.{name} must be >= 1")
        if self.retries < 0:
            raise ConfigError("load_balancer.retries must be >= 0")


@dataclass(frozen=True)
class ClusterSpec:
    name: str
    """The cluster's name: in logs, metrics, process names, the mirror's marks."""
    brokers: int = 2
    """Brokers in the cluster; their ids are 0..brokers-1."""
    chroot: str = ""
    """The cluster's ZooKeeper chroot (default "/<name>")."""
    default_partitions: int = 2
    """Partitions per broker of a topic created on first produce (of a
    replicated cluster: default_partitions x brokers partitions in all)."""
    replication_factor: int = 0
    """Replicas of every topic the cluster creates (docs/replication.md):
    0 keeps the paper's model (each broker its own partitions, lost with
    its disk); N >= 1 places each partition on N brokers (at most
    ``brokers``), one of them its leader, across racks where brokers
    declare one ("rack=..." in broker_settings)."""
    broker_settings: tuple[str, ...] = ()
    """Any other broker setting as KEY=VALUE, as ``python -m broker --set`` takes
    it: "log.flush_ms=20", "zookeeper_session_timeout_ms=4000"."""
    data_dir: str = ""
    """Directory of the brokers' data (broker i in <data_dir>/broker-<i>); a
    relative one is inside the lab's state directory (default "data/<name>")."""
    broker_port: int = 0
    """First broker's port; broker i listens on broker_port + i (0: from the layout)."""
    metrics_port: int = 0
    """First broker's /metrics port, broker i at +i (0: from the layout; -1: off)."""
    load_balancer: LoadBalancerSpec | None = None
    """The load balancer in front of the brokers: required for a datacenter,
    optional for the analysis cluster."""

    def __post_init__(self) -> None:
        if not _NAME.fullmatch(self.name or ""):
            raise ConfigError(f"cluster name {self.name!r}: use letters, digits, '.', '_', '-'")
        if not 1 <= self.brokers <= 1000:
            raise ConfigError(f"cluster {self.name!r}: brokers must be 1..1000, not {self.brokers}")
        if self.chroot and not _CHROOT.fullmatch(self.chroot):
            raise ConfigError(f"cluster {self.name!r}: chroot {self.chroot!r} must be a path "
                              f"like \"/dc-a\" (letters, digits, '.', '_', '-')")
        if not 0 <= self.replication_factor <= self.brokers:
            raise ConfigError(f"cluster {self.name!r}: replication_factor must be 0..brokers "
                              f"({self.brokers}), not {self.replication_factor}: each replica "
                              f"of a partition lives on another broker")
        _check_port_setting(f"cluster {self.name!r} broker_port", self.broker_port)
        _check_port_setting(f"cluster {self.name!r} metrics_port", self.metrics_port,
                            off_allowed=True)
        # parse and check every broker setting now, as the brokers will
        self.broker_config(0)

    @property
    def zk_chroot(self) -> str:
        return self.chroot or f"/{self.name}"

    @property
    def replicated(self) -> bool:
        return self.replication_factor >= 1

    def topic_partitions(self) -> int:
        """Partitions of a topic the lab creates, as a CreateTopic to one of
        its brokers means them: per broker on an unreplicated cluster (every
        broker gets its own), in all on a replicated one."""
        return self.default_partitions * (self.brokers if self.replicated else 1)

    def broker_overrides(self) -> dict[str, str]:
        """The cluster's own broker settings (default_partitions,
        replication_factor and broker_settings), as ``--set`` overrides."""
        extra = _extra_settings(f"cluster {self.name!r} broker_settings", self.broker_settings,
                                LAB_BROKER_KEYS, "use its own keys (brokers, broker_port, "
                                "metrics_port, data_dir, chroot, default_partitions, "
                                "replication_factor)")
        partitions = self.topic_partitions()
        return {"default_partitions": str(partitions),
                "replication_factor": str(self.replication_factor), **extra}

    def broker_config(self, index: int, zookeeper: str = "127.0.0.1:2181") -> BrokerConfig:
        """The settings broker ``index`` runs with (ports and directory left at
        their defaults: the lab gives them on the command line)."""
        overrides: dict[str, Any] = {**self.broker_overrides(), "broker_id": index,
                                     "zookeeper": zookeeper + self.zk_chroot}
        try:
            return settings.load(BrokerConfig, None, overrides)
        except (ConfigError, ValueError) as exc:
            raise ConfigError(f"cluster {self.name!r} broker settings: {exc}") from None


@dataclass(frozen=True)
class MirrorSpec:
    name: str
    """The mirror's name: its processes are "<name>-<i>"."""
    sources: tuple[str, ...] = ()
    """Names of the clusters to copy from."""
    target: str = ""
    """Name of the cluster to copy into (not one of the sources)."""
    whitelist: str = ".*"
    """Regex: mirror every topic whose whole name matches..."""
    blacklist: str = ""
    """...and does not match this one (empty: none)."""
    processes: int = 1
    """Mirror processes; they form one consumer group in each source and share
    its partitions."""
    target_partitions: int = 2
    """Partitions per target broker of a topic the mirror creates in the target."""
    group: str = ""
    """The consumer group in every source (default "mirror-<name>")."""
    metrics_port: int = 0
    """First process's /metrics port, process i at +i (0: from the layout; -1: off)."""
    settings: tuple[str, ...] = ()
    """Any other mirror setting as KEY=VALUE (mirror/config.py): "batch_size=500"."""

    def __post_init__(self) -> None:
        if not _NAME.fullmatch(self.name or ""):
            raise ConfigError(f"mirror name {self.name!r}: use letters, digits, '.', '_', '-'")
        if not self.sources:
            raise ConfigError(f"mirror {self.name!r}: sources must name at least one cluster")
        if len(set(self.sources)) != len(self.sources):
            raise ConfigError(f"mirror {self.name!r}: a source is named twice: "
                              f"{list(self.sources)}")
        if not self.target:
            raise ConfigError(f"mirror {self.name!r}: target must name a cluster")
        if self.target in self.sources:
            raise ConfigError(f"mirror {self.name!r}: target {self.target!r} is also a source: "
                              f"a mirror into its own source would copy its copies for ever")
        if not 1 <= self.processes <= 1000:
            raise ConfigError(f"mirror {self.name!r}: processes must be 1..1000")
        for what in ("whitelist", "blacklist"):
            try:
                re.compile(getattr(self, what))
            except re.error as exc:
                raise ConfigError(f"mirror {self.name!r}: bad {what} "
                                  f"{getattr(self, what)!r}: {exc}") from None
        _check_port_setting(f"mirror {self.name!r} metrics_port", self.metrics_port,
                            off_allowed=True)
        self.overrides()

    @property
    def mirror_group(self) -> str:
        return self.group or f"mirror-{self.name}"

    def overrides(self) -> dict[str, str]:
        """``settings`` as overrides of the mirror's config."""
        return _extra_settings(f"mirror {self.name!r} settings", self.settings,
                               LAB_MIRROR_KEYS, "use the mirror's own keys")


@dataclass(frozen=True)
class MonitoringSpec:
    """What watches the lab: a lag service (python -m broker.lag) over every
    cluster and a Prometheus that scrapes every process and evaluates the
    repository's alert rules (infra/prometheus/alerts.yml). The lab starts
    them when asked (``up`` does by default); their ports are free ones
    (broker/service_kit/ports.py), recorded in the state file."""
    scrape_interval_s: float = 5.0
    """How often Prometheus scrapes every target."""
    evaluation_interval_s: float = 5.0
    """How often Prometheus evaluates the alert rules."""
    lag_settings: tuple[str, ...] = ()
    """Any other lag-service setting as KEY=VALUE (config/lag.toml):
    "stop_min_ms=30000", "interval_s=2"."""

    def __post_init__(self) -> None:
        for name in ("scrape_interval_s", "evaluation_interval_s"):
            if not 0.1 <= getattr(self, name) <= 3600:
                raise ConfigError(f"monitoring.{name} must be 0.1..3600 seconds, not "
                                  f"{getattr(self, name)}")
        self.lag_overrides()

    def lag_overrides(self) -> dict[str, str]:
        """``lag_settings`` as overrides of the lag service's config."""
        return _extra_settings("monitoring lag_settings", self.lag_settings, LAB_LAG_KEYS,
                               "use the lag service's own keys (config/lag.toml)")


@dataclass(frozen=True)
class SecuritySpec:
    """Whether the lab runs secured (docs/security.md, "The secured lab"):
    the brokers' TLS listeners at the layout's broker ports asking for
    SCRAM-SHA-512, ACLs enforced, ZooKeeper identities, a certificate
    authority and secrets of the lab's own (infra/local/lab_security.py).
    ``python -m infra.local up`` turns it on unless ``--insecure``."""
    enabled: bool = False
    """Run the lab secured."""


#: the pipeline's own services, hosts of the analysis datacenter in the network lab
NETWORK_SERVICES = ("audit", "airflow", "lag", "prometheus")
#: the first host's number in a datacenter's /24
FIRST_HOST = 10


@dataclass(frozen=True)
class NetworkHost:
    """A host of the network lab: a network namespace with one address."""
    name: str
    cluster: str
    role: str
    address: str


@dataclass(frozen=True)
class LinkSpec:
    """The WAN between two clusters' datacenters, both ways, in the network
    lab (infra/local/network): what its router adds to every packet."""
    between: tuple[str, ...] = ()
    """The two clusters it joins: ["dc-a", "analysis"]."""
    rtt_ms: float = 0.0
    """Round-trip time added (half each way)."""
    jitter_ms: float = 0.0
    """Each packet's one-way delay varies by up to this much either way."""
    loss: float = 0.0
    """Fraction of packets dropped at random, each way (0.001: 0.1 %)."""
    rate_mbit: float = 0.0
    """Bandwidth each way in Mbit/s (0: unlimited)."""

    def __post_init__(self) -> None:
        if len(self.between) != 2 or self.between[0] == self.between[1]:
            raise ConfigError(f"network link between {list(self.between)}: name two "
                              f"different clusters")
        for what, value, high in (("rtt_ms", self.rtt_ms, 60_000),
                                  ("jitter_ms", self.jitter_ms, 60_000),
                                  ("loss", self.loss, 1), ("rate_mbit", self.rate_mbit, 1e6)):
            if not 0 <= value <= high:
                raise ConfigError(f"network link between {list(self.between)}: {what} must "
                                  f"be 0..{high:g}, not {value}")


@dataclass(frozen=True)
class NetworkSpec:
    """The network lab's addressing and WAN links (infra/local/network): each
    cluster's datacenter is a /24 of ``subnet`` (the c-th cluster, in
    clusters() order, the (c+1)-th /24; the first /24 joins the lab's own
    command to the router). Links not listed add nothing."""
    subnet: str = "10.77.0.0/16"
    """A private IPv4 range of /16 to /20, inside which every host of the lab is."""
    mtu: int = 1500
    """The MTU of every interface of the lab."""
    tcp_buffer_max_bytes: int = 64 << 20
    """Every host's TCP autotuning ceiling (the maximum of net.ipv4.tcp_rmem
    and tcp_wmem), as on hosts tuned for a WAN: a connection's window grows
    up to it. 0 keeps this machine's."""
    links: tuple[LinkSpec, ...] = ()
    """The shaped WAN links ([[network.links]])."""
    namespaces: bool = False
    """Every host in a network namespace of its own, at its address in
    ``subnet`` (the lab's netns runtime sets it): each datacenter then runs
    a ZooKeeper of its own."""

    def __post_init__(self) -> None:
        try:
            net = ipaddress.IPv4Network(self.subnet)
        except ValueError as exc:
            raise ConfigError(f"network.subnet {self.subnet!r}: {exc}") from None
        if not net.is_private or not 16 <= net.prefixlen <= 20:
            raise ConfigError(f"network.subnet {self.subnet!r} must be a private IPv4 range "
                              f"of /16 to /20 (10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16)")
        if not 576 <= self.mtu <= 65_000:
            raise ConfigError(f"network.mtu must be 576..65000, not {self.mtu}")
        if self.tcp_buffer_max_bytes and not 1 << 16 <= self.tcp_buffer_max_bytes <= 1 << 30:
            raise ConfigError(f"network.tcp_buffer_max_bytes must be 0 (this machine's) or "
                              f"64 KiB..1 GiB, not {self.tcp_buffer_max_bytes}")
        _no_duplicates("network link", [" and ".join(sorted(link.between))
                                        for link in self.links])


@dataclass(frozen=True)
class Topology:
    name: str = "samsa-lab"
    """The lab's name (in status output)."""
    host: str = "127.0.0.1"
    """Address every process binds and advertises."""
    base_port: int = 19000
    """Start of the port layout (see the module docstring)."""
    zookeeper: ZooKeeperSpec = field(default_factory=ZooKeeperSpec)
    """The ZooKeeper ensemble every cluster shares (each in its own chroot)."""
    datacenters: tuple[ClusterSpec, ...] = ()
    """The datacenter clusters, each behind its load balancer (at least one)."""
    analysis: ClusterSpec | None = None
    """The analysis cluster the mirrors feed (optional)."""
    mirrors: tuple[MirrorSpec, ...] = ()
    """Mirrors from clusters into another cluster."""
    monitoring: MonitoringSpec = field(default_factory=MonitoringSpec)
    """The lag service and Prometheus, when the lab runs them."""
    network: NetworkSpec = field(default_factory=NetworkSpec)
    """The network lab's addresses and WAN links (used by the netns runtime only)."""
    security: SecuritySpec = field(default_factory=SecuritySpec)
    """TLS, users, ACLs and ZooKeeper identities of the lab's own (off: open)."""

    def __post_init__(self) -> None:
        if not _NAME.fullmatch(self.name or ""):
            raise ConfigError(f"topology name {self.name!r}: use letters, digits, '.', '_', '-'")
        if not self.host:
            raise ConfigError("host must not be empty")
        if not 1 <= self.base_port <= 65535:
            raise ConfigError(f"base_port must be 1..65535, not {self.base_port}")
        if not self.datacenters:
            raise ConfigError("a topology needs at least one [[datacenters]] cluster")
        names = [c.name for c in self.clusters()]
        _no_duplicates("cluster name", names)
        _no_duplicates("ZooKeeper chroot", [c.zk_chroot for c in self.clusters()])
        _no_duplicates("mirror name", [m.name for m in self.mirrors])
        for dc in self.datacenters:
            if dc.load_balancer is None:
                raise ConfigError(f"datacenter {dc.name!r} has no load balancer: add a "
                                  f"[datacenters.load_balancer] table (its producers reach "
                                  f"the brokers through it)")
        for cluster in self.clusters():
            lb = cluster.load_balancer
            if lb is None:
                continue
            fetch_wait = cluster.broker_config(0).max_fetch_wait_ms
            for what in ("client_timeout_ms", "server_timeout_ms"):
                if getattr(lb, what) <= fetch_wait:
                    raise ConfigError(
                        f"cluster {cluster.name!r}: load_balancer.{what} "
                        f"({getattr(lb, what)}) must exceed the brokers' max_fetch_wait_ms "
                        f"({fetch_wait}), or the load balancer cuts long-poll fetches")
        self._check_layout_limits()
        self._check_ports()
        groups: dict[tuple[str, str], str] = {}
        for mirror in self.mirrors:
            for name in (*mirror.sources, mirror.target):
                if name not in names:
                    raise ConfigError(f"mirror {mirror.name!r}: no cluster named {name!r} "
                                      f"(clusters: {', '.join(names)})")
            for source in mirror.sources:
                other = groups.setdefault((source, mirror.mirror_group), mirror.name)
                if other != mirror.name:
                    raise ConfigError(f"mirrors {other!r} and {mirror.name!r} use the same "
                                      f"group {mirror.mirror_group!r} in {source!r}: they "
                                      f"would split its partitions; give them groups of "
                                      f"their own")
            for index in range(mirror.processes):
                try:
                    mirror_config(self, mirror, index)
                except ConfigError as exc:
                    raise ConfigError(f"mirror {mirror.name!r}: {exc}") from None
        self._check_no_mirror_loop()
        for link in self.network.links:
            for name in link.between:
                if name not in names:
                    raise ConfigError(f"network link between {list(link.between)}: no "
                                      f"cluster named {name!r} (clusters: {', '.join(names)})")
        if len(names) + 1 > 2 ** (24 - ipaddress.IPv4Network(self.network.subnet).prefixlen):
            raise ConfigError(f"network.subnet {self.network.subnet} has too few /24s for "
                              f"{len(names)} clusters and the lab's own")
        per_datacenter: dict[str, int] = {}
        for host in self.network_hosts():
            per_datacenter[host.cluster] = per_datacenter.get(host.cluster, 0) + 1
        for cluster, count in per_datacenter.items():
            if count > 254 - FIRST_HOST:
                raise ConfigError(f"network: datacenter {cluster!r} has {count} hosts, more "
                                  f"than its /24 holds")
        try:
            lag_config(self, 0)
        except ConfigError as exc:
            raise ConfigError(f"monitoring: {exc}") from None

    # ---------------------------------------------------------------- clusters

    def clusters(self) -> list[ClusterSpec]:
        """Every cluster: the datacenters in file order, then the analysis cluster."""
        return [*self.datacenters, *([self.analysis] if self.analysis else [])]

    def cluster(self, name: str) -> ClusterSpec:
        for cluster in self.clusters():
            if cluster.name == name:
                return cluster
        raise ConfigError(f"no cluster named {name!r} (clusters: "
                          f"{', '.join(c.name for c in self.clusters())})")

    def kind(self, name: str) -> str:
        """"datacenter" or "analysis"."""
        self.cluster(name)
        return "analysis" if self.analysis and name == self.analysis.name else "datacenter"

    def mirror(self, name: str) -> MirrorSpec:
        for mirror in self.mirrors:
            if mirror.name == name:
                return mirror
        raise ConfigError(f"no mirror named {name!r} (mirrors: "
                          f"{', '.join(m.name for m in self.mirrors) or 'none'})")

    # ---------------------------------------------------------------- ZooKeeper

    def zookeeper_client_ports(self) -> list[int]:
        first = self.zookeeper.client_port or self.base_port
        return [first + i for i in range(self.zookeeper.size)]

    def zookeeper_peer_ports(self) -> list[tuple[int, int]]:
        """(quorum, election) port of each member; empty for a standalone server."""
        if self.zookeeper.size == 1:
            return []
        first = self.zookeeper.peer_port or self.base_port + 10
        return [(first + 2 * i, first + 2 * i + 1) for i in range(self.zookeeper.size)]

    def zookeeper_members(self, cluster: str | None = None) -> list[tuple[str, str, int]]:
        """(host, address, client port) of each member of the ensemble that
        serves ``cluster``: the one ensemble of every cluster, on ``host``;
        with ``network.namespaces``, the datacenter's own
        (``<cluster>.zookeeper-<i>``), and ``cluster`` must be named."""
        ports = self.zookeeper_client_ports()
        if not self.network.namespaces:
            return [(f"zookeeper-{i + 1}", self.host, port) for i, port in enumerate(ports)]
        if cluster is None:
            raise ConfigError("with network namespaces every datacenter has its own "
                              "ZooKeeper: name the cluster")
        self.cluster(cluster)
        return [(name, self.address_of(name), port) for name, port in
                zip((f"{cluster}.zookeeper-{i + 1}" for i in range(len(ports))), ports)]

    def zookeeper_connect(self, cluster: str | None = None) -> str:
        """The connect string of ``cluster``'s ensemble with its chroot (the
        shared ensemble at its root when no cluster is named)."""
        hosts = ",".join(f"{address}:{port}" for _h, address, port
                         in self.zookeeper_members(cluster))
        return hosts + (self.cluster(cluster).zk_chroot if cluster else "")

    # ---------------------------------------------------------------- hosts

    def network_hosts(self) -> list[NetworkHost]:
        """Every host of the network lab, datacenter by datacenter
        (docs/network-lab.md): its ZooKeeper members, brokers, load balancer,
        a client host; the mirrors in their target's datacenter; the
        pipeline's services in the analysis datacenter (else the first);
        last, each cluster's schema registry (its REST API), so that the
        hosts before keep their addresses."""
        slash24 = list(ipaddress.IPv4Network(self.network.subnet).subnets(new_prefix=24))
        clusters = self.clusters()
        names: dict[str, list[tuple[str, str]]] = {c.name: [] for c in clusters}
        for cluster in clusters:
            hosts = names[cluster.name]
            hosts += [(f"{cluster.name}.zookeeper-{i}", "zookeeper")
                      for i in range(1, self.zookeeper.size + 1)]
            hosts += [(f"{cluster.name}.broker-{i}", "broker") for i in range(cluster.brokers)]
            if cluster.load_balancer is not None:
                hosts.append((f"{cluster.name}.haproxy", "haproxy"))
            hosts.append((f"{cluster.name}.client", "client"))
        for mirror in self.mirrors:
            names[mirror.target] += [(f"{mirror.name}.mirror-{i}", "mirror")
                                     for i in range(mirror.processes)]
        services_at = self.analysis.name if self.analysis else clusters[0].name
        names[services_at] += [(service, service) for service in NETWORK_SERVICES]
        for cluster in clusters:
            names[cluster.name].append((f"{cluster.name}.registry", "registry"))
        out = []
        for c, cluster in enumerate(clusters):
            base = slash24[c + 1].network_address + FIRST_HOST
            out += [NetworkHost(name, cluster.name, role, str(base + h))
                    for h, (name, role) in enumerate(names[cluster.name])]
        return out

    def address_of(self, host: str) -> str:
        """Where the lab's process on ``host`` binds and is reached: its own
        address with ``network.namespaces``, else ``host`` (every process on
        this machine's one address)."""
        if not self.network.namespaces:
            return self.host
        for candidate in self.network_hosts():
            if candidate.name == host:
                return candidate.address
        raise ConfigError(f"no host {host!r} in the network lab")

    # ---------------------------------------------------------------- ports

    def _block(self, cluster: str) -> int:
        index = [c.name for c in self.clusters()].index(self.cluster(cluster).name)
        return self.base_port + CLUSTER_BLOCK * (index + 1)

    def broker_ports(self, cluster: str) -> list[int]:
        spec = self.cluster(cluster)
        first = spec.broker_port or self._block(cluster) + 10
        return [first + i for i in range(spec.brokers)]

    def broker_metrics_ports(self, cluster: str) -> list[int]:
        """Each broker's /metrics port; -1 for each when metrics are off."""
        spec = self.cluster(cluster)
        if spec.metrics_port == -1:
            return [-1] * spec.brokers
        first = spec.metrics_port or self._block(cluster) + 50
        return [first + i for i in range(spec.brokers)]

    def lb_port(self, cluster: str) -> int | None:
        """The load balancer's port, None when the cluster has none."""
        lb = self.cluster(cluster).load_balancer
        if lb is None:
            return None
        return lb.port or self._block(cluster)

    def lb_stats_port(self, cluster: str) -> int | None:
        """The load balancer's stats page port, None without one."""
        lb = self.cluster(cluster).load_balancer
        if lb is None or lb.stats_port == -1:
            return None
        return lb.stats_port or self._block(cluster) + 1

    def mirror_metrics_ports(self, mirror: str) -> list[int]:
        """Each mirror process's /metrics port; -1 for each when off."""
        spec = self.mirror(mirror)
        if spec.metrics_port == -1:
            return [-1] * spec.processes
        index = [m.name for m in self.mirrors].index(spec.name)
        first = spec.metrics_port or (self.base_port + CLUSTER_BLOCK * (len(self.clusters()) + 1)
                                      + 10 * index)
        return [first + i for i in range(spec.processes)]

    def ports(self) -> list[tuple[int, str]]:
        """Every port the topology listens on, with what listens there."""
        out = [(p, f"ZooKeeper {i + 1} client") for i, p in enumerate(self.zookeeper_client_ports())]
        for i, (quorum, election) in enumerate(self.zookeeper_peer_ports()):
            out += [(quorum, f"ZooKeeper {i + 1} quorum"), (election, f"ZooKeeper {i + 1} election")]
        for cluster in self.clusters():
            out += [(p, f"{cluster.name} broker {i}")
                    for i, p in enumerate(self.broker_ports(cluster.name))]
            out += [(p, f"{cluster.name} broker {i} metrics")
                    for i, p in enumerate(self.broker_metrics_ports(cluster.name)) if p != -1]
            if self.lb_port(cluster.name) is not None:
                out.append((self.lb_port(cluster.name), f"{cluster.name} load balancer"))
            if self.lb_stats_port(cluster.name) is not None:
                out.append((self.lb_stats_port(cluster.name),
                            f"{cluster.name} load balancer stats"))
        for mirror in self.mirrors:
            out += [(p, f"mirror {mirror.name} process {i} metrics")
                    for i, p in enumerate(self.mirror_metrics_ports(mirror.name)) if p != -1]
        return out

    # ---------------------------------------------------------------- checks

    def _check_layout_limits(self) -> None:
        for cluster in self.clusters():
            if cluster.brokers > LAYOUT_MAX_BROKERS and not (cluster.broker_port
                                                             and cluster.metrics_port):
                raise ConfigError(f"cluster {cluster.name!r}: more than {LAYOUT_MAX_BROKERS} "
                                  f"brokers do not fit the port layout: set broker_port and "
                                  f"metrics_port")
        for mirror in self.mirrors:
            if mirror.processes > LAYOUT_MAX_PROCESSES and not mirror.metrics_port:
                raise ConfigError(f"mirror {mirror.name!r}: more than {LAYOUT_MAX_PROCESSES} "
                                  f"processes do not fit the port layout: set metrics_port")

    def _check_ports(self) -> None:
        seen: dict[int, str] = {}
        for port, what in self.ports():
            if not 1 <= port <= 65535:
                raise ConfigError(f"{what}: port {port} is out of range (lower base_port or "
                                  f"the explicit port)")
            if port in seen:
                raise ConfigError(f"port {port} is taken twice: by {seen[port]} and by {what}")
            seen[port] = what

    def _check_no_mirror_loop(self) -> None:
        # an edge source -> target per mirror: a cycle copies copies for ever
        edges: dict[str, set[str]] = {}
        for mirror in self.mirrors:
            for source in mirror.sources:
                edges.setdefault(source, set()).add(mirror.target)
        done: set[str] = set()

        def visit(node: str, path: list[str]) -> None:
            if node in path:
                loop = path[path.index(node):] + [node]
                raise ConfigError(f"the mirrors form a loop: {' -> '.join(loop)}")
            if node in done:
                return
            for nxt in sorted(edges.get(node, ())):
                visit(nxt, path + [node])
            done.add(node)

        for start in sorted(edges):
            visit(start, [])


def _check_port_setting(what: str, port: int, off_allowed: bool = False) -> None:
    low = -1 if off_allowed else 0
    if not low <= port <= 65535:
        raise ConfigError(f"{what} must be {'-1 (off), ' if off_allowed else ''}0 (from the "
                          f"layout) or a port 1..65535, not {port}")


def _extra_settings(what: str, items: tuple[str, ...], reserved_keys, hint: str
                    ) -> dict[str, str]:
    """``KEY=VALUE`` items as overrides, refusing the keys the topology sets itself."""
    try:
        extra = settings.parse_overrides(list(items))
    except ConfigError as exc:
        raise ConfigError(f"{what}: {exc}") from None
    reserved = sorted(set(extra) & set(reserved_keys))
    if reserved:
        raise ConfigError(f"{what}: {', '.join(reserved)} come from the topology; {hint}")
    return extra


def _no_duplicates(what: str, values: list[str]) -> None:
    seen = set()
    for value in values:
        if value in seen:
            raise ConfigError(f"{what} {value!r} is used twice")
        seen.add(value)


# -------------------------------------------------------------------- loading

def load_topology(path: str | None, overrides: dict[str, Any] | None = None) -> Topology:
    """The topology in ``path`` (TOML) with dotted ``overrides`` on top
    (``{"base_port": "29000", "datacenters.dc-a.brokers": "3"}``); raises
    ConfigError naming what is wrong."""
    return settings.load(Topology, path, overrides)


def to_toml(topology: Topology) -> str:
    """The topology as TOML that ``load_topology`` reads back to an equal one."""
    return settings.to_toml(topology)


def mirror_config(topology: Topology, mirror: MirrorSpec | str, index: int) -> MirrorConfig:
    """The settings of process ``index`` of ``mirror``: its sources and target
    as named clusters (name, ZooKeeper connect string with chroot), its
    group, filters, target partitions and metrics port, JSON logs, and the
    mirror's own ``settings`` on top."""
    spec = topology.mirror(mirror if isinstance(mirror, str) else mirror.name)
    if not 0 <= index < spec.processes:
        raise ConfigError(f"mirror {spec.name!r} has processes 0..{spec.processes - 1}, "
                          f"not {index}")
    values: dict[str, Any] = {
        "sources": [{"name": s, "zookeeper": topology.zookeeper_connect(s)}
                    for s in spec.sources],
        "target": {"name": spec.target, "zookeeper": topology.zookeeper_connect(spec.target)},
        "group": spec.mirror_group,
        "whitelist": spec.whitelist,
        "blacklist": spec.blacklist,
        "target_partitions": spec.target_partitions,
        "metrics_port": topology.mirror_metrics_ports(spec.name)[index],
        "metrics_host": topology.address_of(f"{spec.name}.mirror-{index}"),
        "log_format": "json",
    }
    settings.apply_overrides(values, spec.overrides())
    return settings.build(MirrorConfig, values)


def lag_config(topology: Topology, http_port: int) -> LagServiceConfig:
    """The settings of the lab's lag service: every cluster of the topology
    by name (ZooKeeper connect string with chroot), its HTTP port, JSON logs,
    and the monitoring's ``lag_settings`` on top."""
    values: dict[str, Any] = {
        "clusters": [{"name": c.name, "zookeeper": topology.zookeeper_connect(c.name)}
                     for c in topology.clusters()],
        "http_host": topology.host,
        "http_port": http_port,
        "log_format": "json",
    }
    settings.apply_overrides(values, topology.monitoring.lag_overrides())
    return settings.build(LagServiceConfig, values)


__all__ = ["ClusterSpec", "ConfigError", "LoadBalancerSpec", "MirrorSpec", "MonitoringSpec",
           "SecuritySpec", "Topology", "ZooKeeperSpec", "lag_config", "load_topology", "mirror_config",
           "to_toml"]
