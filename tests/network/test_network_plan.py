"""The network lab's plan (infra/local/network/plan.py) and the topology's
[network] table (infra/topology.py)."""
from __future__ import annotations

import ipaddress

import pytest

from broker.service_kit.settings import ConfigError
from infra.local.lab import DEFAULT_TOPOLOGY
from infra.local.network.plan import plan_network
from infra.topology import load_topology

LINKS = {"network.links": [{"between": ["dc-a", "analysis"], "rtt_ms": 40, "loss": 0.001}]}


def topology(**overrides):
    return load_topology(DEFAULT_TOPOLOGY, overrides)


def test_every_host_of_the_lab_has_an_address_in_its_datacenters_slash_24():
    plan = plan_network(topology(**LINKS), "/tmp/some-lab")
    assert [dc.name for dc in plan.datacenters] == ["dc-a", "dc-b", "analysis"]
    assert [str(dc.subnet) for dc in plan.datacenters] == \
        ["10.77.1.0/24", "10.77.2.0/24", "10.77.3.0/24"]
    names = [h.name for h in plan.hosts]
    assert len(set(names)) == len(names)
    assert len({h.address for h in plan.hosts}) == len(plan.hosts)
    for host in plan.hosts:
        assert host.address in plan.datacenter(host.datacenter).subnet
        assert len(host.cable) <= 15
    assert {h.name for h in plan.hosts_in("dc-a")} == {
        "dc-a.zookeeper-1", "dc-a.broker-0", "dc-a.broker-1", "dc-a.haproxy", "dc-a.client",
        "dc-a.registry"}
    assert {h.role for h in plan.hosts_in("analysis")} >= {"mirror", "audit", "airflow",
                                                           "zookeeper", "broker", "client",
                                                           "registry"}
    # each datacenter's registry comes last: the hosts before keep their addresses
    assert [h.name for h in plan.hosts_in("dc-a")][-1] == "dc-a.registry"
    assert str(plan.host("dc-a.client").address) == "10.77.1.14"
    assert plan.root_address == ipaddress.IPv4Address("10.77.0.2")
    assert len(plan.root_cable) <= 15


def test_links_are_shaped_both_ways_and_unlisted_ones_add_nothing():
    plan = plan_network(topology(**LINKS), "/tmp/some-lab")
    shaped = {(a, b): s for a, b, s in plan.links}
    assert set(shaped) == {("dc-a", "analysis"), ("analysis", "dc-a")}
    assert shaped[("dc-a", "analysis")].rtt_ms == 40
    assert shaped[("analysis", "dc-a")].loss == 0.001


def test_two_state_directories_get_two_cable_names():
    t = topology()
    assert plan_network(t, "/tmp/a").root_cable != plan_network(t, "/tmp/b").root_cable


@pytest.mark.parametrize("overrides, message", [
    ({"network.subnet": "8.8.0.0/16"}, "private"),
    ({"network.subnet": "10.0.0.0/8"}, "/16 to /20"),
    ({"network.subnet": "nonsense"}, "network.subnet"),
    ({"network.mtu": "100"}, "mtu"),
    ({"network.links": [{"between": ["dc-a", "nowhere"]}]}, "no cluster named 'nowhere'"),
    ({"network.links": [{"between": ["dc-a", "dc-a"]}]}, "two different clusters"),
    ({"network.links": [{"between": ["dc-a", "dc-b"], "loss": 2}]}, "loss"),
    ({"network.links": [{"between": ["dc-a", "dc-b"]}, {"between": ["dc-b", "dc-a"]}]},
     "used twice"),
])
def test_a_bad_network_table_is_refused_with_the_reason(overrides, message):
    with pytest.raises(ConfigError, match=message):
        topology(**overrides)
