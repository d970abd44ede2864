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


def test_a_secured_stats_page_is_https_with_users_and_haproxy_accepts_it(tmp_path):
    """The secured lab's stats page: ``bind ... ssl crt`` with the load
    balancer's certificate and key in one file, read-only, a user asked for;
    haproxy -c loads the certificate."""
    from infra.local.lab_security import LabSecurity
    t = load_topology(DEFAULT)
    security = LabSecurity(str(tmp_path / "security")).prepare(t)
    stats = security.stats_security("dc-a.haproxy")
    with open(stats.pem_file) as f:
        pem = f.read()
    assert "BEGIN CERTIFICATE" in pem and "PRIVATE KEY" in pem
    assert os.stat(stats.pem_file).st_mode & 0o077 == 0
    assert [user for user, _ in stats.users] == ["prometheus", "airflow", "admin"]
    text = haproxy.render(t, "dc-a", stats)
    path = tmp_path / "haproxy.cfg"
    path.write_text(text)
    haproxy.check_config(str(path))
    assert f"bind 127.0.0.1:{t.lb_stats_port('dc-a')} ssl crt {stats.pem_file}" in text
    assert all(f"stats auth {user}:{password}" in text for user, password in stats.users)
    assert "stats admin" not in text                     # read-only


@pytest.mark.parametrize("users, complaint", [
    ((), "at least one user"),
    ((("admin", "pass word"),), "without spaces"),
    ((("ad:min", "x"),), "without spaces"),
])
def test_stats_users_haproxy_could_misread_are_refused(users, complaint):
    with pytest.raises(ValueError, match=complaint):
        haproxy.StatsSecurity("/lab/certs/dc-a.haproxy.pem", users)


def test_a_check_under_way_is_read_apart_from_its_last_result():
    # HAProxy prefixes check_status with "* " while a check runs: a DOWN
    # broker read mid-check must still say its last check timed out
    rows = [{"pxname": "dc-a", "svname": "FRONTEND", "status": "OPEN"},
            {"pxname": "dc-a-brokers", "svname": "broker-0", "addr": "10.0.0.1:9092",
             "status": "DOWN", "check_status": "* L4TOUT", "scur": "1", "stot": "7"},
            {"pxname": "dc-a-brokers", "svname": "broker-1", "addr": "10.0.0.2:9092",
             "status": "UP", "check_status": "L4OK", "scur": "", "stot": "3"},
            {"pxname": "dc-a-brokers", "svname": "BACKEND", "status": "UP"},
            {"pxname": "dc-b-brokers", "svname": "broker-0", "status": "UP",
             "check_status": "L4OK"}]
    assert haproxy.servers_in_stats(rows, "dc-a") == [
        {"server": "broker-0", "address": "10.0.0.1:9092", "status": "DOWN",
         "check": "L4TOUT", "checking": True, "sessions": 1, "total": 7},
        {"server": "broker-1", "address": "10.0.0.2:9092", "status": "UP",
         "check": "L4OK", "checking": False, "sessions": 0, "total": 3}]
