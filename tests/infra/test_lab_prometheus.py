"""The lab's monitoring for real (infra/local/prometheus.py, Lab.start_monitoring):
a lab of one broker behind HAProxy with its lag service and Debian's
Prometheus, which scrapes them and evaluates the repository's alert rules
(infra/prometheus/alerts.yml). A consumer group commits and then stops
consuming while a producer goes on: the lag service calls it STOP, and
Prometheus's API shows SamsaConsumerGroupStopped firing for that group; the
lab's status shows Prometheus and the alert; down leaves nothing running.

The intervals are the lab's, shortened by the topology's [monitoring] table
(scrape and evaluation every second, the lag service every 0.5 s, STOP after
2 s without a commit), not by other rules: the rule file is the shipped one."""
from __future__ import annotations

import dataclasses
import json
import time
import urllib.request

from broker.client.group_consumer import GroupConsumer
from broker.client.producer import Producer
from broker_helpers import wait_until
from infra.local import prometheus
from infra.local.status import render
from infra.topology import MonitoringSpec
from lab_helpers import processes_mentioning, small_topology

TOPIC = "page-views"
GROUP = "report-builder"
MONITORING = MonitoringSpec(scrape_interval_s=1.0, evaluation_interval_s=1.0,
                            lag_settings=("interval_s=0.5", "stop_min_ms=2000"))


def _firing(url: str, alertname: str, **labels: str) -> dict | None:
    for alert in prometheus.alerts(url):
        got = alert["labels"]
        if got.get("alertname") == alertname and alert["state"] == "firing" and \
                all(got.get(k) == v for k, v in labels.items()):
            return alert
    return None


def test_a_stopped_group_fires_its_alert_in_the_labs_prometheus(make_lab):
    started = time.monotonic()
    topology = dataclasses.replace(small_topology(dc_brokers=1, analysis_brokers=0),
                                   monitoring=MONITORING)
    lab = make_lab(topology)
    lab.up(timeout=60, monitoring=True)
    url = lab.prometheus_url()
    t = lab.topology
    lag_address = f"{t.host}:{lab.records['lag'].ports['http']}"
    broker_address = f"{t.host}:{t.broker_metrics_ports('dc-a')[0]}"
    registry_address = f"{t.host}:{lab.records['registry-dc-a'].ports['http']}"

    # Prometheus scrapes what the lab runs, with the labels the rules use
    def every_target_up() -> bool:
        found = prometheus.targets(url)       # empty until its discovery has run
        return len(found) == 3 and all(x["health"] == "up" for x in found)
    wait_until(every_target_up, 30, interval=0.2,
               what=lambda: f"every target up: {prometheus.targets(url)}")
    found = {(x["labels"]["job"], x["labels"]["instance"]): x["labels"]
             for x in prometheus.targets(url)}
    assert set(found) == {("samsa-broker", broker_address), ("samsa-lag", lag_address),
                          ("samsa-schema-registry", registry_address)}
    assert found[("samsa-broker", broker_address)]["cluster"] == "dc-a"
    assert found[("samsa-broker", broker_address)]["broker"] == "0"
    rules = prometheus.api(url, "/api/v1/rules")["groups"]
    assert rules[0]["file"] == prometheus.ALERT_RULES
    assert "SamsaConsumerGroupStopped" in {r["name"] for r in rules[0]["rules"]}
    assert _firing(url, "SamsaConsumerGroupStopped") is None

    # a group consumes a little, commits, and stops; the producer goes on
    producer = Producer(bootstrap=lab.lb_address("dc-a"), acks="flushed")
    try:
        for i in range(300):
            producer.send(TOPIC, b"view %05d " % i + b"x" * 90)
        producer.flush(60)
        consumer = GroupConsumer(zookeeper=lab.zookeeper_connect("dc-a"), group=GROUP,
                                 topics=(TOPIC,), consumer_id="stopper", auto_commit=False,
                                 fetch_max_bytes=2048)
        try:
            taken = []
            wait_until(lambda: taken.extend(consumer.poll(500)) or taken, 30,
                       what="a first chunk for the group")
            consumer.commit()
        finally:
            consumer.close()
        stopped = time.monotonic()
        sent = 300

        def alert_fires() -> dict | None:
            nonlocal sent
            producer.send(TOPIC, b"view %05d " % sent + b"x" * 90)
            sent += 1
            return _firing(url, "SamsaConsumerGroupStopped", group=GROUP)

        alert = wait_until(alert_fires, 60, interval=0.25,
                           what=lambda: f"the alert firing: {prometheus.alerts(url)}")
        fired_after = time.monotonic() - stopped
        producer.flush(60)
    finally:
        producer.close()
    assert alert["labels"]["cluster"] == "dc-a" and alert["labels"]["severity"] == "page"
    assert alert["labels"]["job"] == "samsa-lag"
    assert alert["labels"]["instance"] == lag_address
    assert GROUP in alert["annotations"]["summary"]
    # not before the lag service's 2 s without a commit
    assert fired_after >= 2.0, fired_after

    # the lag service agrees, and it had the group's commit
    with urllib.request.urlopen(f"http://{lag_address}/v3/kafka/dc-a/consumer/{GROUP}/lag",
                                timeout=10) as r:
        status = json.load(r)["status"]
    # Burrow's group status folds STOP into ERR; worst_status keeps it
    assert status["status"] == "ERR" and status["worst_status"] == "STOP"
    assert status["totallag"] > 0
    assert any(p["committed"] is not None for p in status["partitions"]), status

    # the lab's status shows Prometheus, its targets and the alert
    report = lab.status()
    assert report["prometheus"]["url"] == url
    assert report["prometheus"]["targets_up"] == report["prometheus"]["targets"] == 3
    mine = [a for a in report["prometheus"]["alerts"] if a["labels"].get("group") == GROUP]
    assert [(a["name"], a["state"]) for a in mine] == [("SamsaConsumerGroupStopped", "firing")]
    text = render(report)
    assert f"prometheus {url}/" in text and "FIRING SamsaConsumerGroupStopped" in text
    assert f"lag service http://{lag_address}/" in text

    lab.down()
    assert processes_mentioning(lab.state_dir) == []
    print(f"lab up, alert fired {fired_after:.1f} s after the group stopped; "
          f"{time.monotonic() - started:.1f} s in all")
