"""The pipeline in containers (infra/docker/pipeline.py on testcontainers):
a 3-node ZooKeeper ensemble, datacenter dc-a's two brokers behind an
HAProxy container, the analysis broker, the mirror (two processes, one
consumer group), and the audit — PostgreSQL, the audit service, a counter
in each cluster — every one a container of the project's images with host
networking. One pipeline serves the module; each test has topics of its
own and leaves every container running as it found it.

* what HAProxy acknowledged (acks=flushed) all reaches analysis;
* ``docker kill`` of the dc-a broker the producer writes to, under load,
  while the mirror is paused (``docker pause``): the producer goes on
  through the other broker, and once the killed container is started again
  the mirror copies everything: no acknowledged message is lost;
* the ZooKeeper leader's container restarted under traffic: the ensemble
  elects again, the mirror's group goes on copying, and when one mirror
  container stops and comes back the group rebalances each time;
* audited traffic of a past hour through HAProxy: the audit service (on
  PostgreSQL) reports that hour complete at every tier.
"""
from __future__ import annotations

import json
import time
import urllib.request

import pytest

from broker.client.producer import Producer
from broker.coordination import paths
from broker_helpers import topic_values, wait_until
from container_helpers import Sender, running_pipeline
from broker.harness.zookeeper import server_mode
from infra.docker.pipeline import ContainerPipeline
from infra.topology import ClusterSpec, LoadBalancerSpec, MirrorSpec, Topology, ZooKeeperSpec

# brokers that flush often (acks=flushed answers fast) and whose registration
# outlives a crash by 4 s
BROKERS = ("log.flush_ms=10", "zookeeper_session_timeout_ms=4000")
MIRROR = "to-analysis"


def topology() -> Topology:
    return Topology(
        name="containers",
        zookeeper=ZooKeeperSpec(size=3),
        datacenters=(ClusterSpec("dc-a", brokers=2, broker_settings=BROKERS,
                                 load_balancer=LoadBalancerSpec()),),
        analysis=ClusterSpec("analysis", brokers=1, broker_settings=BROKERS),
        mirrors=(MirrorSpec(MIRROR, sources=("dc-a",), target="analysis", processes=2,
                            settings=("commit_interval_ms=200", "linger_ms=5",
                                      "audit_publish_interval_ms=1000")),))


@pytest.fixture(scope="module")
def pipeline(docker_host, tmp_path_factory, request):
    with running_pipeline(topology(), str(tmp_path_factory.mktemp("container-pipeline")),
                          request, timeout=90, audit=True) as pipe:
        print("containerized pipeline ready: " + ", ".join(
            f"{what} {s:.1f} s" for what, s in pipe.seconds.items()))
        yield pipe


def values_in(pipe: ContainerPipeline, cluster: str, topic: str) -> list[bytes]:
    """Every value of ``topic`` on every broker of ``cluster``."""
    return topic_values(pipe, cluster, topic, range(pipe.topology.cluster(cluster).brokers))


def send(pipe: ContainerPipeline, topic: str, first: int, count: int) -> set[bytes]:
    """``count`` values through dc-a's HAProxy, every one acknowledged (flushed)."""
    values = [b"%s-%07d" % (topic.encode(), i) for i in range(first, first + count)]
    with Producer(bootstrap=pipe.lb_address("dc-a"), acks="flushed", batch_size=100,
                  linger_ms=2) as producer:
        batches = [producer.send(topic, v) for v in values]
        producer.flush(60)
    assert all(b.exception() is None for b in batches)
    return set(values)


def test_every_message_acknowledged_through_haproxy_reaches_analysis(pipeline):
    sent = send(pipeline, "ct-acked", 0, 3000)
    wait_until(lambda: set(values_in(pipeline, "analysis", "ct-acked")) >= sent, 60,
               interval=0.2, what="the mirror containers to copy all 3000 messages")
    # both dc-a brokers are behind the load balancer, and the producer wrote to one
    per_broker = [len(values_in_broker(pipeline, "dc-a", i, "ct-acked")) for i in (0, 1)]
    assert sum(per_broker) == 3000, per_broker


