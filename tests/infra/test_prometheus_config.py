"""The alert rules and the lab's Prometheus configuration, checked by the real
promtool (Debian's prometheus package: scripts/ensure-system-packages.sh):
the rules load, each fires on the series it is written for and not on the
others (promtool test rules), every metric they name is one a Samsa service
serves, and the configuration rendered for the default lab with every job
passes `promtool check config` (which loads the rules it names, too)."""
from __future__ import annotations

import json
import os
import re

import pytest

from audit.compare import LOSING, STATES
from broker.lag.evaluator import Status
from broker.service_kit.settings import ConfigError
from infra.local import prometheus
from infra.local.lab import DEFAULT_TOPOLOGY, SOURCE_ROOT
from infra.topology import MonitoringSpec, lag_config, load_topology

RULES_TEST = os.path.join(os.path.dirname(prometheus.ALERT_RULES), "alerts_test.yml")
ALERTS = ("SamsaConsumerGroupStopped", "SamsaMirrorLagging", "SamsaAuditWindowLost",
          "SamsaAuditStoreFailing",
          "SamsaBrokerDown", "SamsaBrokerDiskNearlyFull", "SamsaServiceDown")


def _rules_text() -> str:
    with open(prometheus.ALERT_RULES) as f:
        return f.read()


def test_the_alert_rules_load_in_promtool():
    out = prometheus.promtool("check", "rules", prometheus.ALERT_RULES)
    assert f"SUCCESS: {len(ALERTS)} rules found" in out, out
    assert re.findall(r"- alert: (\w+)", _rules_text()) == list(ALERTS)


def test_each_alert_fires_on_its_series_and_no_other():
    out = prometheus.promtool("test", "rules", RULES_TEST)
    assert "SUCCESS" in out, out
    with open(RULES_TEST) as f:
        tested = set(re.findall(r"alertname: (\w+)", f.read()))
    assert tested == set(ALERTS)


def test_every_metric_the_rules_name_is_served_by_a_service():
    names = set(re.findall(r"\bsamsa_[a-z_]+", _rules_text()))
    sources = []
    for package in ("broker", "mirror", "audit"):
        for root, _dirs, files in os.walk(os.path.join(SOURCE_ROOT, package)):
            for name in files:
                if name.endswith(".py"):
                    with open(os.path.join(root, name)) as f:
                        sources.append(f.read())
    code = "\n".join(sources)
    # every family is made as XMetricFamily("samsa_...", ...): its name quoted
    # (a counter's without the _total its samples add)
    unserved = sorted(n for n in names
                      if f'"{n}"' not in code and f'"{n.removesuffix("_total")}"' not in code)
    assert names and not unserved, unserved
    text = _rules_text()
    # the numbers and states the rules compare with are the services' own
    assert f"samsa_group_status == {int(Status.STOP)}" in text
    states = re.search(r'samsa_audit_windows\{state=~"([^"]+)"\}', text).group(1).split("|")
    assert set(states) == set(LOSING) and set(states) <= set(STATES)
    jobs = set(re.findall(r'job(?:=~?)"([^"]+)"', text))
    jobs = {j for pattern in jobs for j in pattern.split("|")}
    assert jobs == {prometheus.BROKER_JOB, prometheus.MIRROR_JOB, prometheus.LAG_JOB,
                    prometheus.AUDIT_JOB, prometheus.AUDIT_COUNTER_JOB,
                    prometheus.SCHEMA_REGISTRY_JOB}


