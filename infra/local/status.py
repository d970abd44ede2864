"""What a local environment runs and how it is doing: ``python -m infra.local status``.

An environment is a state directory in one of two layouts, either runtime
(processes or containers) in each:

* a whole lab (``python -m infra.local up``): its ``lab.json`` and
  ``topology.toml`` at the top;
* Terraform's local environment (infra/terraform/environments/local): the
  rendered ``topology.toml`` at the top and each component in a
  subdirectory of its own: ``zookeeper/``, one per cluster (its brokers and
  HAProxy) and ``mirror/``, each a lab started with ``up --only`` (its
  ``lab.json`` there), and the services the lab does not run, ``audit/``
  (infra/local/daemon.py's ``daemon.json``) and ``airflow/``
  (infra/local/airflow_stack.py's ``airflow-state.json``).

``open_environment(dir)`` finds which (``Environment``), ``report(env)``
reads how it is doing as plain data (what ``status --json`` prints),
``render(report)`` writes that for people and ``healthy(report)`` is the
command's exit status.

Reads only: it never starts, stops or signals a process. Every ZooKeeper
client it opens is closed before ``report`` returns. Not thread-safe.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Iterable

from broker.lag.group_lag import AdminPool, partition_lags
from broker.coordination import offsets as zk_offsets
from broker.coordination.cluster import ClusterView
from broker.coordination.ownership import Subscription
from broker.coordination.zk import ZooKeeperUnavailable, make_client, start_client
from broker.harness.zookeeper import server_mode
from broker.service_kit.detached import DetachedProcess
from infra.local import airflow_stack, daemon, haproxy, prometheus
from infra.local.container_runtime import ContainerError, Docker, engine_host
from infra.local.lab import STATE_FILE, TOPOLOGY_FILE, Lab, LabError
from infra.local.lab_security import ADMIN, LabSecurity
from infra.local.metrics import scheme, scrape
from infra.topology import Topology, load_topology


@dataclass
class Service:
    """A service of the environment the lab does not run (the audit's
    daemon, Airflow), as its state file records it."""
    role: str                       # "service" (a daemon) or "airflow"
    state_dir: str
    processes: list[DetachedProcess]
    docker_host: str | None = None  # the engine of its containers, if it runs as such


@dataclass
class Environment:
    """The labs and services of one state directory, and the topology they run."""
    state_dir: str
    topology: Topology
    labs: list[Lab]
    services: list[Service] = field(default_factory=list)

    @classmethod
    def of_lab(cls, lab: Lab) -> "Environment":
        return cls(lab.state_dir, lab.topology, [lab])


def open_environment(state_dir: str) -> Environment:
    """The environment of ``state_dir`` (see the module's docstring); a
    directory that holds a lab's topology but nothing that runs is a lab
    that does not run. LabError when it holds neither."""
    state_dir = os.path.abspath(state_dir)
    parts = []
    if os.path.isdir(state_dir) and not os.path.exists(os.path.join(state_dir, STATE_FILE)):
        parts = sorted(os.path.join(state_dir, d) for d in os.listdir(state_dir)
                       if os.path.isdir(os.path.join(state_dir, d)))
    labs = [Lab.open(p) for p in parts if os.path.exists(os.path.join(p, STATE_FILE))]
    services = [s for s in (_service(p) for p in parts) if s is not None]
    if not labs and not services:
        return Environment.of_lab(Lab.open(state_dir))
    topology_file = os.path.join(state_dir, TOPOLOGY_FILE)
    if os.path.exists(topology_file):
        topology = load_topology(topology_file)
    elif labs:
        topology = labs[0].topology
    else:
        raise LabError(f"no topology in {state_dir} (no {TOPOLOGY_FILE}), only services")
    return Environment(state_dir, topology, labs, services)


#: The services of an environment the lab does not run: their module (its
#: ``read(state_dir)``) and the role status gives their processes.
SERVICES = ((daemon, "service"), (airflow_stack, "airflow"))


def _service(directory: str) -> Service | None:
    """The daemon or Airflow whose state file is in ``directory``, if any."""
    for module, role in SERVICES:
        try:
            state = module.read(directory)
        except (daemon.DaemonError, airflow_stack.AirflowStackError) as exc:
            raise LabError(str(exc)) from None
        if state is not None:
            fields, records = state
            return Service(role, directory, records, fields.get("docker_host"))
    return None


def container_states(docker_host: str | None, names: list[str]) -> dict[str, str]:
    """The engine's state of each container of ``names`` ("running
    (healthy)", "exited", "missing", ...; see Docker.states), on
    ``docker_host`` (None: the user's or the project's engine)."""
    if not names:
        return {}
    try:
        return Docker(docker_host or engine_host()).states(names)
    except ContainerError as exc:         # no docker client, no engine to be had
        return {name: f"unknown: {exc}" for name in names}


def _processes(records: Iterable[tuple[DetachedProcess, bool, dict[str, Any]]],
               docker_host: str | None) -> list[dict[str, Any]]:
    """The ``processes`` entries of ``records``: (record, alive, what the
    report adds: role, cluster, ports)."""
    records = list(records)
    states = container_states(docker_host, [r.container for r, _, _ in records if r.container])
    out = []
    for record, alive, extra in records:
        process = {"name": record.name, "role": extra["role"], "cluster": extra.get("cluster"),
                   "pid": record.pid, "alive": alive, "ports": extra.get("ports", {}),
                   "log": record.log, "container": record.container}
        if record.container:
            process["client_alive"] = alive
            process["container_state"] = states.get(record.container, "missing")
            process["alive"] = process["container_state"].startswith("running")
        out.append(process)
    return out


def report(env: Environment, zookeeper_timeout: float = 3.0) -> dict[str, Any]:
    """What runs and how it is doing, as plain data (``--json`` prints it):

    * ``runtime``: processes or containers (each runtime its components
      run in, comma-separated, when they differ);
    * ``processes``: name, role, cluster, pid, alive, ports, log, container
      (its name in the containers runtime, else None) of every lab's and
      service's process; in containers also container_state (the engine's:
      "running (healthy)", "exited", "missing", ...) and client_alive (its
      docker client's process): alive is the container running, which
      outlives a SIGKILLed client;
    * ``running``: whether there are processes and every one is alive;
    * ``zookeeper``: connect string and each member's mode;
    * ``security``: None for an open lab, else where its secrets are
      (``directory``) and the admin's client settings (``admin_client_config``);
    * ``clusters``: per cluster, the brokers registered in ZooKeeper
      (id -> address: the TLS listener's in a secured lab) against those expected, the topics (partition
      count), and the load balancer's address and each backend broker's
      state (UP/DOWN, last check, connections), read from the stats socket
      of the lab that runs it;
    * ``mirrors``: per mirror, its processes and, per source, the lag in
      bytes of its group's committed offsets behind the source brokers'
      latest offsets (works while the mirror is down), and the lag its
      running processes report on /metrics;
    * ``lag_service``: the URL of the lab's lag service (None without one);
    * ``schema_registries``: per cluster, the URL of its schema registry's
      REST API (Confluent's; empty when the lab serves none);
    * ``prometheus``: None when the lab runs no Prometheus, else its URL,
      its scrape targets (how many, how many up, which are down) and the
      alerts pending or firing (name, state, labels), as its API tells
      them (infra/local/prometheus.py's summary; ``error`` when it does not
      answer);
    * ``airflow`` (netns runtime, when Lab.start_airflow started one): the
      URL of its UI in the ``airflow`` host.
    """
    t = env.topology
    runtimes = sorted({lab.runtime for lab in env.labs}) or ["processes"]
    out: dict[str, Any] = {"lab": t.name, "state_dir": env.state_dir,
                           "runtime": ", ".join(runtimes), "processes": [], "clusters": [],
                           "mirrors": []}
    records: dict[str, Any] = {}
    haproxy_dirs: dict[str, str] = {}
    security = None
    if t.security.enabled:      # the secrets of the environment's labs (one directory)
        security = next((lab.security for lab in env.labs if lab.security is not None),
                        LabSecurity(os.path.join(env.state_dir, "security")))
    out["security"] = None if security is None else {
        "directory": security.directory, "admin_client_config": security.client_config(ADMIN),
        "ca_file": security.ca_file}
    for lab in env.labs:
        out["processes"] += _processes(
            ((r, lab.alive(name), {"role": r.role, "cluster": r.cluster, "ports": r.ports})
             for name, r in lab.records.items()), lab.docker_host)
        records.update(lab.records)
        haproxy_dirs.update({r.cluster: lab.path("haproxy", r.cluster)
                             for r in lab.records.values() if r.role == "haproxy"})
    out["lag_service"] = None
    out["prometheus"] = None
    out["schema_registries"] = {}
    for lab in env.labs:
        out["schema_registries"].update({
            r.cluster: f"{lab.schema_registry_url(r.cluster)}/" for r in lab.records.values()
            if r.role == "schema-registry"})
        if "lag" in lab.records:
            out["lag_service"] = (f"{scheme(lab.http_access)}://"
                                  f"{lab.topology.address_of('lag')}:"
                                  f"{lab.records['lag'].ports['http']}/")
        if lab.runtime == "netns" and lab.airflow_url():
            out["airflow"] = lab.airflow_url() + "/"
        if lab.prometheus_url():
            out["prometheus"] = prometheus.summary(lab.prometheus_url(), lab.http_access)
    for service in env.services:
        out["processes"] += _processes(((r, r.alive(), {"role": service.role})
                                        for r in service.processes), service.docker_host)
    alive = {p["name"]: p["alive"] for p in out["processes"]}
    out["running"] = bool(out["processes"]) and all(alive.values())
    # one ensemble for every cluster; one per datacenter in the network lab
    ensembles = [c.name for c in t.clusters()] if t.network.namespaces else [None]
    probe_tls = None if security is None else security.zookeeper_probe_context()
    out["zookeeper"] = {"connect": "; ".join(t.zookeeper_connect(e) for e in ensembles),
                        "servers": [{"address": f"{address}:{port}",
                                     "mode": server_mode(address, port, tls=probe_tls)}
                                    for e in ensembles
                                    for _host, address, port in t.zookeeper_members(e)]}
    reachable = any(s["mode"] for s in out["zookeeper"]["servers"])
    views: dict[str, tuple[Any, ClusterView]] = {}
    try:
        for cluster in t.clusters():
            entry: dict[str, Any] = {
                "name": cluster.name, "kind": t.kind(cluster.name),
                "zookeeper": t.zookeeper_connect(cluster.name),
                "brokers_expected": cluster.brokers, "brokers": {}, "topics": {},
                "load_balancer": None}
            if reachable:
                try:
                    client = make_client(entry["zookeeper"], tls=None if security is None
                                         else security.zookeeper_tls())
                    start_client(client, entry["zookeeper"], timeout=zookeeper_timeout,
                                 what="lab status")
                    view = ClusterView(client, tls=security is not None)
                    views[cluster.name] = (client, view)
                    entry["brokers"] = {str(b): f"{h}:{p}"
                                        for b, (h, p) in sorted(view.brokers().items())}
                    entry["topics"] = {topic: len(view.partitions(topic))
                                       for topic in view.topics()}
                except ZooKeeperUnavailable as exc:
                    entry["error"] = str(exc)
            else:
                entry["error"] = f"ZooKeeper at {entry['zookeeper']} does not answer"
            if cluster.load_balancer is not None:
                entry["load_balancer"] = _load_balancer(
                    t, cluster.name,
                    haproxy_dirs.get(cluster.name,
                                     os.path.join(env.state_dir, "haproxy", cluster.name)),
                    secured=security is not None)
            out["clusters"].append(entry)
        for mirror in t.mirrors:
            out["mirrors"].append(_mirror_status(t, mirror, records, views, alive, security))
    finally:
        for client, _view in views.values():
            client.stop()
            client.close()
    return out


def _load_balancer(t: Topology, cluster: str, directory: str, secured: bool = False
                   ) -> dict[str, Any]:
    """The load balancer of ``cluster``: its address, stats URL (HTTPS in a
    secured lab) and backends as its HAProxy's stats socket (in
    ``directory``) tells them."""
    host = t.address_of(f"{cluster}.haproxy")
    lb: dict[str, Any] = {"address": f"{host}:{t.lb_port(cluster)}"}
    stats_port = t.lb_stats_port(cluster)
    if stats_port is not None:
        lb["stats_url"] = f"{'https' if secured else 'http'}://{host}:{stats_port}/"
    try:
        lb["backends"] = haproxy.backend_servers(directory, cluster)
    except OSError as exc:
        lb["error"] = f"HAProxy's stats socket does not answer: {exc}"
    return lb


def _mirror_status(t: Topology, mirror, records: dict[str, Any], views,
                   alive_now: dict[str, bool], security: LabSecurity | None = None
                   ) -> dict[str, Any]:
    """``records``: every lab's processes by name; ``alive_now``: each
    process's liveness as report() found it (a container that outlived its
    client is alive, and scraped); ``security``: a secured lab's (the
    brokers are asked as its admin)."""
    entry: dict[str, Any] = {"name": mirror.name, "group": mirror.mirror_group,
                             "sources": list(mirror.sources), "target": mirror.target,
                             "processes": [], "lag": {}, "metrics_lag_bytes": None}
    scraped: dict[str, float] = {}
    any_scraped = False
    for i in range(mirror.processes):
        name = f"{mirror.name}.mirror-{i}"
        started = name in records
        alive = started and alive_now.get(name, False)
        port = t.mirror_metrics_ports(mirror.name)[i]
        proc: dict[str, Any] = {"name": name, "started": started, "alive": alive,
                                "metrics_port": port, "metrics": False}
        if alive and port != -1:
            samples = scrape(t.address_of(name), port,
                             access=None if security is None else security.http_access())
            if samples is not None:
                proc["metrics"] = True
                any_scraped = True
                for (sample, labels), value in samples.items():
                    if sample == "samsa_mirror_lag_bytes":
                        source = dict(labels).get("source", "?")
                        scraped[source] = scraped.get(source, 0.0) + value
        entry["processes"].append(proc)
    if any_scraped:
        entry["metrics_lag_bytes"] = scraped
    subscription = Subscription(whitelist=mirror.whitelist, blacklist=mirror.blacklist or None)
    for source in mirror.sources:
        if source not in views:
            entry["lag"][source] = {"error": "its ZooKeeper is unreachable"}
            continue
        client, view = views[source]
        entry["lag"][source] = group_lag(client, view, mirror.mirror_group, subscription,
                                         {} if security is None
                                         else security.admin_options(ADMIN))
    return entry


def group_lag(client, view: ClusterView, group: str, subscription: Subscription,
              admin_options: dict | None = None) -> dict[str, Any]:
    """How far ``group`` is behind in the cluster of ``view``: over every
    partition of the topics it subscribes to, the bytes between its committed
    offset (the partition's earliest offset when it has committed none) and
    the partition's latest offset (broker/lag/group_lag.py). Partitions
    whose broker does not answer are counted in ``errors``. ``admin_options``:
    the ``tls`` and ``sasl`` of brokers that ask for them."""
    committed = zk_offsets.read_offsets(client, group)
    wanted = [(topic, bp) for topic in view.topics() if subscription.matches(topic)
              for bp in view.partitions(topic)]
    with AdminPool("samsa-lab", **(admin_options or {})) as pool:
        rows = partition_lags(view, wanted, committed, pool)
    good = [r for r in rows if r.error is None]
    return {"lag_bytes": sum(r.lag for r in good), "partitions": len(good),
            "uncommitted": sum(r.uncommitted for r in good), "errors": len(rows) - len(good)}


def healthy(status: dict[str, Any]) -> bool:
    """Whether every process runs and every broker is registered (the exit
    status of ``status``)."""
    return status["running"] and all(
        len(c["brokers"]) == c["brokers_expected"] for c in status["clusters"])


def render(status: dict[str, Any]) -> str:
    """The status (report()) for people."""
    out = [f"lab {status['lab']} in {status['state_dir']}: "
           f"{'running' if status['running'] else 'NOT (fully) running'}"
           f" (as {status.get('runtime', 'processes')})", "", "processes:"]
    for p in status["processes"]:
        ports = ", ".join(f"{k} {v}" for k, v in p["ports"].items())
        container = ""
        if p.get("container"):
            container = f"  container {p['container']} {p.get('container_state', '')}".rstrip()
            if p["alive"] and not p.get("client_alive", True):
                container += " (its docker client is gone: `down` removes it)"
        out.append(f"  {'up  ' if p['alive'] else 'DOWN'}  {p['name']:<26} pid {p['pid']:<8} "
                   f"{ports}{container}")
    if not status["processes"]:
        out.append("  (none)")
    if status.get("security"):
        out += ["", f"secured: TLS listeners asking for SCRAM-SHA-512, ACLs, ZooKeeper over "
                    f"TLS with identities; secrets in {status['security']['directory']} (the tools: "
                    f"--client-config {status['security']['admin_client_config']}; with "
                    f"--zookeeper, --zookeeper-tls-ca-file {status['security']['ca_file']})"]
    zk = status["zookeeper"]
    out += ["", f"zookeeper {zk['connect']}: " + ", ".join(
        f"{s['address']} {s['mode'] or 'DOWN'}" for s in zk["servers"])]
    for c in status["clusters"]:
        out += ["", f"cluster {c['name']} ({c['kind']}, {c['zookeeper']}):"]
        if "error" in c:
            out.append(f"  error: {c['error']}")
        registered = ", ".join(f"{b}={a}" for b, a in c["brokers"].items()) or "none"
        out.append(f"  brokers registered {len(c['brokers'])}/{c['brokers_expected']}: "
                   f"{registered}")
        topics = ", ".join(f"{t} ({n} partitions)" for t, n in c["topics"].items())
        out.append(f"  topics: {topics or 'none'}")
        lb = c["load_balancer"]
        if lb:
            line = f"  load balancer {lb['address']}"
            if lb.get("stats_url"):
                line += f" (stats {lb['stats_url']})"
            out.append(line + ":")
            if "error" in lb:
                out.append(f"    error: {lb['error']}")
            for s in lb.get("backends", []):
                out.append(f"    {s['server']:<10} {s['address']:<21} {s['status']:<8} "
                           f"check {s['check'] or '-':<8} connections {s['sessions']}")
    for m in status["mirrors"]:
        out += ["", f"mirror {m['name']} ({', '.join(m['sources'])} -> {m['target']}, "
                    f"group {m['group']}):"]
        for p in m["processes"]:
            if not p["started"]:
                out.append(f"  -     {p['name']:<26} not started")
                continue
            metrics = ("metrics answering" if p["metrics"] else
                       "metrics off" if p["metrics_port"] == -1 else "metrics NOT answering")
            out.append(f"  {'up  ' if p['alive'] else 'DOWN'}  {p['name']:<26} {metrics}")
        for source, lag in m["lag"].items():
            if "error" in lag:
                out.append(f"  lag from {source}: unknown ({lag['error']})")
                continue
            line = (f"  lag from {source}: {lag['lag_bytes']} bytes over {lag['partitions']} "
                    f"partitions (committed offsets)")
            if lag["uncommitted"]:
                line += f", {lag['uncommitted']} without a committed offset"
            if lag["errors"]:
                line += f", {lag['errors']} unreadable"
            if m["metrics_lag_bytes"] is not None:
                line += f"; /metrics says {m['metrics_lag_bytes'].get(source, 0):.0f}"
            out.append(line)
    if status.get("schema_registries"):
        out += [""] + [f"schema registry of {cluster} {url} (Confluent's REST API: subjects "
                       f"<topic>-value)" for cluster, url in status["schema_registries"].items()]
    if status.get("lag_service"):
        out += ["", f"lag service {status['lag_service']} (Burrow's status per group: "
                    f"v3/kafka/CLUSTER/consumer)"]
    out += _render_prometheus(status.get("prometheus"))
    return "\n".join(out)


def _render_prometheus(p: dict[str, Any] | None) -> list[str]:
    if p is None:
        return []
    out = ["", f"prometheus {p['url']}/ (alerts: {p['url']}/alerts):"]
    if "error" in p:
        return out + [f"  error: {p['error']}"]
    line = f"  targets up {p['targets_up']}/{p['targets']}"
    if p["targets_down"]:
        line += "; down: " + ", ".join(p["targets_down"])
    out.append(line)
    if not p["alerts"]:
        out.append("  alerts: none pending or firing")
    for a in p["alerts"]:
        labels = ", ".join(f"{k}={v}" for k, v in sorted(a["labels"].items())
                           if k not in ("severity", "lab"))
        out.append(f"  {a['state'].upper()} {a['name']} ({labels})")
    return out


__all__ = ["Environment", "Service", "group_lag", "healthy", "open_environment", "render",
           "report"]