def values_in_broker(pipe: ContainerPipeline, cluster: str, index: int,
                     topic: str) -> list[bytes]:
    return topic_values(pipe, cluster, topic, [index])


def test_docker_kill_of_a_broker_under_load_loses_no_acknowledged_message(pipeline):
    topic = "ct-kill"
    address = pipeline.lb_address("dc-a")
    sender = Sender(lambda: Producer(bootstrap=address, acks="flushed", batch_size=100,
                                     linger_ms=2), topic)
    sender.start()
    try:
        wait_until(lambda: len(sender.acknowledged) >= 500 or sender.error, 30, interval=0.05,
                   what="messages acknowledged through HAProxy")
        assert sender.error is None, sender.error
        wait_until(lambda: len(values_in(pipeline, "analysis", topic)) >= 300, 60,
                   interval=0.2, what="the mirror to copy the first messages")
        # the broker the producer writes to: the one holding the topic's data
        victim = max((0, 1), key=lambda i: len(values_in_broker(pipeline, "dc-a", i, topic)))
        for mirror in pipeline.mirrors:
            mirror.docker.pause()          # the mirror falls behind...
        try:
            at_pause = len(sender.acknowledged)
            wait_until(lambda: len(sender.acknowledged) >= at_pause + 500 or sender.error, 30,
                       interval=0.05, what="messages the mirror has not copied on the victim")
            # what only the victim holds: acknowledged, not copied yet
            uncopied = (set(values_in_broker(pipeline, "dc-a", victim, topic))
                        - set(values_in(pipeline, "analysis", topic)))
            pipeline.brokers[("dc-a", victim)].kill()     # ...and the broker dies
            at_kill = len(sender.acknowledged)
            assert uncopied, "the victim held nothing the mirror had not copied"
        finally:
            for mirror in pipeline.mirrors:
                mirror.docker.unpause()
        wait_until(lambda: len(sender.acknowledged) >= at_kill + 500 or sender.error, 60,
                   interval=0.05, what="the producer to go on through the other broker")
        assert sender.error is None, sender.error
    finally:
        sender.halt.set()
        sender.join(90)
    assert sender.error is None, sender.error
    pipeline.brokers[("dc-a", victim)].start(60)          # same container, same volume
    acknowledged = set(sender.acknowledged)
    wait_until(lambda: set(values_in(pipeline, "analysis", topic)) >= acknowledged, 120,
               interval=0.5, what=f"every one of {len(acknowledged)} acknowledged messages "
                                  f"in analysis after the broker came back")
    assert acknowledged <= set(values_in(pipeline, "dc-a", topic))
    assert uncopied <= set(values_in(pipeline, "analysis", topic))
    print(f"killed dc-a broker {victim} with {len(uncopied)} messages not yet copied; "
          f"{len(acknowledged)} acknowledged in all")


def zookeeper_modes(pipe: ContainerPipeline) -> list[str]:
    return [server_mode(pipe.topology.host, port) or "down"
            for port in pipe.topology.zookeeper_client_ports()]


def owners(pipe: ContainerPipeline, topic: str) -> tuple[set[str], dict[str, str]]:
    """(the mirror group's members in dc-a, partition -> owning member)."""
    from kazoo.client import KazooClient
    group = pipe.topology.mirror(MIRROR).mirror_group
    zk = KazooClient(hosts=pipe.zookeeper_connect("dc-a"), timeout=10)
    zk.start(timeout=20)
    try:
        members = set(zk.get_children(paths.consumer_ids_path(group)))
        path = paths.owners_path(group, topic)
        owned = {bp: zk.get(f"{path}/{bp}")[0].decode().split("#")[0]
                 for bp in (zk.get_children(path) if zk.exists(path) else [])}
        return members, owned
    finally:
        zk.stop()
        zk.close()


