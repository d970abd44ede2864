"""The pipeline as containers: a topology (infra/topology.py) run from the
images of infra/docker/ — a ZooKeeper ensemble, each cluster's brokers,
each datacenter's HAProxy, the mirrors, and the audit (a PostgreSQL, the
audit service, a counter per cluster) — every container with host
networking, on the topology's ports, each waited on until it serves:

* ZooKeeper: ``ruok`` answers ``imok`` and ``srvr`` says leader, follower
  or standalone (a member of a quorum);
* a broker: it answers Metadata;
* HAProxy: a broker answers Metadata through it;
* a mirror or a counter: its /metrics answers; the audit service: /healthz;
* PostgreSQL: ``pg_isready`` in its container.

How a container is started is given, not chosen here: ``run(name, image,
command=..., env=..., files=..., ready=..., timeout=..., working_dir=...)``
returns a started service (``wait_ready``, ``kill``, ``start``, ``logs``);
the tests pass one built on testcontainers (tests/containers), the
benchmark the same. So this module only knows what runs where.
"""
from __future__ import annotations

import http.client
import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from broker.harness.zookeeper import server_mode
from broker.service_kit.ports import free_ports
from infra.docker.images import latest
from infra.topology import Topology, mirror_config

ZOOKEEPER, HAPROXY, POSTGRES, SAMSA, ANALYSIS = (
    latest(n) for n in ("zookeeper", "haproxy", "postgres", "samsa", "analysis"))
CONF = "/etc/samsa"


# ------------------------------------------------------------------ readiness

def zookeeper_serving(port: int, host: str = "127.0.0.1") -> bool:
    """``imok``, and a member of a quorum (or standalone): it serves clients."""
    return server_mode(host, port) is not None


def http_ok(port: int, path: str = "/", timeout: float = 1.0, host: str = "127.0.0.1") -> bool:
    try:
        conn = http.client.HTTPConnection(host, port, timeout=timeout)
        try:
            conn.request("GET", path)
            return conn.getresponse().status == 200
        finally:
            conn.close()
    except OSError:
        return False


def metadata_answers(address: str, timeout: float = 2.0) -> bool:
    """Does a broker (or a load balancer in front of one) answer Metadata?"""
    from broker.client.admin import AdminClient
    try:
        with AdminClient(address, request_timeout=timeout) as admin:
            admin.metadata()
        return True
    except Exception:                      # noqa: BLE001 - any failure: not yet
        return False


# ------------------------------------------------------------------ the pipeline

@dataclass
class AuditPorts:
    postgres: int
    http: int
    counter_metrics: dict[str, int] = field(default_factory=dict)


