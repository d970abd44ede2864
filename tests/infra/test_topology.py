"""The topology model and its file: the default lab loads, overrides move it,
and every inconsistency is refused with a message naming what is wrong."""
from __future__ import annotations

import dataclasses
import os
import textwrap

import pytest

from broker.service_kit import settings
from broker.service_kit.settings import ConfigError
from infra.topology import (ClusterSpec, LoadBalancerSpec, MirrorSpec, Topology, load_topology,
                            mirror_config, to_toml)
from broker.service_kit.settings import load
from mirror.config import MirrorConfig

DEFAULT = os.path.join(os.path.dirname(__file__), "..", "..", "infra", "local", "topology.toml")


def test_the_default_topology_loads_and_validates():
    t = load_topology(DEFAULT)
    assert [c.name for c in t.datacenters] == ["dc-a", "dc-b"]
    assert t.analysis is not None and t.analysis.name == "analysis"
    assert t.zookeeper.size == 1
    for cluster in t.clusters():
        assert cluster.brokers == 2
        assert cluster.zk_chroot == f"/{cluster.name}"
    for dc in t.datacenters:
        assert dc.load_balancer is not None and dc.load_balancer.health_check_ms == 500
    assert t.analysis.load_balancer is None
    (mirror,) = t.mirrors
    assert mirror.sources == ("dc-a", "dc-b") and mirror.target == "analysis"
    ports = [p for p, _ in t.ports()]
    assert len(ports) == len(set(ports))
    assert all(19000 <= p < 20000 for p in ports)
    # the layout documented in the file's comments
    assert t.zookeeper_connect("dc-a") == "127.0.0.1:19000/dc-a"
    assert t.lb_port("dc-a") == 19100 and t.lb_stats_port("dc-a") == 19101
    assert t.broker_ports("dc-b") == [19210, 19211]
    assert t.broker_metrics_ports("analysis") == [19350, 19351]
    assert t.mirror_metrics_ports("to-analysis") == [19400, 19401]


def test_the_default_lab_replicates_every_cluster_on_both_brokers():
    from infra.local.lab import Lab
    t = load_topology(DEFAULT)
    for cluster in t.clusters():
        assert cluster.replication_factor == 2 and cluster.replicated
        # partitions per broker of the file, in all on a replicated cluster
        assert cluster.topic_partitions() == 4
        config = cluster.broker_config(1)
        assert config.replication_factor == 2 and config.default_partitions == 4
    command = Lab(t, "/nonexistent-state").broker_command("dc-a", 0)
    assert "replication_factor=2" in command and "default_partitions=4" in command
    plain = dataclasses.replace(t.cluster("dc-b"), replication_factor=0)
    assert not plain.replicated and plain.topic_partitions() == 2
    assert plain.broker_config(0).replication_factor == 0


def test_to_toml_reads_back_equal(tmp_path):
    t = load_topology(DEFAULT, {"zookeeper.size": "3", "datacenters.dc-b.chroot": "/east"})
    path = tmp_path / "t.toml"
    path.write_text(to_toml(t))
    assert load_topology(str(path)) == t


def test_overrides_move_ports_and_reach_tables_of_arrays_by_name():
    t = load_topology(DEFAULT, {"base_port": "29000", "datacenters.dc-a.brokers": "3",
                                "mirrors.to-analysis.processes": "1",
                                "datacenters.1.load_balancer.balance": "roundrobin"})
    default = load_topology(DEFAULT)
    assert t.broker_ports("dc-a") == [29110, 29111, 29112]
    assert t.lb_port("dc-b") == default.lb_port("dc-b") + 10000
    assert t.mirror("to-analysis").processes == 1
    assert t.cluster("dc-b").load_balancer.balance == "roundrobin"
    with pytest.raises(ConfigError, match="no table named 'dc-c'"):
        load_topology(DEFAULT, {"datacenters.dc-c.brokers": "3"})
    with pytest.raises(ConfigError, match="must be an integer"):
        load_topology(DEFAULT, {"datacenters.dc-a.brokers": "many"})