def test_zookeeper_container_restarted_the_group_rebalances_and_goes_on(pipeline):
    topic = "ct-zk"
    sent = send(pipeline, topic, 0, 400)
    wait_until(lambda: set(values_in(pipeline, "analysis", topic)) >= sent, 60, interval=0.2,
               what="the first copy")
    leader = zookeeper_modes(pipeline).index("leader")
    zk = pipeline.zookeepers[leader]
    zk.stop(timeout=10)
    sent |= send(pipeline, topic, 400, 400)          # producers need no ZooKeeper
    zk.start(60)
    wait_until(lambda: sorted(zookeeper_modes(pipeline)) == ["follower", "follower", "leader"],
               60, interval=0.2, what="the ensemble of three again, a leader elected")
    sent |= send(pipeline, topic, 800, 400)
    wait_until(lambda: set(values_in(pipeline, "analysis", topic)) >= sent, 90, interval=0.5,
               what="the mirror's group to copy what was sent around the restart")

    # the group rebalances on the restarted ensemble: one member goes, one comes
    members, owned = owners(pipeline, topic)
    assert len(members) == 2 and set(owned.values()) <= members, (members, owned)
    leaving = pipeline.mirrors[1]
    leaving.stop(timeout=20)
    wait_until(lambda: (lambda m, o: len(m) == 1 and o and set(o.values()) == m)(
        *owners(pipeline, topic)), 60, interval=0.2,
        what="the remaining mirror to own every partition")
    sent |= send(pipeline, topic, 1200, 400)
    wait_until(lambda: set(values_in(pipeline, "analysis", topic)) >= sent, 60, interval=0.5,
               what="the one remaining member to copy everything")
    leaving.start(60)
    wait_until(lambda: (lambda m, o: len(m) == 2 and set(o.values()) == m)(
        *owners(pipeline, topic)), 60, interval=0.2,
        what="the group to share the partitions between its two members again")
    sent |= send(pipeline, topic, 1600, 400)
    wait_until(lambda: set(values_in(pipeline, "analysis", topic)) >= sent, 60, interval=0.5,
               what="the group of two to copy everything")


def test_the_audit_on_postgresql_reports_the_hour_complete(pipeline):
    from infra.local.traffic import HOUR_MS, TrafficConfig, produce
    now = int(time.time() * 1000)
    hour = now - now % HOUR_MS - 2 * HOUR_MS             # long past the grace period
    result = produce({"dc-a": (pipeline.lb_address("dc-a"), pipeline.zookeeper_connect("dc-a"))},
                     TrafficConfig(messages_per_dc=3000, hours=1, partitions=2),
                     first_hour_ms=hour)
    assert result.total() == 3000 and result.failed == 0

    def completeness(topic: str) -> dict:
        url = f"{pipeline.audit_url}/api/completeness?topic={topic}&hour={hour}"
        with urllib.request.urlopen(url, timeout=10) as r:
            return json.load(r)

    tiers = {("producer", "dc-a"), ("cluster", "dc-a"), ("mirror", "dc-a"),
             ("cluster", "analysis")}

    last: dict = {}

    def complete_at_every_tier(topic: str) -> bool:
        answer = last[topic] = completeness(topic)
        return answer["complete"] and tiers <= {(v["tier"], v["cluster"])
                                                for v in answer["verdicts"]}

    for topic in sorted(result.acked["dc-a"]):
        try:
            wait_until(lambda: complete_at_every_tier(topic), 120, interval=0.5,
                       what=f"the audit to report {topic} complete for the hour at every tier")
        except BaseException:
            print(json.dumps([{k: v[k] for k in ("window_begin_ms", "tier", "cluster", "state",
                                                  "produced", "count", "missing", "duplicated")}
                              for v in last[topic]["verdicts"]], indent=0))
            raise
    answer = completeness("page_views")
    assert all(v["state"] == "complete" and v["missing"] == 0 for v in answer["verdicts"])
    assert sum(v["produced"] for v in answer["verdicts"] if v["tier"] == "producer") == \
        result.total(topic="page_views")
    # the verdicts come from the counts stored in the PostgreSQL container
    import sqlalchemy
    engine = sqlalchemy.create_engine(pipeline.postgres_url)
    try:
        with engine.connect() as conn:
            assert sqlalchemy.inspect(conn).get_table_names(), \
                "the audit service made no tables in PostgreSQL"
    finally:
        engine.dispose()