def test_the_config_of_the_default_lab_passes_promtool(tmp_path):
    topology = load_topology(DEFAULT_TOPOLOGY)
    jobs = [prometheus.broker_job(topology), prometheus.mirror_job(topology),
            prometheus.single_job(prometheus.LAG_JOB, "127.0.0.1:18091"),
            prometheus.single_job(prometheus.AUDIT_JOB, "127.0.0.1:19500"),
            prometheus.audit_counter_job([("dc-a", "127.0.0.1:19510")]),
            prometheus.schema_registry_job([("analysis", "127.0.0.1:19520")])]
    text = prometheus.render(topology, jobs)
    path = tmp_path / "prometheus.yml"
    path.write_text(text)
    out = prometheus.check_config(str(path))
    assert "SUCCESS" in out and prometheus.ALERT_RULES in out, out
    assert "  scrape_interval: 5s\n" in text and "  evaluation_interval: 5s\n" in text
    # every broker and mirror process of the topology, with its labels
    brokers = [(c.name, i, port) for c in topology.clusters()
               for i, port in enumerate(topology.broker_metrics_ports(c.name))]
    assert len(brokers) == 6
    for cluster, i, port in brokers:
        assert (f'      - targets: ["127.0.0.1:{port}"]\n'
                f'        labels: {{"cluster": "{cluster}", "broker": "{i}"}}\n') in text
    for i, port in enumerate(topology.mirror_metrics_ports("to-analysis")):
        assert f'"127.0.0.1:{port}"]\n        labels: {{"mirror": "to-analysis", ' \
               f'"process": "{i}"}}' in text
    assert text.count("  - job_name: ") == len(jobs)


def test_a_job_without_targets_is_left_out():
    topology = load_topology(DEFAULT_TOPOLOGY, {"mirrors.to-analysis.metrics_port": "-1"})
    text = prometheus.render(topology, [prometheus.broker_job(topology),
                                        prometheus.mirror_job(topology)])
    assert '"samsa-broker"' in text and '"samsa-mirror"' not in text


@pytest.mark.parametrize("seconds, text", [(5, "5s"), (0.5, "500ms"), (1.25, "1250ms"),
                                           (60, "60s")])
def test_durations(seconds, text):
    assert prometheus.duration(seconds) == text


def test_monitoring_settings_are_checked_when_the_topology_is_built():
    with pytest.raises(ConfigError, match="monitoring.scrape_interval_s must be 0.1..3600"):
        MonitoringSpec(scrape_interval_s=0)
    with pytest.raises(ConfigError, match="http_port come from the topology"):
        MonitoringSpec(lag_settings=("http_port=1",))
    with pytest.raises(ConfigError, match="monitoring: .*stop_min_ms"):
        load_topology(DEFAULT_TOPOLOGY, {"monitoring.lag_settings": "stop_min_ms=soon"})
    topology = load_topology(DEFAULT_TOPOLOGY, {"monitoring.lag_settings": "stop_min_ms=30000",
                                                "monitoring.scrape_interval_s": "2"})
    config = lag_config(topology, 18091)
    assert config.stop_min_ms == 30_000 and config.http_port == 18091
    assert [c.name for c in config.clusters] == ["dc-a", "dc-b", "analysis"]
    assert config.clusters[0].zookeeper == topology.zookeeper_connect("dc-a")
    assert "  scrape_interval: 2s\n" in prometheus.render(topology, [])


def test_a_secured_labs_web_config_passes_promtool_and_holds_bcrypt_hashes(tmp_path):
    """Prometheus's own web server in a secured lab: HTTPS with the
    certificate of host ``prometheus``, the lab's HTTP users by bcrypt hashes
    of their passwords (never the passwords); the command names the file."""
    import bcrypt

    from broker.security.password_file import read_password_file
    from infra.local.lab_security import HTTP_USERS, LabSecurity
    security = LabSecurity(str(tmp_path / "security")).prepare(load_topology(DEFAULT_TOPOLOGY))
    path = security.write_prometheus_web_config(str(tmp_path / "web.yml"))
    prometheus.check_web_config(path)
    text = open(path).read()
    assert os.stat(path).st_mode & 0o077 == 0
    cert, key = security.cert_files("prometheus")
    assert f"cert_file: {json.dumps(cert)}" in text and f"key_file: {json.dumps(key)}" in text
    hashes = dict(re.findall(r'^  "(\w+)": "(\$2b\$[^"]+)"$', text, re.MULTILINE))
    assert sorted(hashes) == sorted(user for user, _ in HTTP_USERS)
    for user, hashed in hashes.items():
        password = read_password_file(security.http_password_file(user))
        assert password not in text
        assert bcrypt.checkpw(password.encode(), hashed.encode())
    assert prometheus.command("p.yml", "data", "127.0.0.1:9090", path)[-1] == \
        f"--web.config.file={path}"
    assert not any(a.startswith("--web.config.file")
                   for a in prometheus.command("p.yml", "data", "127.0.0.1:9090"))