def test_explicit_ports_win_over_the_layout():
    t = load_topology(DEFAULT, {"datacenters.dc-a.load_balancer.port": "9092",
                                "datacenters.dc-a.broker_port": "9100",
                                "analysis.metrics_port": "-1",
                                "datacenters.dc-b.load_balancer.stats_port": "-1"})
    assert t.lb_port("dc-a") == 9092
    assert t.broker_ports("dc-a") == [9100, 9101]
    assert t.broker_metrics_ports("analysis") == [-1, -1]
    assert t.lb_stats_port("dc-b") is None
    assert not any("analysis broker 0 metrics" == what for _, what in t.ports())


BASE = """
    [[datacenters]]
    name = "dc-a"
    [datacenters.load_balancer]
    [[datacenters]]
    name = "dc-b"
    [datacenters.load_balancer]
    [analysis]
    name = "analysis"
"""


@pytest.mark.parametrize("extra, message", [
    ("", None),
    ("[[mirrors]]\nname = 'm'\nsources = ['dc-a', 'nowhere']\ntarget = 'analysis'",
     "mirror 'm': no cluster named 'nowhere'"),
    ("[[mirrors]]\nname = 'm'\nsources = ['dc-a']\ntarget = 'elsewhere'",
     "no cluster named 'elsewhere'"),
    ("[[mirrors]]\nname = 'm'\nsources = ['dc-a', 'analysis']\ntarget = 'analysis'",
     "target 'analysis' is also a source"),
    ("[[mirrors]]\nname = 'm'\nsources = []\ntarget = 'analysis'",
     "sources must name at least one cluster"),
    ("[[mirrors]]\nname = 'm'\nsources = ['dc-a', 'dc-a']\ntarget = 'analysis'",
     "a source is named twice"),
    ("[[mirrors]]\nname = 'm'\nsources = ['dc-a']\ntarget = 'analysis'\nwhitelist = '(unclosed'",
     "bad whitelist"),
    ("[[mirrors]]\nname = 'm'\nsources = ['dc-a']\ntarget = 'analysis'\n"
     "[[mirrors]]\nname = 'back'\nsources = ['analysis']\ntarget = 'dc-a'",
     "the mirrors form a loop: analysis -> dc-a -> analysis"),
    ("[[mirrors]]\nname = 'm'\nsources = ['dc-a']\ntarget = 'analysis'\n"
     "[[mirrors]]\nname = 'm'\nsources = ['dc-b']\ntarget = 'analysis'",
     "mirror name 'm' is used twice"),
    ("[[mirrors]]\nname = 'm1'\nsources = ['dc-a']\ntarget = 'analysis'\ngroup = 'g'\n"
     "[[mirrors]]\nname = 'm2'\nsources = ['dc-a']\ntarget = 'dc-b'\ngroup = 'g'",
     "use the same group 'g' in 'dc-a'"),
    ("[[mirrors]]\nname = 'm'\nsources = ['dc-a']\ntarget = 'analysis'\n"
     "settings = ['group=other']", "group come from the topology"),
    ("[[mirrors]]\nname = 'm'\nsources = ['dc-a']\ntarget = 'analysis'\n"
     "settings = ['batch_size=0']", "batch_size must be >= 1"),
    ("[[mirrors]]\nname = 'm'\nsources = ['dc-a']\ntarget = 'analysis'\n"
     "settings = ['no_such_setting=1']", "unknown setting 'no_such_setting'"),
])
def test_mirror_checks(tmp_path, extra, message):
    path = tmp_path / "t.toml"
    path.write_text(textwrap.dedent(BASE) + extra + "\n")
    if message is None:
        load_topology(str(path))
        return
    with pytest.raises(ConfigError) as info:
        load_topology(str(path))
    assert message in str(info.value)


