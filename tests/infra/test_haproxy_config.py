"""The HAProxy configuration rendered from a topology is accepted by the real
``haproxy -c`` and says what the lab relies on (health checks, redispatch,
timeouts above the longest long-poll)."""
from __future__ import annotations

import os
import re

import pytest

from infra.local import haproxy
from infra.topology import load_topology

DEFAULT = os.path.join(os.path.dirname(__file__), "..", "..", "infra", "local", "topology.toml")


def _ms(text: str, directive: str) -> int:
    return int(re.search(rf"^\s*{directive} (\d+)ms$", text, re.MULTILINE).group(1))


@pytest.mark.parametrize("cluster", ["dc-a", "dc-b"])
def test_the_default_topology_renders_configs_haproxy_accepts(tmp_path, cluster):
    t = load_topology(DEFAULT)
    text = haproxy.render(t, cluster)
    path = tmp_path / "haproxy.cfg"
    path.write_text(text)
    haproxy.check_config(str(path))

    assert "mode tcp" in text
    assert f"bind 127.0.0.1:{t.lb_port(cluster)}" in text
    for i, port in enumerate(t.broker_ports(cluster)):
        assert f"server {haproxy.server_name(i)} 127.0.0.1:{port}" in text
    assert "check inter 500ms fall 2 rise 2" in text
    assert "on-marked-down shutdown-sessions" in text
    assert "option redispatch" in text and "retries 3" in text
    assert "balance leastconn" in text
    # long-poll fetches wait up to 30 s: nothing may cut them before
    assert _ms(text, "timeout client") > 30_000 and _ms(text, "timeout server") > 30_000
    assert f"bind 127.0.0.1:{t.lb_stats_port(cluster)}" in text
    assert "stats socket unix@haproxy.sock" in text


def test_settings_of_the_topology_reach_the_config(tmp_path):
    t = load_topology(DEFAULT, {
        "datacenters.dc-a.load_balancer.balance": "roundrobin",
        "datacenters.dc-a.load_balancer.health_check_ms": "250",
        "datacenters.dc-a.load_balancer.fall": "3",
        "datacenters.dc-a.load_balancer.rise": "1",
        "datacenters.dc-a.load_balancer.stats_port": "-1",
        "datacenters.dc-a.brokers": "5"})
    text = haproxy.render(t, "dc-a")
    path = tmp_path / "haproxy.cfg"
    path.write_text(text)
    haproxy.check_config(str(path))
    assert "balance roundrobin" in text
    assert "check inter 250ms fall 3 rise 1" in text
    assert "listen stats" not in text
    assert len(re.findall(r"^\s*server broker-\d ", text, re.MULTILINE)) == 5


def test_check_config_reports_what_haproxy_refuses(tmp_path):
    t = load_topology(DEFAULT)
    path = tmp_path / "haproxy.cfg"
    path.write_text(haproxy.render(t, "dc-a").replace("balance leastconn", "balance sideways"))
    with pytest.raises(haproxy.HAProxyError) as info:
        haproxy.check_config(str(path))
    assert "balance only supports" in str(info.value)     # haproxy's own words, with the line


def test_a_cluster_without_a_load_balancer_has_no_config():
    with pytest.raises(ValueError, match="no load balancer"):
        haproxy.render(load_topology(DEFAULT), "analysis")
