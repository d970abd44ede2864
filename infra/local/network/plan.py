"""The network lab's plan: which hosts exist, in which datacenter, at which
address, and what each WAN link adds. Pure: computed from a topology, no
command run (fabric.py builds it; keeper.py keeps it).

Addressing (``network.subnet``, default 10.77.0.0/16, split into /24s):

* the 0th /24 is the *management* network: the router at .1, the lab's own
  command (the root network namespace) at .2, so that the lab can start,
  watch and drive every host without crossing a WAN link;
* the c-th cluster (``Topology.clusters()`` order: datacenters, then
  analysis) is the datacenter of the (c+1)-th /24: its router at .1, its
  hosts from .10 on, in the order below.

Hosts of a datacenter (``Topology.network_hosts``), each a network
namespace of its own, named as the lab names its processes:

* ``<cluster>.zookeeper-<i>`` for i in 1..zookeeper.size: each datacenter
  has its own ZooKeeper ensemble (a datacenter keeps working while cut off);
* ``<cluster>.broker-<i>`` for each broker;
* ``<cluster>.haproxy`` when the cluster has a load balancer;
* ``<cluster>.client``: where producers, consumers and tools of that
  datacenter run (the drills' traffic, tests);
* in the datacenter of a mirror's target: ``<mirror>.mirror-<i>``;
* in the analysis datacenter (the first datacenter without one): the
  pipeline's services ``audit``, ``airflow``, ``lag``, ``prometheus``.

Interface names (at most 15 characters): in the router, ``br<c>`` the
bridge of datacenter c, ``v<c>h<h>`` the router's end of host h's cable,
``wan0`` the TUN device of the delayer, ``mgmt0`` the management cable;
inside a host, ``eth0``; in the root namespace, ``samsa<lab id>`` (the
management cable's other end, the only name the lab puts there; it goes
with the router).
"""
from __future__ import annotations

import hashlib
import ipaddress
from dataclasses import dataclass

from infra.local.network.shaping import LinkShape
from infra.topology import Topology

@dataclass(frozen=True)
class Datacenter:
    name: str
    index: int                       # c + 1: its /24's number and its bridge br<index>
    subnet: ipaddress.IPv4Network
    gateway: ipaddress.IPv4Address   # the router's address on its bridge

    @property
    def bridge(self) -> str:
        return f"br{self.index}"


@dataclass(frozen=True)
class Host:
    name: str
    datacenter: str
    address: ipaddress.IPv4Address
    role: str                         # zookeeper, broker, haproxy, client, mirror, or a service
    cable: str                        # the router's end of its veth pair


@dataclass(frozen=True)
class NetworkPlan:
    lab_id: str                       # 6 hex digits of the state directory's path
    subnet: ipaddress.IPv4Network
    mtu: int
    management: ipaddress.IPv4Network
    datacenters: tuple[Datacenter, ...]
    hosts: tuple[Host, ...]
    links: tuple[tuple[str, str, LinkShape], ...]   # (from, to, shape): one per direction
    tcp_buffer_max: int = 0           # each host's tcp_rmem/tcp_wmem maximum (0: the machine's)

    @property
    def router_address(self) -> ipaddress.IPv4Address:
        return self.management.network_address + 1

    @property
    def root_address(self) -> ipaddress.IPv4Address:
        return self.management.network_address + 2

    @property
    def root_cable(self) -> str:
        return f"samsa{self.lab_id}"

    def host(self, name: str) -> Host:
        for host in self.hosts:
            if host.name == name:
                return host
        raise KeyError(f"no host named {name!r} in the network lab (hosts: "
                       f"{', '.join(h.name for h in self.hosts)})")

    def datacenter(self, name: str) -> Datacenter:
        for dc in self.datacenters:
            if dc.name == name:
                return dc
        raise KeyError(f"no datacenter named {name!r} (datacenters: "
                       f"{', '.join(d.name for d in self.datacenters)})")

    def datacenter_of(self, address: ipaddress.IPv4Address) -> Datacenter | None:
        for dc in self.datacenters:
            if address in dc.subnet:
                return dc
        return None

    def hosts_in(self, datacenter: str, role: str | None = None) -> list[Host]:
        return [h for h in self.hosts
                if h.datacenter == datacenter and (role is None or h.role == role)]


def lab_id(state_dir: str) -> str:
    return hashlib.sha256(state_dir.encode()).hexdigest()[:6]


def plan_network(topology: Topology, state_dir: str) -> NetworkPlan:
    """The plan of ``topology``'s network lab kept in ``state_dir``."""
    spec = topology.network
    subnet = ipaddress.IPv4Network(spec.subnet)
    slash24 = list(subnet.subnets(new_prefix=24))
    datacenters = tuple(Datacenter(c.name, i + 1, slash24[i + 1],
                                   slash24[i + 1].network_address + 1)
                        for i, c in enumerate(topology.clusters()))
    index = {dc.name: dc.index for dc in datacenters}
    hosts, seen = [], {dc.name: 0 for dc in datacenters}
    for host in topology.network_hosts():
        hosts.append(Host(host.name, host.cluster, ipaddress.IPv4Address(host.address),
                          host.role, f"v{index[host.cluster]}h{seen[host.cluster]}"))
        seen[host.cluster] += 1
    links = []
    for link in spec.links:
        a, b = link.between
        shape = LinkShape(rtt_ms=link.rtt_ms, jitter_ms=link.jitter_ms, loss=link.loss,
                          rate_mbit=link.rate_mbit)
        links += [(a, b, shape), (b, a, shape)]
    return NetworkPlan(lab_id(state_dir), subnet, spec.mtu, slash24[0], datacenters,
                       tuple(hosts), tuple(links), spec.tcp_buffer_max_bytes)