class ContainerPipeline:
    """``topology`` in containers started with ``run``; config files are
    written under ``directory`` (mounted read-only into the containers)."""

    def __init__(self, run: Callable[..., Any], topology: Topology, directory: str) -> None:
        self.run = run
        self.topology = topology
        self.directory = os.path.abspath(directory)
        os.makedirs(self.directory, exist_ok=True)
        self.zookeepers: list[Any] = []
        self.brokers: dict[tuple[str, int], Any] = {}
        self.load_balancers: dict[str, Any] = {}
        self.mirrors: list[Any] = []
        self.audit: dict[str, Any] = {}
        self.audit_ports: AuditPorts | None = None
        self.seconds: dict[str, float] = {}

    # ---------------------------------------------------------------- addresses

    def zookeeper_connect(self, cluster: str | None = None) -> str:
        return self.topology.zookeeper_connect(cluster)

    def broker_address(self, cluster: str, index: int) -> str:
        return f"{self.topology.host}:{self.topology.broker_ports(cluster)[index]}"

    def lb_address(self, cluster: str) -> str:
        return f"{self.topology.host}:{self.topology.lb_port(cluster)}"

    @property
    def audit_url(self) -> str:
        assert self.audit_ports is not None, "the audit is not started"
        return f"http://{self.topology.host}:{self.audit_ports.http}"

    @property
    def postgres_url(self) -> str:
        assert self.audit_ports is not None, "the audit is not started"
        return (f"postgresql+psycopg://samsa@{self.topology.host}:{self.audit_ports.postgres}"
                f"/samsa_audit")

    def _file(self, name: str, text: str) -> str:
        path = os.path.join(self.directory, name)
        with open(path, "w") as f:
            f.write(text)
        os.chmod(path, 0o644)              # the containers' users read it
        return path

    def _timed(self, what: str, started: float) -> None:
        self.seconds[what] = time.monotonic() - started

    # ---------------------------------------------------------------- up

    def up(self, timeout: float = 60.0, audit: bool = False) -> "ContainerPipeline":
        """Everything of the topology (and with ``audit`` the audit), in
        order, each step waited on; the time of each step in ``seconds``."""
        started = time.monotonic()
        self.start_zookeeper(timeout)
        for cluster in self.topology.clusters():
            self.start_cluster(cluster.name, timeout)
        for cluster in self.topology.clusters():
            if cluster.load_balancer is not None:
                self.start_load_balancer(cluster.name, timeout)
        if audit:
            self.prepare_topics()
            self.start_audit(timeout)
        for mirror in self.topology.mirrors:
            self.start_mirror(mirror.name, timeout)
        self._timed("total", started)
        return self

    def prepare_topics(self) -> None:
        """The schemas and the audited traffic's topics in every cluster,
        before the mirror and the counters start (infra/local/traffic.py)."""
        from infra.local.traffic import prepare_clusters
        started = time.monotonic()
        prepare_clusters({self.zookeeper_connect(c.name): c.topic_partitions()
                          for c in self.topology.clusters()})
        self._timed("topics", started)

    def start_zookeeper(self, timeout: float = 60.0) -> None:
        t, started = self.topology, time.monotonic()
        clients, peers = t.zookeeper_client_ports(), t.zookeeper_peer_ports()
        servers = ",".join(f"{i + 1}={t.host}:{q}:{e}" for i, (q, e) in enumerate(peers))
        pending = []
        for i, port in enumerate(clients):
            pending.append(self.run(
                f"zookeeper-{i + 1}", ZOOKEEPER,
                env={"ZOO_PORT": str(port), "ZOO_MY_ID": str(i + 1), "ZOO_SERVERS": servers},
                ready=lambda s, port=port: zookeeper_serving(port, t.host), wait=False))
        for service in pending:            # a quorum needs the others started
            service.wait_ready(timeout)
        self.zookeepers = pending
        from kazoo.client import KazooClient
        zk = KazooClient(hosts=t.zookeeper_connect(), timeout=10)
        zk.start(timeout=timeout)
        try:
            for cluster in t.clusters():
                zk.ensure_path(cluster.zk_chroot)
        finally:
            zk.stop()
            zk.close()
        self._timed("zookeeper", started)

    def broker_command(self, cluster: str, index: int) -> list[str]:
        t = self.topology
        command = ["broker", "--broker-id", str(index), "--host", t.host,
                   "--port", str(t.broker_ports(cluster)[index]), "--data-dir", "/data",
                   "--metrics-port", str(t.broker_metrics_ports(cluster)[index]),
                   "--log-format", "json", "--set", f"zookeeper={t.zookeeper_connect(cluster)}"]
        for key, value in t.cluster(cluster).broker_overrides().items():
            command += ["--set", f"{key}={value}"]
        return command

    def start_cluster(self, cluster: str, timeout: float = 60.0) -> None:
        t, started = self.topology, time.monotonic()
        pending = [((cluster, i), self._run_broker(cluster, i))
                   for i in range(t.cluster(cluster).brokers)]
        for key, service in pending:
            self.brokers[key] = service.wait_ready(timeout)
        self._timed(f"cluster {cluster}", started)

    def _run_broker(self, cluster: str, index: int):
        """Broker ``index``'s container started (its /data an anonymous volume
        of its own), not waited on."""
        address = self.broker_address(cluster, index)
        return self.run(
            f"{cluster}-broker-{index}", SAMSA,
            command=self.broker_command(cluster, index),
            env={"SAMSA_HEALTH_PORT": str(self.topology.broker_metrics_ports(cluster)[index])},
            ready=lambda s: metadata_answers(address), wait=False)

    def replace_broker(self, cluster: str, index: int, timeout: float = 60.0) -> None:
        """A lost machine and its disk, as a cloud replaces them: broker
        ``index``'s container killed and removed with its data volume, and a
        new one started with the same id, command and ports on an empty
        volume. On a replicated cluster it copies its replicas back from
        their leaders; on an unreplicated one what it held is gone."""
        old = self.brokers.pop((cluster, index))
        old.kill()
        old.container.stop(force=True, delete_volume=True)     # removed, volume too
        self.brokers[(cluster, index)] = self._run_broker(cluster, index).wait_ready(timeout)

    def start_load_balancer(self, cluster: str, timeout: float = 60.0) -> None:
        from infra.local import haproxy
        started = time.monotonic()
        config = self._file(f"haproxy-{cluster}.cfg", haproxy.render(self.topology, cluster))
        address = self.lb_address(cluster)
        # the stats socket is relative to the working directory: /tmp is the
        # container's own and writable by its user
        self.load_balancers[cluster] = self.run(
            f"{cluster}-haproxy", HAPROXY, files={"/etc/haproxy/haproxy.cfg": config},
            working_dir="/tmp",
            ready=lambda s: metadata_answers(address), timeout=timeout)
        self._timed(f"load balancer {cluster}", started)

    def start_mirror(self, mirror: str, timeout: float = 60.0) -> None:
        from broker.service_kit import settings
        started = time.monotonic()
        spec = self.topology.mirror(mirror)
        for i in range(spec.processes):
            config = mirror_config(self.topology, spec, i)
            path = self._file(f"mirror-{mirror}-{i}.toml", settings.to_toml(config))
            port = config.metrics_port
            self.mirrors.append(self.run(
                f"mirror-{mirror}-{i}", SAMSA, command=["mirror", "--config", f"{CONF}/mirror.toml"],
                files={f"{CONF}/mirror.toml": path},
                env={"SAMSA_HEALTH_PORT": str(port)},
                ready=lambda s, port=port: port <= 0 or http_ok(port, "/metrics"),
                timeout=timeout))
        self._timed(f"mirror {mirror}", started)

    def start_audit(self, timeout: float = 60.0, ports: AuditPorts | None = None,
                    counter_settings: tuple[str, ...] = ("publish_interval_ms=1000",)) -> None:
        """PostgreSQL, the audit service on the last cluster (the analysis
        one) and a counter in every cluster."""
        t, started = self.topology, time.monotonic()
        clusters = [c.name for c in t.clusters()]
        if ports is None:
            numbers = free_ports(2 + len(clusters))
            ports = AuditPorts(numbers[0], numbers[1], dict(zip(clusters, numbers[2:])))
        self.audit_ports = ports
        pg_port = str(ports.postgres)
        self.audit["postgres"] = self.run(
            "postgres", POSTGRES, env={"PGPORT": pg_port},
            ready=lambda s: s.exec(["pg_isready", "-h", t.host, "-p", pg_port, "-q"])[0] == 0,
            timeout=timeout)
        analysis = clusters[-1]
        self.audit["service"] = self.run(
            "audit-service", SAMSA,
            command=["audit", "serve", "--zookeeper", t.zookeeper_connect(analysis),
                     "--db", self.postgres_url, "--http-port", str(ports.http),
                     "--set", "data_dir=/data"],
            env={"SAMSA_HEALTH_PORT": str(ports.http), "SAMSA_HEALTH_PATH": "healthz"},
            ready=lambda s: http_ok(ports.http, "/healthz"), timeout=timeout)
        for cluster in clusters:
            port = ports.counter_metrics[cluster]
            command = ["audit", "count", "--cluster", f"{cluster}={t.zookeeper_connect(cluster)}",
                       "--metrics-port", str(port), "--set", f"group=audit-{cluster}"]
            for setting in counter_settings:
                command += ["--set", setting]
            self.audit[f"count-{cluster}"] = self.run(
                f"audit-count-{cluster}", SAMSA, command=command,
                env={"SAMSA_HEALTH_PORT": str(port)},
                ready=lambda s, port=port: http_ok(port, "/metrics"), timeout=timeout)
        self._timed("audit", started)
