"""The local multi-datacenter lab: a whole topology as processes on this machine.

It runs either as processes of this checkout (``runtime="processes"``, the
default) or as containers of the project's images (``runtime="containers"``:
each process is an attached ``docker run`` of samsa/zookeeper, samsa/samsa
or samsa/haproxy with host networking; see infra/local/container_runtime.py).
The steps, readiness checks, state file and commands are the same for both.

``Lab(topology, state_dir).up()`` starts, in this order, waiting for each
step to be ready before the next:

1. the ZooKeeper ensemble (ready: every member answers ``ruok`` and serves),
   then every cluster's chroot;
2. every broker of every cluster, at once (ready: registered in its
   cluster's ``/brokers/ids/<id>`` by a new session, with its address);
3. each load balancer's HAProxy, after ``haproxy -c`` accepted its config
   (ready: its stats socket answers and every broker is UP in its backend);
4. every mirror process (ready: its /metrics answers);
5. with ``monitoring=True`` (``python -m infra.local up`` asks for it), the
   lag service over every cluster (ready: its /healthz answers after a first
   evaluation), then Prometheus scraping every process of the lab (ready:
   its /-/ready answers and it lists every target), after ``promtool check
   config`` accepted its configuration (infra/local/prometheus.py).
   ``start_monitoring`` starts them alone, with scrape jobs of services the
   lab does not run (the demo's audit).

Each process runs in a session (and process group) of its own with its
output appended to ``logs/<name>.log``, so it outlives the command that
started it; the state file records it. When a step fails, what was started
is taken down and the error names the process, why, and the tail of its log.

``down()`` stops Prometheus, the lag service and mirrors first, then load
balancers and brokers (SIGTERM: a broker deregisters, flushes and
checkpoints), then ZooKeeper, each group
SIGKILLed after a timeout; it checks that no process of any group is left
and removes the state file, keeping logs and data unless purged.

States of a state directory::

    empty --up--> starting --all ready--> running --down--> stopped (logs, data kept)
                     |                       |
                     +--a step failed--------+--> (taken down) --> stopped
    running --a process died--> degraded (status shows it; down still cleans up)

A pid in the state file is trusted only together with the process start
time recorded beside it (``/proc/<pid>/stat``), so a later process that got
the same pid is never signalled (broker/service_kit/detached.py keeps the
records, the state file and the stop). ``status`` is infra/local/status.py.

State directory::

    lab.json                  the runtime, and the processes: name, role, pid, ports,
                              command, log (and container, in the containers runtime)
    topology.toml             the topology the lab runs (status and down read it)
    logs/<name>.log           every process's output (zookeeper-<id>.log links to
                              zookeeper/zk-<id>/server.log)
    zookeeper/zk-<id>/        a member's zoo.cfg and data
    data/<cluster>/broker-<i> a broker's data (unless the cluster sets data_dir)
    haproxy/<cluster>/        haproxy.cfg and its stats socket
    mirror/<name>-<i>.toml    a mirror process's settings
    lag/lag.toml              the lag service's settings
    prometheus/prometheus.yml Prometheus's configuration; prometheus/data its TSDB
    security/                 the secured lab's secrets (infra/local/lab_security.py)
    security-mode             "secured" or "open": how it last ran (up will not switch
                              over kept ZooKeeper data)

A topology with ``[security] enabled`` runs secured (docs/security.md, "The
secured lab"): before ZooKeeper its secrets are made (once), once ZooKeeper
serves every cluster's users and ACLs are written as the cluster's ZooKeeper
identity, each broker serves its TLS listener (asking for SCRAM) at the
layout's broker port and registers it in ``/brokers/tls`` (ready: that
registration), the mirrors and the lag service get their users, the schema
registries their identity (the shipped schemas are registered with it).
Every runtime (the containers mount the state directory, secrets included);
not with ``only`` unless ``security_dir`` names the secrets of the lab the
component joins; the audit and Airflow that ``start_audit`` and
``start_airflow`` add run with the ``audit`` and ``loader`` users and
identities, the audit service on HTTPS. Every HTTP port of the lab serves
HTTPS with its host's certificate to the lab's HTTP users (Prometheus
scrapes as ``prometheus``; the lab's checks ask as ``admin``).

In the containers runtime, ZooKeeper's output goes to ``logs/zookeeper-<id>.log``
itself (its ``zoo.cfg`` is written by the image into ``zookeeper/zk-<id>/conf``);
a process of the state file is the docker client, and ``down`` also removes
every container labelled with the state directory (a docker client killed
with SIGKILL leaves its container running). The monitoring runs in the
processes and netns runtimes (``up`` leaves it out, with a warning, in
containers); in the netns runtime each service is in a host of its own
(docs/network-lab.md), Airflow too (``start_airflow``: ``airflow/``, its
state, logs and SQLite database, and ``warehouse/``, the loader's output).

Linux only (it reads /proc). Not thread-safe: drive a Lab from one thread.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import dataclasses
import logging
import os
import shutil
import signal
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from kazoo.exceptions import NoNodeError
from kazoo.security import make_acl

from broker.coordination import paths
from broker.coordination.zk import ZooKeeperUnavailable, make_client, start_client
from broker.coordination.zk_tls import ZooKeeperTls
from broker.coordination.zk_acls import Identity
from broker.harness.zookeeper import SERVING_MODES, ZooKeeperEnsemble, ZooKeeperError, server_mode
from broker.service_kit import detached, settings
from broker.service_kit.detached import DetachedProcess
from broker.service_kit.ports import NoFreePorts, busy_among, free_base_port, free_ports
from broker.service_kit.process import SupervisedProcess, tail, wait_until
from infra.local import airflow_stack, daemon, haproxy, prometheus
from infra.local.container_runtime import (HAPROXY_CONFIG, IMAGES, RUNTIMES, ContainerError,
                                           Docker, Mount, container_name, engine_host)
from infra.local.lab_security import (AUDIT, HTTP_READER, LAG, MIRROR, ZK_AUDIT, ZK_CLUSTER,
                                      ZK_MIRROR, ZK_REGISTRY, LabSecurity)
from infra.local.metrics import HttpAccess, scheme, scrape
from infra.local.network import control as network_control
from infra.local.network import runner as network_runner
from infra.local.network.control import NetworkLabError
from infra.topology import Topology, lag_config, load_topology, mirror_config, to_toml

#: the lab the README and `make lab-up` bring up (two DCs and the analysis cluster)
DEFAULT_TOPOLOGY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "topology.toml")
log = logging.getLogger(__name__)

STATE_FILE = "lab.json"
TOPOLOGY_FILE = "topology.toml"
#: whether the lab last ran secured or open (its ZooKeeper data follows it)
SECURITY_MODE_FILE = "security-mode"
#: Roles, in the order ``down`` stops them (each group at once).
STOP_ORDER = (("prometheus", "lag", "mirror", "schema-registry", "audit"), ("haproxy", "broker"),
              ("zookeeper",), ("network",))
#: The repository root: the children import the same code as the lab.
SOURCE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class LabError(RuntimeError):
    """The lab could not do what was asked; the message says why and what to do."""


@dataclass(kw_only=True)
class ProcessRecord(DetachedProcess):
    """One process of the lab, as the state file keeps it."""
    role: str           # "zookeeper", "broker", "haproxy", "mirror", "audit", "lag", "prometheus"
    ports: dict[str, int] = field(default_factory=dict)
    cluster: str | None = None
    index: int | None = None
    cwd: str | None = None
    host: str | None = None     # its network namespace's host, in the netns runtime


#: the audit service's HTTP port on the ``audit`` host (netns runtime: start_audit)
AUDIT_PORT = 8090
#: Airflow's UI and REST API on the ``airflow`` host (netns runtime: start_airflow)
AIRFLOW_PORT = 8080
#: in the netns runtime, where each service listens on its host's address:
#: a cluster's schema registry on ``<cluster>.registry`` (Confluent's port),
#: the lag service on ``lag`` (Burrow's), Prometheus on ``prometheus``
REGISTRY_PORT = 8081
LAG_PORT = 8000
PROMETHEUS_PORT = 9090
#: where the lab's processes run: this checkout's processes, the project's
#: images as containers, or processes each in a network namespace of its host
LAB_RUNTIMES = (*RUNTIMES, "netns")


# ------------------------------------------------------------------ ports

def free_topology(topology: Topology, attempts: int = 200) -> Topology:
    """``topology`` moved to a ``base_port`` where every one of its ports is free
    now (for tests and benchmarks that must not collide with anything), chosen
    at random outside the ephemeral range, which outgoing connections use
    (below it, else above it: broker/service_kit/ports.py)."""
    def ports_at(base: int) -> list[tuple[int, str]]:
        return dataclasses.replace(topology, base_port=base).ports()

    try:
        base = free_base_port(ports_at, topology.host, attempts)
    except NoFreePorts as exc:
        raise LabError(str(exc)) from None
    return dataclasses.replace(topology, base_port=base)


def busy_ports(topology: Topology) -> list[tuple[int, str]]:
    """The ports of ``topology`` something else listens on now."""
    return busy_among(topology.ports(), topology.host)


def _belongs(what: str, component: tuple[str, str]) -> bool:
    """Whether a port's label (Topology.ports) is ``component``'s."""
    kind, name = component
    if kind == "zookeeper":
        return what.startswith("ZooKeeper ")
    if kind == "cluster":
        return what.startswith(f"{name} ")
    return what.startswith(f"mirror {name} ")


# ------------------------------------------------------------------ the lab

class Lab:
    """A topology run as local processes, its state in ``state_dir``.

    ``Lab(topology, dir)`` for a new lab; ``Lab.open(dir)`` for the one
    running there (with the topology it was started with). Addresses for
    clients: ``lb_address(cluster)``, ``broker_address(cluster, i)``,
    ``zookeeper_connect(cluster)``. Fault injection: ``kill_broker``,
    ``restart_broker``. A context manager: ``with Lab(t, d) as lab`` brings it
    up and takes it down.
    """

    def __init__(self, topology: Topology, state_dir: str, *, python: str | None = None,
                 runtime: str | None = None, security_dir: str | None = None) -> None:
        """``security_dir``: where a secured lab's secrets are (default
        ``state_dir/security``); another lab's, for a component started
        apart (``up(only=...)``) that shares them."""
        self.topology = topology
        self.state_dir = os.path.abspath(state_dir)
        self.python = python or sys.executable
        self.records: dict[str, ProcessRecord] = {}
        # processes this object started: polled (which reaps them) rather than
        # looked up in /proc, where a dead child stays a zombie until reaped
        self._children: dict[str, SupervisedProcess] = {}
        self.runtime = "processes"
        self.docker_host: str | None = None     # the engine of the containers runtime
        self._docker_cli: Docker | None = None
        self._security_dir = os.path.abspath(security_dir) if security_dir else None
        self._read_state()
        if runtime is not None:
            if runtime not in LAB_RUNTIMES:
                raise LabError(f"runtime must be one of {', '.join(LAB_RUNTIMES)}, not "
                               f"{runtime!r}")
            self.runtime = runtime
        if self.runtime == "netns" and not self.topology.network.namespaces:
            self.topology = dataclasses.replace(self.topology, network=dataclasses.replace(
                self.topology.network, namespaces=True))
        #: the secured lab's secrets (None: the lab runs open)
        self.security = LabSecurity(self._security_dir or self.path("security")) \
            if self.topology.security.enabled else None

    @property
    def http_access(self) -> HttpAccess | None:
        """How the lab's own checks ask its HTTP ports: as the lab's HTTP
        admin over HTTPS when it is secured; None (plain HTTP) when open."""
        return None if self.security is None else self.security.http_access()

    def _metrics_health(self, port: int) -> dict[str, str]:
        """A container's health check of its metrics port: /metrics over
        HTTP, or in a secured lab the open /healthz over HTTPS."""
        path = "metrics" if self.security is None else "healthz"
        return daemon.health_check_env(f"{scheme(self.http_access)}://127.0.0.1:{port}/{path}")

    @classmethod
    def open(cls, state_dir: str) -> "Lab":
        """The lab of ``state_dir``, with the topology it was started with."""
        path = os.path.join(state_dir, TOPOLOGY_FILE)
        if not os.path.exists(path):
            raise LabError(f"no lab in {os.path.abspath(state_dir)} (no {TOPOLOGY_FILE}): "
                           f"start one with `python -m infra.local up --dir {state_dir}`")
        return cls(load_topology(path), state_dir)

    def __repr__(self) -> str:
        return f"Lab({self.topology.name!r}, {self.state_dir!r}, {len(self.records)} processes)"

    # ---------------------------------------------------------------- paths, addresses

    def path(self, *parts: str) -> str:
        return os.path.join(self.state_dir, *parts)

    def log_path(self, name: str) -> str:
        return self.path("logs", f"{name}.log")

    def broker_data_dir(self, cluster: str, index: int) -> str:
        spec = self.topology.cluster(cluster)
        parent = spec.data_dir or os.path.join("data", spec.name)
        return os.path.join(self.state_dir, parent, f"broker-{index}")

    def zookeeper_connect(self, cluster: str | None = None) -> str:
        """The ensemble's connect string, with ``cluster``'s chroot when named."""
        return self.topology.zookeeper_connect(cluster)

    def lb_address(self, cluster: str) -> str:
        port = self.topology.lb_port(cluster)
        if port is None:
            raise LabError(f"cluster {cluster!r} has no load balancer")
        return f"{self.topology.address_of(f'{cluster}.haproxy')}:{port}"

    def broker_address(self, cluster: str, index: int) -> str:
        return (f"{self.topology.address_of(self.broker_name(cluster, index))}:"
                f"{self.topology.broker_ports(cluster)[index]}")

    def broker_addresses(self, cluster: str) -> list[str]:
        return [self.broker_address(cluster, i) for i in range(self.topology.cluster(cluster).brokers)]

    def lb_backends(self, cluster: str) -> list[dict[str, Any]]:
        """Each broker's state in ``cluster``'s load balancer (see
        haproxy.backend_servers); OSError when HAProxy does not answer."""
        return haproxy.backend_servers(self.path("haproxy", cluster), cluster)

    @staticmethod
    def broker_name(cluster: str, index: int) -> str:
        return f"{cluster}.broker-{index}"

    # ---------------------------------------------------------------- state file

    def _read_state(self) -> None:
        try:
            state = detached.read_state(self.path(STATE_FILE), ProcessRecord)
        except detached.StateFileError as exc:
            raise LabError(str(exc)) from None
        if state is None:
            return
        fields, records = state
        self.records = {r.name: r for r in records}
        self.runtime = fields.get("runtime", "processes")
        self.docker_host = fields.get("docker_host")
        self._security_dir = self._security_dir or fields.get("security_dir")

    def _write_state(self) -> None:
        detached.write_state(self.path(STATE_FILE), self.records.values(),
                             lab=self.topology.name, state_dir=self.state_dir,
                             topology=self.path(TOPOLOGY_FILE), runtime=self.runtime,
                             docker_host=self.docker_host, security_dir=self._security_dir)

    # ---------------------------------------------------------------- liveness

    def alive(self, name: str) -> bool:
        """Whether the lab's process ``name`` is running (it, not a later
        process that reused its pid)."""
        record = self.records[name]
        child = self._children.get(name)
        if child is not None and child.pid == record.pid:
            # a killed multi-threaded process (a JVM) shows as a zombie before
            # the kernel lets its parent reap it: dead already, all the same
            return child.poll() is None and record.alive()
        return record.alive()

    def exit_status(self, name: str) -> str:
        child = self._children.get(name)
        if child is not None and child.poll() is not None:
            return child.exit_status()
        return "is not running"

    def is_running(self) -> bool:
        """Whether any process of the lab is running."""
        return any(self.alive(name) for name in self.records)

    def pids(self) -> dict[str, int]:
        return {name: r.pid for name, r in self.records.items()}

    def _leftovers(self, name: str) -> list[int]:
        """Processes of ``name``'s group still running (empty once it is all gone)."""
        return self.records[name].leftovers()

    def _signal(self, name: str, sig: int) -> None:
        self._send(self.records[name], sig)

    def _send(self, record: ProcessRecord, sig: int) -> None:
        """``sig`` to the process of ``record`` (see DetachedProcess.signal);
        for a container, to its main process through the engine (SIGKILL
        cannot be forwarded by its docker client)."""
        if record.container and self._docker().signal(record.container, sig):
            return
        record.signal(sig)

    def _stop(self, names: list[str], timeout: float) -> list[str]:
        """SIGTERM ``names`` at once, SIGKILL what is left after ``timeout``;
        returns the names of which something still runs after that."""
        left = detached.stop([self.records[n] for n in names], timeout, send=self._send)
        return [r.name for r in left]

    def _wait_gone(self, names: list[str], timeout: float) -> list[str]:
        return [r.name for r in detached.wait_gone([self.records[n] for n in names], timeout)]

    # ---------------------------------------------------------------- containers

    def _docker(self) -> Docker:
        """The docker CLI against the lab's engine: the one recorded in the
        state file, else the user's or the project's own (started if needed)."""
        if self._docker_cli is None:
            try:
                if self.docker_host is None:
                    self.docker_host = engine_host()
                self._docker_cli = Docker(self.docker_host)
            except ContainerError as exc:
                raise LabError(str(exc)) from None
        return self._docker_cli

    def container(self, name: str) -> str:
        """The name of the container that runs the lab's process ``name``."""
        return container_name(self.topology.name, self.state_dir, name)

    def _in_container(self, name: str, image: str, args: list[str], *,
                      env: dict[str, str] | None = None, mounts: list[Mount] = (),
                      workdir: str | None = None) -> list[str]:
        """The command that runs process ``name`` as a container of ``image``
        (a key of container_runtime.IMAGES): its entrypoint, then ``args``."""
        return self._docker().run_command(self.container(name), IMAGES[image], args,
                                          state_dir=self.state_dir, env=env, mounts=mounts,
                                          workdir=workdir)

    def _remove_containers(self) -> list[str]:
        """Remove every container of the state directory (what a killed docker
        client left running); the names of those that were there."""
        try:
            return self._docker().remove_labelled(self.state_dir)
        except ContainerError as exc:
            raise LabError(str(exc)) from None

    # ---------------------------------------------------------------- launching

    def _launch(self, name: str, role: str, command: list[str], ports: dict[str, int],
                cluster: str | None = None, index: int | None = None,
                cwd: str | None = None, host: str | None = None) -> ProcessRecord:
        """Start process ``name``; in the netns runtime, in the network
        namespace of ``host`` (default: the host of the same name; the record
        keeps the command as given: a relaunch enters the host's namespace
        anew)."""
        log_path = self.log_path(name)
        given = command
        if self.runtime != "netns":
            host = None
        else:
            host = host or name
            try:
                command = network_control.enter_command(self.state_dir, host, command)
            except NetworkLabError as exc:
                raise LabError(str(exc)) from None
        os.makedirs(os.path.dirname(log_path), exist_ok=True)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (SOURCE_ROOT, env.get("PYTHONPATH")) if p)
        container = None
        if self.runtime == "containers":
            container = self.container(name)
            env["DOCKER_HOST"] = self._docker().host
        proc = SupervisedProcess(name, command, log_path, cwd=cwd or self.state_dir, env=env)
        proc.start()
        record = ProcessRecord.of(proc, role=role, ports=ports, cluster=cluster, index=index,
                                  cwd=cwd, container=container, host=host)
        record.command = given
        self._children[name] = proc
        self.records[name] = record
        self._write_state()
        return record

    def _relaunch(self, name: str) -> ProcessRecord:
        old = self.records[name]
        if old.container:
            # its container may still be going away (--rm after a kill) or be
            # left by a killed client: the name must be free (up removed every
            # container of the state directory before the first launch)
            if self._docker().remove([old.container]):
                raise LabError(f"container {old.container} cannot be removed: "
                               f"{name} cannot start")
        return self._launch(old.name, old.role, old.command, old.ports, old.cluster, old.index,
                            old.cwd, host=old.host)

    def _failure(self, name: str, why: str, hint: str = "") -> LabError:
        record = self.records[name]
        return LabError(f"{name} {why}{hint}\n----- last lines of {record.log} -----\n"
                        f"{tail(record.log, 30)}")

    def _wait_ready(self, what: str, names: list[str], ready: Callable[[str], bool],
                    timeout: float, hint: Callable[[str], str] = lambda name: "") -> None:
        """Wait until ``ready(name)`` for every name; LabError naming the first
        process that died or was not ready in time."""
        pending = list(names)

        def all_ready() -> bool:
            for name in list(pending):
                if not self.alive(name):
                    raise self._failure(name, f"{self.exit_status(name)} before it was ready",
                                        hint(name))
                if ready(name):
                    pending.remove(name)
                    log.info("%s is ready%s", name, _ports_text(self.records[name].ports))
            return not pending

        if not wait_until(all_ready, timeout):
            raise self._failure(pending[0], f"was not ready after {timeout:.0f} s ({what})",
                                hint(pending[0]))

    # ---------------------------------------------------------------- up

    def up(self, timeout: float = 60.0, mirrors: bool = True, only: str | None = None,
           monitoring: bool = False) -> "Lab":
        """Start the whole topology; each step waits up to ``timeout`` seconds.
        With ``mirrors=False`` the mirrors are left out; with ``monitoring``
        the lag service and Prometheus are started last (start_monitoring;
        not in the containers runtime, nor with ``only``). With ``only``, one
        component of it: ``zookeeper``, ``cluster:NAME`` (its brokers and load
        balancer) or ``mirror:NAME`` (its processes), the rest being run from
        other state directories (Terraform's local environment starts each
        component as a resource of its own). On failure everything started is
        taken down and LabError says what failed. The runtime (processes or
        containers) is the one the Lab was made with."""
        component = self._component(only)
        if self.records and self.is_running():
            running = [f"{n} (pid {self.records[n].pid})" for n in self.records if self.alive(n)]
            raise LabError(f"a lab is already running in {self.state_dir}: "
                           f"{', '.join(running)}; take it down first "
                           f"(`python -m infra.local down --dir {self.state_dir}`)")
        if self.records:
            log.warning("the lab in %s had stopped without `down`: starting afresh",
                        self.state_dir)
        if self.security is not None and component is not None and not self._security_dir:
            raise LabError("the secured lab keeps its secrets in one state directory: bring "
                           "it up whole (no --only), or add --insecure")
        if self._security_dir and self.security is not None and not self.security.exists():
            raise LabError(f"no secrets of a secured lab in {self._security_dir}: bring "
                           f"that lab up first")
        if (self.security is not None and self.runtime == "containers"
                and not self.security.directory.startswith(self.state_dir + os.sep)):
            raise LabError(f"the containers mount the state directory only: the secrets in "
                           f"{self.security.directory} would not be visible in them")
        self._check_security_mode()
        if self.runtime == "containers":
            self._check_containers(component)
        if self.runtime == "netns":
            problems = network_runner.missing_requirements()
            if problems:
                raise LabError("the netns runtime cannot run here: it needs "
                               + ", ".join(problems))
            if component is not None:
                raise LabError("the netns runtime brings the whole lab up (no --only)")
            if self.topology.zookeeper.size != 1:
                raise LabError("the netns runtime runs one standalone ZooKeeper per "
                               "datacenter: zookeeper.size must be 1")
        # in the netns runtime every host has its own addresses: nothing here to clash with
        busy = [] if self.runtime == "netns" else \
            [(port, what) for port, what in busy_ports(self.topology)
             if component is None or _belongs(what, component)]
        if busy:
            raise LabError("ports of the topology are in use: "
                           + "; ".join(f"{port} ({what})" for port, what in busy)
                           + ". Stop what uses them or move the lab (--set base_port=...)")
        if self.runtime in ("processes", "netns") and any(
                c.load_balancer for c in self.topology.clusters()
                if component in (None, ("cluster", c.name))):
            try:
                haproxy.find_haproxy()
            except haproxy.HAProxyError as exc:
                raise LabError(str(exc)) from None
        self.records, self._children = {}, {}
        os.makedirs(self.path("logs"), exist_ok=True)
        with open(self.path(TOPOLOGY_FILE), "w") as f:
            f.write(to_toml(self.topology))
        self._write_state()
        started = time.monotonic()
        if self.security is not None and not self._security_dir:
            try:        # a lab whose secrets are another's (security_dir) leaves them be
                self.security.prepare(self.topology)
            except (OSError, ValueError) as exc:
                raise LabError(f"the secured lab's secrets in {self.security.directory} "
                               f"cannot be made or used: {exc}") from None
        try:
            if component is None:
                if self.runtime == "netns":
                    self._start_network(timeout)
                self._start_zookeeper(timeout)
                self._start_brokers(timeout)
                self._start_load_balancers(timeout)
                if self.runtime in ("processes", "netns"):
                    self._start_schema_registries(timeout)
                else:
                    log.warning("the schema registries' REST API runs in the processes "
                                "and netns runtimes only: left out (each cluster's registry "
                                "is in its ZooKeeper all the same)")
                if mirrors:
                    self._start_mirrors(timeout)
                if monitoring and self.runtime == "containers":
                    log.warning("the monitoring (lag service, Prometheus) runs in the "
                                "processes and netns runtimes only: left out")
                elif monitoring:
                    self.start_monitoring(timeout=timeout)
            elif component[0] == "zookeeper":
                self._start_zookeeper(timeout)
            elif component[0] == "cluster":
                name = component[1]
                self._start_brokers(timeout, only=[(name, i) for i in
                                                   range(self.topology.cluster(name).brokers)])
                self._start_load_balancers(timeout, only=name)
            else:
                self._start_mirrors(timeout, only=component[1])
        except BaseException as exc:
            log.error("lab start failed: taking down what was started")
            try:
                self.down(timeout=10.0)
            except LabError as down_exc:
                log.error("%s", down_exc)
            if isinstance(exc, (LabError, KeyboardInterrupt)):
                raise
            raise LabError(f"lab start failed: {exc}") from exc
        log.info("lab %s is up in %.1f s: %d processes, state in %s", self.topology.name,
                 time.monotonic() - started, len(self.records), self.state_dir)
        return self

    def _check_security_mode(self) -> None:
        """Refuse to start secured over ZooKeeper data a start in the open
        left (its records open to anyone), or open over a secured one's (its
        records the cluster identity's: open brokers could not register);
        then record this start's mode beside the data."""
        mode = "secured" if self.security is not None else "open"
        record = self.path(SECURITY_MODE_FILE)
        if os.path.isdir(self.path("zookeeper")):
            before = "open"         # data from before the mode was recorded: open
            if os.path.exists(record):
                with open(record) as f:
                    before = f.read().strip()
            if before != mode:
                raise LabError(f"the lab in {self.state_dir} ran {before}, and its ZooKeeper "
                               f"data is kept: start it {before} again, or remove its data "
                               f"first (`python -m infra.local down --purge --dir "
                               f"{self.state_dir}`)")
        os.makedirs(self.state_dir, exist_ok=True)
        with open(record, "w") as f:
            f.write(mode + "\n")

    def _check_containers(self, component: tuple[str, str] | None) -> None:
        """Before a start in containers: the engine answers, the images of
        ``component`` (None: all) are there, and no container of this state
        directory is left (a docker client killed with SIGKILL leaves its
        container running: this lab is not running, so it is removed)."""
        # nothing runs: the engine is today's, not the one an earlier run recorded
        self.docker_host, self._docker_cli = None, None
        images = set()
        if component in (None, ("zookeeper", "")):
            images.add(IMAGES["zookeeper"])
        if component is None or component[0] in ("cluster", "mirror"):
            images.add(IMAGES["samsa"])
        if any(c.load_balancer for c in self.topology.clusters()
               if component in (None, ("cluster", c.name))):
            images.add(IMAGES["haproxy"])
        try:
            self._docker().require_images(images)
        except ContainerError as exc:
            raise LabError(str(exc)) from None
        left = self._remove_containers()
        if left:
            log.warning("removed containers left by an earlier run of %s: %s",
                        self.state_dir, ", ".join(left))

    def _component(self, only: str | None) -> tuple[str, str] | None:
        if only is None:
            return None
        kind, _, name = only.partition(":")
        if kind == "zookeeper" and not name:
            return ("zookeeper", "")
        if kind == "cluster" and name in {c.name for c in self.topology.clusters()}:
            return ("cluster", name)
        if kind == "mirror" and name in {m.name for m in self.topology.mirrors}:
            return ("mirror", name)
        raise LabError(f"no component {only!r}: zookeeper, cluster:NAME (one of "
                       f"{', '.join(c.name for c in self.topology.clusters())}) or mirror:NAME "
                       f"(one of {', '.join(m.name for m in self.topology.mirrors) or 'none'})")

    def _start_network(self, timeout: float) -> None:
        """The netns runtime's network (infra/local/network): every host's
        namespace, the datacenters and the router's links; its keeper is the
        lab's process ``network``, stopped last."""
        lab = network_runner.NetworkLab(self.state_dir, python=self.python)
        try:
            document = lab.up(timeout=timeout)
        except NetworkLabError as exc:
            raise LabError(str(exc)) from None
        record = lab.keeper()
        self.records["network"] = ProcessRecord.from_json(
            {**record.to_json(), "role": "network", "ports": {}})
        self._write_state()
        log.info("network lab up: %d hosts in %d datacenters (%s); this machine is %s",
                 len(document["hosts"]), len(document["datacenters"]), document["subnet"],
                 document["root_address"])

    def _ensembles(self) -> list[str | None]:
        """The clusters that each name a ZooKeeper ensemble of their own (the
        netns runtime: one per datacenter), or [None]: one ensemble for all."""
        if self.topology.network.namespaces:
            return [c.name for c in self.topology.clusters()]
        return [None]

    def _start_zookeeper(self, timeout: float) -> None:
        t = self.topology
        where = "; ".join(t.zookeeper_connect(c) for c in self._ensembles())
        log.info("starting ZooKeeper (%d member%s) on %s%s", t.zookeeper.size,
                 "s" if t.zookeeper.size > 1 else "", where,
                 " in containers" if self.runtime == "containers" else "")
        if self.runtime == "containers":
            self._start_zookeeper_containers(timeout)
        elif self.runtime == "netns":
            self._start_zookeeper_per_datacenter(timeout)
        else:
            self._start_zookeeper_processes(timeout)
        self._write_state()
        log.info("ZooKeeper serves on %s", where)
        for ensemble in self._ensembles():
            with self._zookeeper(cluster=ensemble, chroot=False) as zk:
                for cluster in t.clusters():
                    if ensemble in (None, cluster.name):
                        zk.ensure_path(cluster.zk_chroot)
        if self.security is not None:
            for cluster in t.clusters():
                with self._zookeeper(cluster=cluster.name, identity=ZK_CLUSTER) as zk:
                    # the chroot: the cluster's; everyone may read it and add
                    # a subtree of their own (each writer owns what it makes)
                    zk.set_acls("/", [Identity.from_file(
                        self.security.zookeeper_identity_file(ZK_CLUSTER)).owner(),
                        make_acl("world", "anyone", read=True, create=True)])
                    self.security.provision(zk, t, cluster.name)
            log.info("users and ACLs of every cluster written (secrets in %s)",
                     self.security.directory)

    def _start_zookeeper_per_datacenter(self, timeout: float) -> None:
        """The netns runtime: a standalone ZooKeeper in each datacenter, on
        its host ``<cluster>.zookeeper-1``, its files in zookeeper/<cluster>/."""
        names = []
        for cluster in self.topology.clusters():
            ((name, address, port),) = self.topology.zookeeper_members(cluster.name)
            try:
                ensemble = ZooKeeperEnsemble(1, self.path("zookeeper", cluster.name),
                                             host=address, client_ports=[port],
                                             keep_directory=True,
                                             tls=self._zookeeper_server_tls(name))
            except (ZooKeeperError, ValueError) as exc:
                raise LabError(f"cannot run ZooKeeper: {exc}") from None
            (server,) = ensemble.servers
            link = self.log_path(name)
            if os.path.lexists(link):
                os.remove(link)
            os.makedirs(os.path.dirname(link), exist_ok=True)
            os.symlink(server.log_path, link)
            self._launch(name, "zookeeper",
                         server.command(ensemble.java, ensemble.classpath, ensemble.jvm_args),
                         {"client": port}, cluster=cluster.name, index=1,
                         cwd=server.directory)
            names.append(name)
        self._wait_ready("answers ruok and serves", names, lambda name: server_mode(
            self.topology.address_of(name), self.records[name].ports["client"],
            tls=self.zookeeper_probe_context()) in SERVING_MODES, timeout)

    def _start_zookeeper_containers(self, timeout: float) -> None:
        """Each member a samsa/zookeeper container (its settings by
        environment, its data and zoo.cfg in zookeeper/zk-<id>/), all started
        before any is waited on: a quorum needs its members up to elect."""
        t = self.topology
        peers = t.zookeeper_peer_ports()
        servers = ",".join(f"{i + 1}={t.host}:{quorum}:{election}"
                           for i, (quorum, election) in enumerate(peers))
        names = []
        for i, port in enumerate(t.zookeeper_client_ports()):
            server_id = i + 1
            name = f"zookeeper-{server_id}"
            directory = self.path("zookeeper", f"zk-{server_id}")
            for sub in ("data", "conf"):
                os.makedirs(os.path.join(directory, sub), exist_ok=True)
            ports = {"client": port}
            if peers:
                ports.update(quorum=peers[i][0], election=peers[i][1])
            env = {"ZOO_PORT": str(port), "ZOO_MY_ID": str(server_id), "ZOO_SERVERS": servers}
            tls = self._zookeeper_server_tls("zookeeper")
            if tls is not None:          # TLS alone on the client port
                env.update(ZOO_TLS_KEY_STORE=tls.write_key_store(
                    os.path.join(directory, "key-store.pem")),
                    ZOO_TLS_TRUST_STORE=tls.ca_file, ZOO_TLS_CLIENT_AUTH=tls.client_auth,
                    ZOO_TLS_QUORUM="true" if tls.quorum and peers else "")
            command = self._in_container(
                name, "zookeeper", [], env=env,
                mounts=[Mount(os.path.join(directory, "data"), "/data"),
                        Mount(os.path.join(directory, "conf"), "/conf")],
                workdir=directory)
            if os.path.islink(self.log_path(name)):    # a processes run's link
                os.remove(self.log_path(name))
            self._launch(name, "zookeeper", command, ports, index=server_id, cwd=directory)
            names.append(name)
        # a member serves (srvr names a mode) only once it has a leader
        self._wait_ready("answers ruok and serves", names, lambda name: server_mode(
            t.host, self.records[name].ports["client"], tls=self.zookeeper_probe_context())
            in SERVING_MODES, timeout)

    def _start_zookeeper_processes(self, timeout: float) -> None:
        t = self.topology
        try:
            ensemble = ZooKeeperEnsemble(t.zookeeper.size, self.path("zookeeper"), host=t.host,
                                         client_ports=t.zookeeper_client_ports(),
                                         peer_ports=t.zookeeper_peer_ports() or None,
                                         keep_directory=True,
                                         tls=self._zookeeper_server_tls("zookeeper"))
        except (ZooKeeperError, ValueError) as exc:
            raise LabError(f"cannot run ZooKeeper: {exc}") from None
        try:
            ensemble.start(timeout)
        except ZooKeeperError as exc:
            raise LabError(f"ZooKeeper did not start: {exc}") from None
        except BaseException:
            ensemble.kill_all()
            raise
        for server in ensemble.servers:
            name = f"zookeeper-{server.server_id}"
            link = self.log_path(name)
            if os.path.lexists(link):
                os.remove(link)
            os.symlink(server.log_path, link)
            ports = {"client": server.client_port}
            if server.quorum_port:
                ports.update(quorum=server.quorum_port, election=server.election_port)
            self.records[name] = ProcessRecord.of(server.process, name, role="zookeeper",
                                                  ports=ports, index=server.server_id,
                                                  cwd=server.directory)
            self._children[name] = server.process

    def _zookeeper_server_tls(self, host: str):
        """The secured lab: the TLS client port of the member on ``host``
        (its only client port); None in the open lab."""
        return None if self.security is None else self.security.zookeeper_server_tls(host)

    def zookeeper_tls(self) -> ZooKeeperTls:
        """How a client reaches this lab's ZooKeeper (make_client's ``tls``,
        ``.kazoo_options()`` for a KazooClient): over TLS, trusting the lab's
        authority, in a secured lab; plaintext (disabled) in the open one."""
        return ZooKeeperTls() if self.security is None else self.security.zookeeper_tls()

    def zookeeper_probe_context(self):
        """The TLS context of a four-letter-word probe of this lab's
        ZooKeeper (server_mode's ``tls``); None in the open lab."""
        return None if self.security is None else self.security.zookeeper_probe_context()

    @contextlib.contextmanager
    def _zookeeper(self, timeout: float = 10.0, cluster: str | None = None,
                   chroot: bool = True, identity: str | None = None) -> Iterator[Any]:
        """A started kazoo client in ``cluster``'s chroot (at its ensemble's
        root without ``chroot``, or with no cluster named: the one ensemble of
        every cluster), for the lab's own reads; with ``identity``, the
        secured lab's ZooKeeper identity of that name."""
        connect = self.zookeeper_connect(cluster)
        if not chroot and cluster is not None:
            connect = connect[:-len(self.topology.cluster(cluster).zk_chroot)]
        client = make_client(connect, identity=Identity.from_file(
            self.security.zookeeper_identity_file(identity)) if identity else None,
                             tls=self.zookeeper_tls())
        try:
            start_client(client, connect, timeout=timeout, what="lab")
        except ZooKeeperUnavailable as exc:
            raise LabError(str(exc)) from None
        try:
            yield client
        finally:
            client.stop()
            client.close()

    def broker_command(self, cluster: str, index: int) -> list[str]:
        """The command of broker ``index`` of ``cluster`` in the lab's runtime."""
        t = self.topology
        spec = t.cluster(cluster)
        port = t.broker_ports(cluster)[index]
        secured = {}
        if self.security is not None:
            # the layout's port is the TLS listener's; the plaintext one
            # (asking for SCRAM, used by no one) takes a free port
            secured = {"tls_port": str(port),
                       **self.security.broker_settings(self.broker_name(cluster, index))}
            port = 0
        args = ["--broker-id", str(index), "--host", t.address_of(self.broker_name(cluster, index)),
                "--port", str(port),
                "--data-dir", self.broker_data_dir(cluster, index),
                "--metrics-port", str(t.broker_metrics_ports(cluster)[index]),
                "--log-format", "json", "--set", f"zookeeper={t.zookeeper_connect(cluster)}"]
        for key, value in {**secured, **spec.broker_overrides()}.items():
            args += ["--set", f"{key}={value}"]
        if self.runtime != "containers":
            return [self.python, "-m", "broker", *args]
        mounts = []
        parent = os.path.dirname(self.broker_data_dir(cluster, index))
        if not parent.startswith(self.state_dir + os.sep):
            # a cluster's data_dir outside the state directory: mounted too,
            # made first (a missing mount source would be made by the engine, as root)
            os.makedirs(parent, exist_ok=True)
            mounts.append(Mount(parent, parent))
        metrics = t.broker_metrics_ports(cluster)[index]
        env = self._metrics_health(metrics) if metrics != -1 else None
        return self._in_container(self.broker_name(cluster, index), "samsa",
                                  ["broker", *args], env=env, mounts=mounts)

    def _start_brokers(self, timeout: float, only: list[tuple[str, int]] | None = None) -> None:
        t = self.topology
        wanted = only or [(c.name, i) for c in t.clusters() for i in range(c.brokers)]
        log.info("starting %d broker%s", len(wanted), "s" if len(wanted) > 1 else "")
        with contextlib.ExitStack() as stack:
            # the root of each ensemble (one per cluster in the netns runtime)
            roots = {e: stack.enter_context(self._zookeeper(cluster=e, chroot=False))
                     for e in self._ensembles()}

            def zk_of(cluster: str):
                return roots.get(cluster) or roots[None]
            # a broker killed earlier may still be registered until its session
            # expires: ready means registered by a session other than that one
            stale = {}
            for cluster, i in wanted:
                stat = zk_of(cluster).exists(self._broker_node(cluster, i))
                stale[self.broker_name(cluster, i)] = stat.ephemeralOwner if stat else None
            names = []
            for cluster, i in wanted:
                name = self.broker_name(cluster, i)
                if only and name in self.records:
                    self._relaunch(name)
                else:
                    ports = {"port": t.broker_ports(cluster)[i]}   # it makes its data dir
                    if t.broker_metrics_ports(cluster)[i] != -1:
                        ports["metrics"] = t.broker_metrics_ports(cluster)[i]
                    self._launch(name, "broker", self.broker_command(cluster, i), ports,
                                 cluster=cluster, index=i)
                names.append(name)

            def registered(name: str) -> bool:
                record = self.records[name]
                path = self._broker_node(record.cluster, record.index)
                zk = zk_of(record.cluster)
                try:
                    data, stat = zk.get(path)
                    # secured: the TLS listener is registered first, then the id
                    ids = zk.exists(self.topology.cluster(record.cluster).zk_chroot
                                    + paths.broker_id_path(record.index))
                except NoNodeError:
                    return False
                return (stat.ephemeralOwner != stale[name]
                        and ids is not None and ids.ephemeralOwner == stat.ephemeralOwner
                        and data.decode() == self.broker_address(record.cluster, record.index))

            self._wait_ready("its registration in ZooKeeper", names, registered, timeout)

    def _broker_node(self, cluster: str, index: int) -> str:
        """Where the broker registers the address of ``broker_address``: its
        TLS listener's in the secured lab."""
        path = paths.broker_tls_path(index) if self.security is not None \
            else paths.broker_id_path(index)
        return self.topology.cluster(cluster).zk_chroot + path

    def _start_load_balancers(self, timeout: float, only: str | None = None) -> None:
        names = []
        for cluster in self.topology.clusters():
            if cluster.load_balancer is None or only not in (None, cluster.name):
                continue
            directory = self.path("haproxy", cluster.name)
            os.makedirs(directory, exist_ok=True)
            config = os.path.join(directory, "haproxy.cfg")
            name = f"{cluster.name}.haproxy"
            stats_security = None
            if self.security is not None and \
                    self.topology.lb_stats_port(cluster.name) is not None:
                stats_security = self.security.stats_security(name)
            # its owner's alone: a secured stats page's passwords are in it
            fd = os.open(config, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.fchmod(fd, 0o600)          # a file of an older lab: private before it is written
            with os.fdopen(fd, "w") as f:
                f.write(haproxy.render(self.topology, cluster.name, stats_security))
            try:
                if self.runtime == "containers":
                    self._docker().check_haproxy_config(config, self.state_dir)
                    # the stats socket is made relative to the working directory
                    command = self._in_container(
                        name, "haproxy", [], mounts=[Mount(config, HAPROXY_CONFIG, True)],
                        workdir=directory)
                else:
                    haproxy.check_config(config)
                    command = haproxy.command(config)
            except (haproxy.HAProxyError, ContainerError) as exc:
                raise LabError(str(exc)) from None
            ports = {"port": self.topology.lb_port(cluster.name)}
            if self.topology.lb_stats_port(cluster.name) is not None:
                ports["stats"] = self.topology.lb_stats_port(cluster.name)
            log.info("starting %s on %s", name, self.lb_address(cluster.name))
            self._launch(name, "haproxy", command, ports, cluster=cluster.name, cwd=directory)
            names.append(name)

        def all_up(name: str) -> bool:
            cluster = self.records[name].cluster
            try:
                servers = self.lb_backends(cluster)
            except OSError:
                return False
            return bool(servers) and all(s["status"] == "UP" for s in servers)

        self._wait_ready("its stats socket and every broker UP in its backend", names, all_up,
                         timeout)

    def start_mirrors(self, timeout: float = 60.0) -> None:
        """Start every mirror process of a lab brought up with
        ``up(mirrors=False)`` (once the topics exist: a topic made under a
        running consumer group moves its partitions, and at-least-once
        copies again what was not committed yet) and wait until each is ready."""
        if any(r.role == "mirror" for r in self.records.values()):
            raise LabError(f"the mirrors already run in {self.state_dir}")
        self._start_mirrors(timeout)

    def _start_mirrors(self, timeout: float, only: str | None = None) -> None:
        names = []
        for mirror in self.topology.mirrors:
            if only not in (None, mirror.name):
                continue
            for i in range(mirror.processes):
                config = mirror_config(self.topology, mirror, i)
                if self.security is not None:
                    config = dataclasses.replace(
                        config, credentials=self.security.credentials(MIRROR, ZK_MIRROR),
                        metrics_http=self.security.http_security(
                            f"{mirror.name}.mirror-{i}"))
                path = self.path("mirror", f"{mirror.name}-{i}.toml")
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "w") as f:
                    f.write(settings.to_toml(config))
                name = f"{mirror.name}.mirror-{i}"
                ports = {"metrics": config.metrics_port} if config.metrics_port > 0 else {}
                log.info("starting %s: %s -> %s", name, ", ".join(mirror.sources), mirror.target)
                if self.runtime == "containers":
                    env = (self._metrics_health(config.metrics_port)
                           if config.metrics_port > 0 else None)
                    command = self._in_container(name, "samsa", ["mirror", "--config", path],
                                                 env=env)
                else:
                    command = [self.python, "-m", "mirror", "--config", path]
                self._launch(name, "mirror", command, ports, cluster=mirror.target, index=i)
                names.append(name)

        def metrics_answer(name: str) -> bool:
            port = self.records[name].ports.get("metrics")
            return port is None or scrape(self.topology.address_of(name), port,
                                          access=self.http_access) is not None

        self._wait_ready("its /metrics", names, metrics_answer, timeout, hint=self._mirror_hint)

    # ---------------------------------------------------------------- monitoring

    def _start_schema_registries(self, timeout: float) -> None:
        """Each cluster's schema registry (in its ZooKeeper) served over
        Confluent's REST API (``python -m schemas serve``), on a free port;
        in the netns runtime in the cluster's host ``<cluster>.registry``,
        on its address and port ``REGISTRY_PORT``."""
        t = self.topology
        clusters = [c.name for c in t.clusters()]
        ports = [REGISTRY_PORT] * len(clusters) if self.runtime == "netns" else \
            free_ports(len(clusters), t.host)
        identity = [] if self.security is None else \
            ["--set", "zookeeper_auth_file="
             + self.security.zookeeper_identity_file(ZK_REGISTRY),
             "--set", f"zookeeper_tls_ca_file={self.security.ca_file}"]
        for cluster, port in zip(clusters, ports):
            host = f"{cluster}.registry"
            secured = [] if self.security is None else self.security.http_options(host)
            self._launch(f"registry-{cluster}", "schema-registry",
                         [self.python, "-m", "schemas", "--registry",
                          f"zookeeper://{self.zookeeper_connect(cluster)}", "serve",
                          "--host", t.address_of(host), "--port", str(port), *identity,
                          *secured],
                         {"http": port}, cluster=cluster, host=host)
        self._wait_ready("its REST API (/config)",
                         [f"registry-{c}" for c in clusters],
                         lambda name: daemon.answers(f"{self.schema_registry_url(name[9:])}"
                                                     f"/config", self.http_access), timeout)
        if self.security is not None:
            self._register_shipped_schemas()

    def _register_shipped_schemas(self) -> None:
        """The secured lab: the shipped schemas in every cluster's registry,
        written as the registry's identity (the services register theirs at
        start, which needs no identity once registered)."""
        from schemas import catalog
        from schemas.registry import SchemaRegistry
        from schemas.stores import open_store
        identity = self.security.zookeeper_identity_file(ZK_REGISTRY)
        for cluster in self.topology.clusters():
            store = open_store(f"zookeeper://{self.zookeeper_connect(cluster.name)}",
                               zookeeper_auth_file=identity,
                               zookeeper_tls=self.zookeeper_tls().kazoo_options())
            with SchemaRegistry(store) as registry:
                catalog.register_defaults(registry)
        log.info("the shipped schemas registered in every cluster's registry")

    def start_audit(self, grace_ms: int | None = None, publish_interval_ms: int = 2000,
                    timeout: float = 60.0) -> str:
        """The audit (audit/) in the netns runtime, all in the analysis
        datacenter's ``audit`` host: a counter of every cluster (the cluster
        tier; process ``audit-count-<cluster>``, group ``audit-<cluster>``),
        reaching the datacenters' ZooKeepers and brokers across their WAN
        links as the analysis datacenter does, and the audit service
        (process ``audit-service``) over the analysis cluster's audit topic,
        its database in ``audit/``, its HTTP API on the host's port
        ``AUDIT_PORT`` (ready: /healthz answers). ``grace_ms``: how long
        after a window ends it stays pending, not lost (None: the
        service's default, 30 minutes). Returns the service's URL. Start it
        once the topics (the audit topic included) exist. (The processes
        runtime's pipeline runs the same programs as daemons of its own:
        infra/local/pipeline.py.)"""
        if self.runtime != "netns":
            raise LabError("start_audit runs the audit in the netns runtime; the processes "
                           "runtime's pipeline runs it (infra/local/pipeline.py)")
        if any(r.role == "audit" for r in self.records.values()):
            raise LabError(f"the audit already runs in {self.state_dir}")
        t = self.topology
        if t.analysis is None:
            raise LabError("the audit runs in the analysis datacenter: the topology has none")
        # a secured lab's: the audit's user and ZooKeeper identity, HTTPS and
        # the lab's HTTP users on the service's port
        credentials = [] if self.security is None else \
            self.security.credential_options(AUDIT, ZK_AUDIT)
        secured_http = [] if self.security is None else self.security.http_options("audit")
        counters = []
        for cluster in t.clusters():
            name = f"audit-count-{cluster.name}"
            self._launch(name, "audit",
                         [self.python, "-m", "audit", "count", "--cluster",
                          f"{cluster.name}={self.zookeeper_connect(cluster.name)}",
                          "--set", f"publish_interval_ms={publish_interval_ms}",
                          "--set", f"group=audit-{cluster.name}", *credentials],
                         {}, cluster=cluster.name, host="audit")
            counters.append(name)
        address = t.address_of("audit")
        data_dir = self.path("audit")
        os.makedirs(data_dir, exist_ok=True)
        command = [self.python, "-m", "audit", "serve", "--zookeeper",
                   self.zookeeper_connect(t.analysis.name), "--http-port", str(AUDIT_PORT),
                   "--set", f"http_host={address}", "--set", f"data_dir={data_dir}",
                   *credentials, *secured_http]
        if grace_ms is not None:
            command += ["--set", f"grace_ms={grace_ms}"]
        self._launch("audit-service", "audit", command, {"http": AUDIT_PORT},
                     cluster=t.analysis.name, host="audit")
        url = f"{scheme(self.http_access)}://{address}:{AUDIT_PORT}"
        self._wait_ready("its /healthz", ["audit-service"],
                         lambda _: daemon.answers(f"{url}/healthz", self.http_access), timeout)
        # a counter answers nothing this machine reaches (its /metrics binds
        # its host's loopback): ready is still running once the service is
        self._wait_ready("running", counters, lambda _: True, timeout)
        log.info("the audit runs in host audit: counters of %s; the service at %s/",
                 ", ".join(c.name for c in t.clusters()), url)
        return url

    def audit_url(self) -> str | None:
        """The audit service's URL, None when the lab runs none."""
        record = self.records.get("audit-service")
        if record is None:
            return None
        return (f"{scheme(self.http_access)}://{self.topology.address_of('audit')}:"
                f"{record.ports['http']}")

    def start_airflow(self, sensor_poke_s: float = 5.0, sensor_timeout_s: float = 900.0,
                      timeout: float = 300.0) -> str:
        """A real Airflow with the project's DAGs (infra/local/airflow_stack.py)
        in the netns runtime, all in the analysis datacenter's ``airflow``
        host: its API server (the UI and REST API on the host's port
        ``AIRFLOW_PORT``), scheduler, DAG processor and triggerer, and the
        tasks they run (the loader's spark-submit, whose driver binds the
        host's address). The DAGs' settings (``airflow/warehouse.toml``)
        name the analysis cluster's ZooKeeper at its address in the lab, the
        audit service in the ``audit`` host (start_audit first) and the
        output ``warehouse/`` under the state directory. State, logs and
        database (SQLite) in ``airflow/``; ``down`` stops it first. Returns
        the UI's URL; the login is ``admin`` with the password in
        ``airflow_stack.password(lab.path("airflow"))``."""
        if self.runtime != "netns":
            raise LabError("start_airflow runs Airflow in the netns runtime; in the processes "
                           "runtime `make airflow-up` or the pipeline starts it")
        t = self.topology
        if t.analysis is None:
            raise LabError("Airflow runs in the analysis datacenter: the topology has none")
        audit = self.audit_url()
        if audit is None:
            raise LabError("warehouse_load waits on the audit: start_audit first")
        directory = self.path("airflow")
        os.makedirs(directory, exist_ok=True)
        config = os.path.join(directory, "warehouse.toml")
        with open(config, "w") as f:
            f.write(f"""[loader]
zookeeper = {json.dumps(self.zookeeper_connect(t.analysis.name))}
output = {json.dumps(self.path("warehouse"))}
master = "local[2]"
cluster_name = {json.dumps(t.analysis.name)}
progress_interval_s = 5.0

[warehouse]
audit_url = {json.dumps(audit)}
sensor_poke_s = {float(sensor_poke_s)}
sensor_timeout_s = {float(sensor_timeout_s)}
retries = 2
retry_delay_s = 5.0
max_retry_delay_s = 30.0
""")
            if self.security is not None:
                f.write(self.security.warehouse_toml())
        try:
            state = airflow_stack.up(
                directory, AIRFLOW_PORT, config, timeout=timeout, address=t.address_of("airflow"),
                enter=lambda command: network_control.enter_command(self.state_dir, "airflow",
                                                                    command),
                say=lambda text: log.info("airflow: %s", text), tls=self.airflow_tls)
        except airflow_stack.AirflowStackError as exc:
            raise LabError(f"Airflow in host airflow: {exc}") from None
        return state["url"]

    @property
    def airflow_tls(self) -> airflow_stack.AirflowTls | None:
        """A secured lab's Airflow API server on HTTPS with the certificate of
        host ``airflow`` (start_airflow, make demo's); None when open."""
        if self.security is None:
            return None
        return airflow_stack.AirflowTls(*self.security.cert_files("airflow"),
                                        self.security.ca_file)

    def airflow_url(self) -> str | None:
        """The URL of the Airflow the lab runs (start_airflow), None when none runs."""
        try:
            state = airflow_stack.read(self.path("airflow"))
        except airflow_stack.AirflowStackError:
            return None
        return state[0]["url"] if state and any(r.alive() for r in state[1]) else None

    def schema_registry_url(self, cluster: str) -> str | None:
        """The REST API of ``cluster``'s schema registry, None when the lab runs none."""
        record = self.records.get(f"registry-{cluster}")
        if record is None:
            return None
        return (f"{scheme(self.http_access)}://"
                f"{self.topology.address_of(f'{cluster}.registry')}:{record.ports['http']}")

    def start_monitoring(self, extra_jobs: tuple[prometheus.ScrapeJob, ...] = (),
                         timeout: float = 60.0) -> str:
        """Start the lag service (every cluster of the topology) and then
        Prometheus, scraping the brokers, the mirrors and schema registries
        the lab runs, the lag service and ``extra_jobs`` (services the lab
        does not run), with the repository's alert rules; each on a free
        port, waited for. In the netns runtime each in its host of the
        analysis datacenter, ``lag`` (port ``LAG_PORT``) and ``prometheus``
        (``PROMETHEUS_PORT``), Prometheus scraping every target at its
        host's address across the lab's links. Returns Prometheus's URL.
        Not in the containers runtime."""
        if self.runtime == "containers":
            raise LabError("the monitoring runs in the processes and netns runtimes only")
        if any(r.role in ("lag", "prometheus") for r in self.records.values()):
            raise LabError(f"the monitoring already runs in {self.state_dir}")
        try:
            prometheus.find("prometheus")
            prometheus.find("promtool")
        except prometheus.PrometheusError as exc:
            raise LabError(str(exc)) from None
        t = self.topology
        if self.runtime == "netns":
            lag_port, web_port = LAG_PORT, PROMETHEUS_PORT
        else:
            lag_port, web_port = free_ports(2, t.host)
        lag_host, web_host = t.address_of("lag"), t.address_of("prometheus")
        path = self.path("lag", "lag.toml")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        config = dataclasses.replace(lag_config(t, lag_port), http_host=lag_host)
        if self.security is not None:
            config = dataclasses.replace(config, credentials=self.security.credentials(LAG),
                                         http=self.security.http_security("lag"))
        with open(path, "w") as f:
            f.write(settings.to_toml(config))
        log.info("starting the lag service on %s://%s:%d/", scheme(self.http_access), lag_host,
                 lag_port)
        self._launch("lag", "lag", [self.python, "-m", "broker.lag", "--config", path],
                     {"http": lag_port})
        self._wait_ready("its /healthz (a first evaluation)", ["lag"],
                         lambda _: daemon.answers(
                             f"{scheme(self.http_access)}://{lag_host}:{lag_port}/healthz",
                             self.http_access), timeout)
        jobs = [prometheus.broker_job(t)]
        if any(r.role == "mirror" for r in self.records.values()):
            jobs.append(prometheus.mirror_job(t))
        registries = [(r.cluster, f"{t.address_of(f'{r.cluster}.registry')}:{r.ports['http']}")
                      for r in self.records.values() if r.role == "schema-registry"]
        if registries:
            jobs.append(prometheus.schema_registry_job(registries))
        jobs.append(prometheus.single_job(prometheus.LAG_JOB, f"{lag_host}:{lag_port}"))
        # the lab's own services: as its Prometheus user where the lab is secured
        scraper = None if self.security is None else self.security.http_access(HTTP_READER)
        jobs = [job.secured(scraper) for job in jobs] + list(extra_jobs)
        directory = self.path("prometheus")
        os.makedirs(os.path.join(directory, "data"), exist_ok=True)
        config = os.path.join(directory, "prometheus.yml")
        with open(config, "w") as f:
            f.write(prometheus.render(t, jobs))
        # a secured lab's: its web server on HTTPS, asking for the lab's HTTP users
        web_config = None if self.security is None else \
            self.security.write_prometheus_web_config(os.path.join(directory, "web.yml"))
        try:
            prometheus.check_config(config)
            if web_config:
                prometheus.check_web_config(web_config)
        except prometheus.PrometheusError as exc:
            raise LabError(str(exc)) from None
        url = f"{scheme(self.http_access)}://{web_host}:{web_port}"
        log.info("starting Prometheus on %s/", url)
        self._launch("prometheus", "prometheus",
                     prometheus.command(config, os.path.join(directory, "data"),
                                        f"{web_host}:{web_port}", web_config),
                     {"web": web_port}, cwd=directory)
        expected = sum(len(job.targets) for job in jobs)

        def ready(_name: str) -> bool:
            # ready answers before the first discovery: wait for every target in view
            if not daemon.answers(f"{url}/-/ready", self.http_access):
                return False
            try:
                return len(prometheus.targets(url, self.http_access)) == expected
            except prometheus.PrometheusError:
                return False

        self._wait_ready("its /-/ready and every target in its view", ["prometheus"], ready,
                         timeout)
        return url

    def prometheus_url(self) -> str | None:
        """The URL of the lab's Prometheus (HTTPS in a secured lab, asking for
        its HTTP users: http_access), None when the lab runs none."""
        record = self.records.get("prometheus")
        return (f"{scheme(self.http_access)}://{self.topology.address_of('prometheus')}:"
                f"{record.ports['web']}" if record else None)

    def _mirror_hint(self, name: str) -> str:
        if "No module named mirror.__main__" in tail(self.records[name].log, 200):
            return (" (the mirror has no command-line program yet: mirror/__main__.py is "
                    "missing; `up --no-mirrors` runs the lab without mirrors)")
        return ""

    # ---------------------------------------------------------------- down

    def down(self, purge: bool = False, timeout: float = 15.0) -> list[str]:
        """Stop every process (mirrors, then load balancers and brokers, then
        ZooKeeper; SIGTERM, SIGKILL after ``timeout``), check none is left
        (in the containers runtime, remove every container of the state
        directory, too) and remove the state file; ``purge`` also removes
        logs and data. Returns the names of the processes that were still
        running."""
        was_running = [name for name in self.records if self.alive(name)]
        airflow_error = None
        if os.path.exists(self.path("airflow", airflow_stack.STATE_FILE)):
            # Airflow (start_airflow) first: its tasks use everything else;
            # if it cannot be stopped, the rest is stopped all the same
            try:
                airflow_stack.down(self.path("airflow"), timeout=timeout,
                                   say=lambda text: log.info("airflow: %s", text))
            except (airflow_stack.AirflowStackError, OSError) as exc:
                log.error("stopping Airflow failed: %s; stopping the rest", exc)
                airflow_error = exc
        for roles in STOP_ORDER:
            names = [n for n, r in self.records.items() if r.role in roles and self._leftovers(n)]
            if names:
                log.info("stopping %s", ", ".join(names))
            left = self._stop(names, timeout)
            if left:
                raise LabError("still running after SIGKILL: " + ", ".join(
                    f"{n} (pids {self._leftovers(n)})" for n in left))
        left = [n for n in self.records if self._leftovers(n)]
        if left:
            raise LabError(f"processes of the lab are still running: {', '.join(left)}")
        if any(r.container for r in self.records.values()):
            orphans = self._remove_containers()
            if orphans:
                log.warning("removed containers whose docker client had gone: %s",
                            ", ".join(orphans))
        for name in list(self._children):
            self._children.pop(name).wait()
        if "network" in self.records:
            try:        # the keeper stopped: its files go, and the kernel frees its namespaces
                network_runner.NetworkLab(self.state_dir).down()
            except NetworkLabError as exc:
                raise LabError(str(exc)) from None
        self.records = {}
        try:
            os.remove(self.path(STATE_FILE))
        except FileNotFoundError:
            pass
        if purge:
            shutil.rmtree(self.state_dir, ignore_errors=True)
        log.info("lab %s is down (%d processes stopped)%s", self.topology.name,
                 len(was_running), "; state directory removed" if purge else "")
        if airflow_error is not None:
            raise LabError(f"the lab is down, but stopping its Airflow failed: {airflow_error}")
        return was_running

    # ---------------------------------------------------------------- faults

    def kill_broker(self, cluster: str, index: int, sig: int = signal.SIGKILL,
                    timeout: float = 30.0) -> None:
        """Send ``sig`` to broker ``index`` of ``cluster``; for SIGKILL and
        SIGTERM, wait until it has exited."""
        name = self.broker_name(cluster, index)
        if name not in self.records:
            raise LabError(f"no process {name} in the lab")
        self._signal(name, sig)
        if sig in (signal.SIGKILL, signal.SIGTERM):
            left = self._wait_gone([name], timeout)
            if left:
                raise LabError(f"{name} still runs {timeout:.0f} s after "
                               f"{signal.Signals(sig).name}")

    def restart_broker(self, cluster: str, index: int, timeout: float = 30.0) -> None:
        """Stop broker ``index`` of ``cluster`` if it runs (SIGTERM), start it
        again with the same command, data and ports, and wait until it is
        registered anew."""
        name = self.broker_name(cluster, index)
        if name not in self.records:
            raise LabError(f"no process {name} in the lab")
        if self._leftovers(name):
            self._stop([name], timeout)
        self._start_brokers(timeout, only=[(cluster, index)])

    def wipe_broker_data(self, cluster: str, index: int) -> None:
        """Delete the data directory of broker ``index`` of ``cluster`` (it
        must not run): a lost disk. Restarted, a broker of a replicated
        cluster copies its replicas back from their leaders."""
        name = self.broker_name(cluster, index)
        if name not in self.records:
            raise LabError(f"no process {name} in the lab")
        if self._leftovers(name):
            raise LabError(f"{name} still runs: stop it before deleting its data")
        shutil.rmtree(self.broker_data_dir(cluster, index), ignore_errors=True)

    def under_replicated(self, cluster: str) -> list[str]:
        """The replicated partitions of ``cluster`` that lack an in-sync
        replica or a live leader, as "topic/partition" (empty: every replica
        of every partition is in sync)."""
        with self._zookeeper(cluster=cluster) as client:
            return _under_replicated(client)

    def wait_fully_replicated(self, cluster: str, timeout: float = 120.0) -> float:
        """Wait until every replica of every replicated partition of
        ``cluster`` is in sync under a live leader (what an operator waits
        for before touching the next broker); returns the seconds waited."""
        started = time.monotonic()
        left: list[str] = []
        with self._zookeeper(cluster=cluster) as client:
            def done() -> bool:
                nonlocal left
                left = _under_replicated(client)
                return not left

            if not wait_until(done, timeout, interval=0.25):
                raise LabError(f"{cluster}: {len(left)} partition(s) still under-replicated "
                               f"or without a leader {timeout:.0f} s on: {', '.join(left[:8])}")
        return time.monotonic() - started

    def compare_replicas(self, cluster: str, timeout: float = 60.0) -> dict[str, int]:
        """Once traffic has stopped: every replicated partition of
        ``cluster``, its replicas' log files compared byte for byte (sha256
        of the bytes from offset 0 to the end, once every replica holds as
        many as its leader). Returns "topic/partition" -> bytes compared;
        raises LabError naming the partitions whose replicas differ."""
        from broker.coordination.replica_state import TopicAssignment
        with self._zookeeper(cluster=cluster) as client:
            topics = client.get_children(paths.REPLICATED_TOPICS) \
                if client.exists(paths.REPLICATED_TOPICS) else []
            assignments = {t: TopicAssignment.from_json(
                client.get(paths.replicated_topic_path(t))[0]).partitions for t in topics}
        compared, differ = {}, []
        for topic, partitions in sorted(assignments.items()):
            for p, replicas in enumerate(partitions):
                logs: dict[int, bytes] = {}

                def same_length() -> bool:      # read once per look, compared from that read
                    logs.update({b: _replica_log(self.broker_data_dir(cluster, b), topic, p)
                                 for b in replicas})
                    return len({len(d) for d in logs.values()}) == 1
                wait_until(same_length, timeout, 0.25)
                digests = {b: hashlib.sha256(d).hexdigest() for b, d in logs.items()}
                if len(set(digests.values())) != 1:
                    differ.append(f"{topic}/{p} {digests}")
                compared[f"{topic}/{p}"] = len(logs[replicas[0]])
        if differ:
            raise LabError(f"{cluster}: replicas differ: " + "; ".join(differ))
        return compared

    def kill_process(self, name: str, sig: int = signal.SIGKILL, timeout: float = 30.0) -> None:
        """Send ``sig`` to the lab's process ``name`` (e.g. a mirror process)
        and wait until it has exited."""
        if name not in self.records:
            raise LabError(f"no process {name} in the lab")
        self._signal(name, sig)
        if self._wait_gone([name], timeout):
            raise LabError(f"{name} still runs {timeout:.0f} s after {signal.Signals(sig).name}")

    def restart_process(self, name: str) -> None:
        """Start the lab's process ``name`` again with the same command (it
        must have exited)."""
        if name not in self.records:
            raise LabError(f"no process {name} in the lab")
        self._relaunch(name)

    def _zookeeper_name(self, server_id: int, cluster: str | None) -> str:
        """The process of ZooKeeper member ``server_id``: of the one ensemble,
        or (the netns runtime) of ``cluster``'s own."""
        if self.topology.network.namespaces:
            if cluster is None:
                raise LabError("every datacenter has its own ZooKeeper here: name the cluster")
            return f"{cluster}.zookeeper-{server_id}"
        return f"zookeeper-{server_id}"

    def kill_zookeeper(self, server_id: int = 1, sig: int = signal.SIGKILL,
                       timeout: float = 30.0, cluster: str | None = None) -> None:
        """Send ``sig`` to ZooKeeper member ``server_id`` (of ``cluster``'s
        ensemble in the netns runtime); for SIGKILL and SIGTERM, wait until
        it has exited."""
        name = self._zookeeper_name(server_id, cluster)
        if name not in self.records:
            raise LabError(f"no process {name} in the lab")
        self._signal(name, sig)
        if sig in (signal.SIGKILL, signal.SIGTERM) and self._wait_gone([name], timeout):
            raise LabError(f"{name} still runs {timeout:.0f} s after {signal.Signals(sig).name}")

    def restart_zookeeper(self, server_id: int = 1, timeout: float = 60.0,
                          cluster: str | None = None) -> None:
        """Start ZooKeeper member ``server_id`` (of ``cluster``'s ensemble in
        the netns runtime) again, stopping it first if it runs, with the same
        configuration and data, and wait until it serves."""
        name = self._zookeeper_name(server_id, cluster)
        if name not in self.records:
            raise LabError(f"no process {name} in the lab")
        if self._leftovers(name):
            self._stop([name], timeout)
        port = self.records[name].ports["client"]
        self._relaunch(name)
        self._wait_ready("answers ruok and serves", [name],
                         lambda _: server_mode(self.topology.address_of(name), port,
                                               tls=self.zookeeper_probe_context())
                         is not None, timeout)

    # ---------------------------------------------------------------- status

    def status(self, zookeeper_timeout: float = 3.0) -> dict[str, Any]:
        """What this lab runs and how it is doing: infra/local/status.py's
        report of it (what ``status --json`` prints)."""
        from infra.local import status     # it reads labs: imported when asked, not at the top
        return status.report(status.Environment.of_lab(self), zookeeper_timeout)

    # ---------------------------------------------------------------- context manager

    def __enter__(self) -> "Lab":
        return self.up()

    def __exit__(self, *exc) -> None:
        self.down()