@pytest.mark.parametrize("overrides, message", [
    ({"datacenters.dc-b.name": "dc-a"}, "cluster name 'dc-a' is used twice"),
    ({"analysis.chroot": "/dc-a"}, "ZooKeeper chroot '/dc-a' is used twice"),
    ({"datacenters.dc-a.chroot": "dc-a"}, "chroot 'dc-a' must be a path"),
    ({"datacenters.dc-a.name": "dc a"}, "cluster name 'dc a'"),
    ({"datacenters.dc-a.brokers": "0"}, "brokers must be 1..1000"),
    ({"zookeeper.size": "2"}, "zookeeper.size must be odd"),
    ({"datacenters.dc-a.load_balancer.port": "19111"},
     "port 19111 is taken twice: by dc-a broker 1 and by dc-a load balancer"),
    ({"analysis.broker_port": "19000"}, "port 19000 is taken twice"),
    ({"base_port": "65500"}, "is out of range"),
    ({"datacenters.dc-a.load_balancer.balance": "random"}, "leastconn or roundrobin"),
    ({"datacenters.dc-a.load_balancer.client_timeout_ms": "30000"},
     "client_timeout_ms (30000) must exceed the brokers' max_fetch_wait_ms (30000)"),
    ({"datacenters.dc-a.broker_settings": "max_fetch_wait_ms=70000"},
     "must exceed the brokers' max_fetch_wait_ms (70000)"),
    ({"datacenters.dc-a.broker_settings": "port=9092"}, "port come from the topology"),
    ({"datacenters.dc-a.broker_settings": "log.flush_ms"}, "--set wants KEY=VALUE"),
    ({"datacenters.dc-a.broker_settings": "log.nope=1"}, "unknown setting 'log.nope'"),
    ({"datacenters.dc-a.broker_settings": "log.flush_ms=-5"}, "flush.ms must be >= 0"),
    ({"datacenters.dc-a.default_partitions": "0"}, "default_partitions must be 1..10000"),
    ({"datacenters.dc-a.replication_factor": "3"},
     "replication_factor must be 0..brokers (2), not 3"),
    ({"datacenters.dc-a.broker_settings": "replication_factor=2"},
     "replication_factor come from the topology"),
    ({"datacenters.dc-a.metrics_port": "-2"}, "metrics_port must be -1 (off)"),
    ({"datacenters.dc-a.lb_port": "1"}, "unknown setting 'datacenters[0].lb_port'"),
    ({"lab_name": "x"}, "unknown setting 'lab_name'"),
])
def test_cluster_and_port_checks(tmp_path, overrides, message):
    path = tmp_path / "t.toml"
    path.write_text(textwrap.dedent(BASE))
    with pytest.raises(ConfigError) as info:
        load_topology(str(path), overrides)
    assert message in str(info.value)


def test_a_datacenter_needs_a_load_balancer_and_there_is_one_datacenter_at_least():
    with pytest.raises(ConfigError, match="datacenter 'dc-a' has no load balancer"):
        Topology(datacenters=(ClusterSpec("dc-a"),))
    with pytest.raises(ConfigError, match="at least one"):
        Topology(datacenters=(), analysis=ClusterSpec("analysis"))
    # the analysis cluster may do without one
    Topology(datacenters=(ClusterSpec("dc-a", load_balancer=LoadBalancerSpec()),),
             analysis=ClusterSpec("analysis"))


def test_mirror_config_is_what_the_mirror_reads(tmp_path):
    t = load_topology(DEFAULT, {"base_port": "21000",
                                "mirrors.to-analysis.settings": "batch_size=500"})
    configs = [mirror_config(t, "to-analysis", i) for i in range(2)]
    for i, config in enumerate(configs):
        assert [(s.name, s.zookeeper) for s in config.sources] == [
            ("dc-a", "127.0.0.1:21000/dc-a"), ("dc-b", "127.0.0.1:21000/dc-b")]
        assert (config.target.name, config.target.zookeeper) == (
            "analysis", "127.0.0.1:21000/analysis")
        assert config.group == "mirror-to-analysis"
        assert config.metrics_port == 21400 + i
        assert config.batch_size == 500 and config.target_partitions == 2
        # the file the lab writes for the process reads back the same
        path = tmp_path / f"m{i}.toml"
        path.write_text(settings.to_toml(config))
        assert load(MirrorConfig, str(path)) == config
    with pytest.raises(ConfigError, match="processes 0..1, not 2"):
        mirror_config(t, "to-analysis", 2)


def test_models_are_frozen_and_replace_revalidates():
    t = load_topology(DEFAULT)
    with pytest.raises(dataclasses.FrozenInstanceError):
        t.base_port = 1
    with pytest.raises(ConfigError, match="out of range"):
        dataclasses.replace(t, base_port=65400)
    spec = MirrorSpec("m", sources=("dc-a",), target="analysis")
    assert spec.mirror_group == "mirror-m"