def _replica_log(data_dir: str, topic: str, partition: int) -> bytes:
    """Every byte of a replica's log, from its segment files in order (the
    log of a partition that starts at offset 0: no retention ran)."""
    from broker.storage.segment import parse_segment_file_name, segment_file_name
    directory = os.path.join(data_dir, "topics", topic, str(partition))
    try:
        bases = sorted(b for b in map(parse_segment_file_name, os.listdir(directory))
                       if b is not None)
    except FileNotFoundError:
        return b""
    out = bytearray()
    for base in bases:
        with open(os.path.join(directory, segment_file_name(base)), "rb") as f:
            out += f.read()
    return bytes(out)


def _under_replicated(client) -> list[str]:
    """Replicated partitions (of the client's chroot) not fully in sync: a
    replica out of the in-sync set, no live leader, or a replica that
    registered after the state was written (a restarted broker still
    listed as in sync until the controller's next pass takes it out)."""
    from broker.coordination import replica_admin
    return [f"{p.topic}/{p.partition}" for p in replica_admin.describe(client)
            if p.under_replicated or p.unavailable or p.restarted]


def _ports_text(ports: dict[str, int]) -> str:
    return (" (" + ", ".join(f"{k} {v}" for k, v in ports.items()) + ")") if ports else ""


__all__ = ["Lab", "LabError", "ProcessRecord", "busy_ports", "free_topology"]
