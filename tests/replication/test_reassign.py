"""Moving replicas and electing preferred leaders (issue 28, point 6): the
controller's steps as pure rules (tables), then on real brokers: a broker
drained under acks=all load with the tool run as a program, a reassignment
whose controller dies half-way, the lead moved back to the preferred replica
after a failover, and plans the tool refuses."""
from __future__ import annotations

import json
import os

import pytest

from broker.client.cluster_producer import ClusterProducer
from broker.coordination import paths
from broker.coordination.replica_state import (NO_LEADER, PartitionState, TopicAssignment,
                                               preferred_leader_step, reassignment_step)
from broker.tools.__main__ import main as tools_main
from broker.protocol.api import Acks
from broker.protocol.errors import ErrorCode
from broker_helpers import (connect, fetch, message_set, metric, produce, run_module, scrape_metrics,
                            wait_until)
from replication_helpers import (REPLICATED, assert_replicas_identical, create_replicated,
                                 leader_of, replica_bytes, state, wait_in_sync, wait_rejoined,
                                 wait_serving)
from test_failover_history import History, Load, check_history, partition_values
from test_replication import produce_values, read_back


# ------------------------------------------------------------------ the rules, as tables

def s(leader: int, isr: tuple[int, ...], epoch: int = 3) -> PartitionState:
    return PartitionState(leader, epoch, isr)


@pytest.mark.parametrize("current, target, st, steady, kind, detail", [
    # nothing to do: remove the request
    ((1, 2), (1, 2), s(1, (1, 2)), {1, 2}, "done", None),
    # new replicas first, then the old ones (which keep serving meanwhile)
    ((1, 2), (3, 1), s(1, (1, 2)), {1, 2, 3}, "expand", (3, 1, 2)),
    ((1, 2), (3, 4), s(1, (1, 2)), {1, 2, 3, 4}, "expand", (3, 4, 1, 2)),
    # expanded; a new replica is still catching up
    ((3, 1, 2), (3, 1), s(1, (1, 2)), {1, 2, 3}, "wait", None),
    # offline partition: the controller's election comes first
    ((3, 1, 2), (3, 1), s(NO_LEADER, (1, 2, 3)), {1, 2, 3}, "wait", None),
    # every target replica in sync, the leader stays: finish
    ((3, 1, 2), (3, 1), s(1, (1, 2, 3)), {1, 2, 3}, "finish", (1, 3)),
    # the leader leaves: the first steady target replica leads first
    ((3, 4, 1, 2), (3, 4), s(1, (1, 2, 3, 4)), {1, 2, 3, 4}, "elect", 3),
    ((3, 4, 1, 2), (3, 4), s(1, (1, 2, 3, 4)), {1, 2, 4}, "elect", 4),
    ((3, 4, 1, 2), (3, 4), s(1, (1, 2, 3, 4)), {1, 2}, "wait", None),
    # a shrink (the target within the old replicas): no expand
    ((1, 2, 3), (2, 3), s(1, (1, 2, 3)), {1, 2, 3}, "elect", 2),
    ((1, 2, 3), (2, 3), s(2, (1, 2, 3)), {1, 2, 3}, "finish", (2, 3)),
    # a reorder only: the order is the target's when it finishes
    ((1, 2), (2, 1), s(1, (1, 2)), {1, 2}, "finish", (1, 2)),
])
def test_reassignment_step(current, target, st, steady, kind, detail):
    step = reassignment_step(current, target, st, steady)
    assert step.kind == kind, step
    if kind == "expand":
        assert step.replicas == detail
    elif kind == "elect":
        assert step.leader == detail
    elif kind == "finish":
        assert step.isr == detail
    elif kind == "wait":
        assert step.why


@pytest.mark.parametrize("replicas, st, steady, leader, why", [
    ((1, 2, 3), s(2, (1, 2, 3)), {1, 2, 3}, 1, ""),
    ((1, 2, 3), s(1, (1, 2, 3)), {1, 2, 3}, NO_LEADER, ""),                  # already
    ((1, 2, 3), s(2, (2, 3)), {1, 2, 3}, NO_LEADER, "not in sync"),
    ((1, 2, 3), s(2, (1, 2, 3)), {2, 3}, NO_LEADER, "not live"),             # or restarted
    ((1, 2, 3), s(NO_LEADER, (1,)), {1, 2, 3}, NO_LEADER, "no leader"),
])
def test_preferred_leader_step(replicas, st, steady, leader, why):
    got, reason = preferred_leader_step(replicas, st, steady)
    assert got == leader
    assert why in reason and bool(reason) == bool(why)


# ------------------------------------------------------------------ on real brokers

def assignment(cluster, topic: str) -> TopicAssignment:
    return TopicAssignment.from_json(cluster.zk.get(paths.replicated_topic_path(topic))[0])


def tool(cluster, *args: str, timeout: float = 120) -> tuple[int, str, str]:
    out = run_module("broker.tools", *args[:1], "--zookeeper", cluster.connect, *args[1:],
                     timeout=timeout)
    return out.returncode, out.stdout.decode(), out.stderr.decode()


def requests_left(cluster) -> list[str]:
    return cluster.zk.get_children(paths.REASSIGNMENTS) \
        if cluster.zk.exists(paths.REASSIGNMENTS) else []


def controller_metric(cluster, name: str) -> float:
    """``name`` summed over the live brokers (only the controller counts)."""
    return sum(metric(scrape_metrics(b.metrics_port), name) or 0
               for b in cluster.brokers.values())


def test_drain_a_broker_under_acks_all_load(clusters):
    """Every replica moves off broker 2 while a producer writes with
    acks=all: no write fails, every acknowledged one is read back in order,
    the moved replicas are byte-identical, and broker 2 deleted its copies."""
    cluster = clusters("drain", brokers=3, settings=REPLICATED)
    create_replicated(cluster, "d", partitions=3, replication_factor=2)
    before = assignment(cluster, "d").partitions
    for p, replicas in enumerate(before):
        wait_in_sync(cluster, "d", p, set(replicas))
    assert sum(2 in r for r in before) == 2          # placement rotates: 2 of 3 partitions
    assert [r[0] for r in before].count(2) == 1       # ... and 2 leads one: it moves too
    topic_dir = os.path.join(cluster.brokers[2].data_dir, "topics", "d")
    assert os.path.isdir(topic_dir)

    # the plan alone writes nothing
    code, out, err = tool(cluster, "reassign", "--drain-broker", "2")
    assert code == 0, err
    assert "Proposed replicas:" in out and "nothing written" in out
    assert requests_left(cluster) == []

    history = History()
    producer = ClusterProducer(cluster.connect, acks="all", retries=60, linger_ms=2,
                               retry_backoff_max_ms=500, request_timeout_ms=10_000)
    load = Load(producer, "d", history)
    load.start()
    try:
        wait_until(lambda: len(history.sent) > 500, 60, what="the load to start")
        code, out, err = tool(cluster, "reassign", "--drain-broker", "2", "--execute",
                              "--wait", "90")
        assert code == 0, f"{out}\n{err}"
        assert "started 2 reassignment(s)" in out
        assert "broker 2 holds no replica any more" in out
        sent = len(history.sent)
        wait_until(lambda: len(history.sent) > sent + 500, 60, what="more load after the move")
    finally:
        load.stop()
        producer.flush(60)
    assert sum(map(len, history.acknowledged().values())) > 1000
    failed = [b for _seq, b in history.sent if b.exception() is not None]
    assert not failed, f"{len(failed)} batches failed, first: {failed[0].exception()}"
    producer.close()

    after = assignment(cluster, "d").partitions
    assert all(2 not in r and len(r) == 2 for r in after), after
    for p, replicas in enumerate(before):
        if 2 not in replicas:
            assert after[p] == replicas               # partitions not on broker 2 stay put
    assert requests_left(cluster) == []
    wait_until(lambda: not os.path.exists(topic_dir), 30,
               what=f"broker 2 to delete {topic_dir}")
    code, out, _ = tool(cluster, "reassign", "--drain-broker", "2", "--verify")
    assert code == 0 and "no replica any more" in out
    # the controller's metrics: both moves finished, none running
    wait_until(lambda: controller_metric(cluster, "samsa_reassignments_total") == 2, 20,
               what="the controller to count 2 reassignments")
    assert controller_metric(cluster, "samsa_reassignments_running") == 0

    read = {}
    for p in range(3):
        st = wait_in_sync(cluster, "d", p, set(after[p]))
        assert 2 not in st.isr
        read[p] = partition_values(cluster, "d", p)
    check_history(history, read, "the partitions")
    for p in range(3):
        assert_replicas_identical(cluster, "d", p, brokers=list(after[p]))


def test_a_reassignment_survives_its_controller(clusters, capsys):
    """The controller dies after the first step; the next one finishes the
    move from what ZooKeeper holds, and nothing acknowledged is lost."""
    cluster = clusters("restartable", brokers=3, settings=REPLICATED)
    create_replicated(cluster, "m", partitions=2, replication_factor=2)
    x, y = assignment(cluster, "m").partitions[0]
    wait_in_sync(cluster, "m", 0, {x, y})
    z = ({0, 1, 2} - {x, y}).pop()
    assert y in assignment(cluster, "m").partitions[1]   # placement rotates: y stays there
    values = [f"v{i}".encode() for i in range(200)]
    assert all(r.error == 0 for r in produce_values(cluster, "m", 0, values))
    # z is down: the move stops after its first step (z cannot catch up)
    cluster.brokers[z].kill()
    cluster.zk.ensure_path(paths.REASSIGNMENTS)
    cluster.zk.create(paths.reassignment_path("m", 0), json.dumps({"replicas": [x, z]}).encode())
    wait_until(lambda: assignment(cluster, "m").partitions[0] == (x, z, y), 30,
               what=lambda: f"the first step: {assignment(cluster, 'm').partitions}")
    assert tools_main(["reassign", "--zookeeper", cluster.connect, "--verify"]) == 3
    assert f"m/0: still running (replicas now {x},{z},{y}, target {x},{z}, leader " in \
        capsys.readouterr().out
    controller = json.loads(cluster.zk.get(paths.CONTROLLER)[0])["broker"]
    assert controller != z
    cluster.brokers[controller].kill()
    cluster.brokers[controller].start()
    cluster.brokers[z].start()
    wait_until(lambda: assignment(cluster, "m").partitions[0] == (x, z), 60,
               what=lambda: f"the move to finish: {assignment(cluster, 'm').partitions}, "
                            f"{state(cluster, 'm', 0)}, requests {requests_left(cluster)}")
    assert requests_left(cluster) == []
    assert y not in state(cluster, "m", 0).isr
    # y keeps its replica of partition 1, and deletes that of partition 0:
    # an empty log stands in its place, which clients are refused
    def emptied() -> bool:
        try:
            return replica_bytes(cluster.brokers[y], "m", 0)[1] == b""
        except FileNotFoundError:
            return False               # between the old log's removal and the new one's
    wait_until(emptied, 30, what=f"broker {y} to delete its replica of m/0")
    with connect(cluster.brokers[y].address) as conn:
        r = fetch(conn, "m", 0, 0)
        assert r.error == ErrorCode.NOT_LEADER_FOR_PARTITION
        assert f"broker {y} holds no replica of m/0" in r.message
        r = produce(conn, "m", 0, message_set([b"stray"]), Acks.WRITTEN)
        assert r.error == ErrorCode.NOT_LEADER_FOR_PARTITION
    read_back(cluster, "m", 0, values)
    assert_replicas_identical(cluster, "m", 0, brokers=[x, z])


def test_preferred_leader_election_after_a_failover(clusters):
    cluster = clusters("preferred", brokers=3, settings=REPLICATED)
    create_replicated(cluster, "p", replication_factor=3)
    preferred = assignment(cluster, "p").partitions[0][0]
    wait_in_sync(cluster, "p", 0, {0, 1, 2})
    assert leader_of(cluster, "p", 0) == preferred
    values = [f"a{i}".encode() for i in range(100)]
    assert all(r.error == 0 for r in produce_values(cluster, "p", 0, values))
    cluster.brokers[preferred].kill()
    other = wait_serving(cluster, "p", 0, not_on={preferred})
    # while it is down, it cannot lead: said, exit 1
    code, out, err = tool(cluster, "elect-leaders", "--topic", "p")
    assert code == 1, err
    assert f"p/0: leader stays {other}: preferred replica {preferred} not live" in out
    more = [f"b{i}".encode() for i in range(100)]
    assert all(r.error == 0 for r in produce_values(cluster, "p", 0, more))
    cluster.brokers[preferred].start()
    wait_rejoined(cluster, "p", 0)
    assert leader_of(cluster, "p", 0) == other        # nothing moves it back by itself
    epoch = state(cluster, "p", 0).leader_epoch
    code, out, err = tool(cluster, "elect-leaders")
    assert code == 0, err
    assert f"p/0: leader {other} -> {preferred} (preferred replica; epoch {epoch + 1})" in out
    assert wait_serving(cluster, "p", 0) == preferred
    wait_until(lambda: controller_metric(cluster, "samsa_preferred_elections_total") == 1, 20,
               what="the controller to count the preferred election")
    read_back(cluster, "p", 0, values + more)
    evenmore = [f"c{i}".encode() for i in range(50)]
    assert all(r.error == 0 for r in produce_values(cluster, "p", 0, evenmore))
    read_back(cluster, "p", 0, values + more + evenmore)
    assert_replicas_identical(cluster, "p", 0)
    code, out, _ = tool(cluster, "elect-leaders", "--topic", "p", "--partition", "0")
    assert code == 0 and f"p/0: led by its preferred replica {preferred}" in out


BAD_PLANS = [
    ("not json", "the plan is not JSON"),
    ('{"partitions": []}', 'non-empty list "partitions"'),
    ('{"partitions": [{"topic": "r", "partition": 0, "replicas": []}]}',
     "r/0: the list of replicas is empty"),
    ('{"partitions": [{"topic": "r", "partition": 0, "replicas": [0, 0]}]}',
     "r/0: broker 0 is named twice"),
    ('{"partitions": [{"topic": "r", "partition": 0, "replicas": [0, 7]}]}',
     "r/0: unknown broker id(s) [7]: the registered brokers are [0, 1]"),
    ('{"partitions": [{"topic": "nope", "partition": 0, "replicas": [0]}]}',
     "'nope' is not a replicated topic"),
    ('{"partitions": [{"topic": "r", "partition": 2, "replicas": [0, 1]}]}',
     "r has 1 partitions (0..0); the plan names partition 2, and a reassignment cannot "
     "change the partition count"),
    ('{"partitions": [{"topic": "r", "partition": 0, "replicas": [1, 0]}, '
     '{"topic": "r", "partition": 0, "replicas": [0, 1]}]}', "r/0 appears twice"),
    ('{"partitions": [{"topic": "r", "partition": "0", "replicas": [1]}]}',
     'needs "partition": a number'),
    ('{"partitions": [{"topic": "r", "partition": 0, "replicas": [1]}]}',
     "1 replicas are fewer than the topic's min.insync.replicas=2"),
]


def test_bad_plans_are_refused(clusters, tmp_path, capsys):
    cluster = clusters("bad-plans", brokers=2, settings=REPLICATED)
    create_replicated(cluster, "r", replication_factor=2, **{"min.insync.replicas": "2"})
    plan = tmp_path / "plan.json"
    for text, message in BAD_PLANS:
        plan.write_text(text)
        code = tools_main(["reassign", "--zookeeper", cluster.connect, "--plan", str(plan),
                           "--execute"])
        err = capsys.readouterr().err
        assert code == 2, (text, err)
        assert message in err, (text, err)
    # no broker is left to take the place of one drained: both are replicas
    code = tools_main(["reassign", "--zookeeper", cluster.connect, "--drain-broker", "1"])
    assert code == 2 and "no other live broker is left" in capsys.readouterr().err
    code = tools_main(["reassign", "--zookeeper", cluster.connect, "--drain-broker", "9"])
    assert code == 2 and "broker 9 is neither registered" in capsys.readouterr().err
    code = tools_main(["elect-leaders", "--zookeeper", cluster.connect, "--topic", "nope"])
    assert code == 2 and "'nope' is not a replicated topic" in capsys.readouterr().err
    code = tools_main(["elect-leaders", "--zookeeper", cluster.connect, "--topic", "r",
                       "--partition", "3"])
    assert code == 2 and "r has 1 partitions (0..0), not 3" in capsys.readouterr().err
    assert requests_left(cluster) == []
    assert assignment(cluster, "r").partitions[0] in ((0, 1), (1, 0))
    code = tools_main(["reassign", "--zookeeper", cluster.connect, "--verify"])
    assert code == 0 and "no reassignment is running" in capsys.readouterr().out
    # a reorder is a valid plan: the preferred leader changes, nothing moves
    now = assignment(cluster, "r").partitions[0]
    plan.write_text(json.dumps({"partitions": [{"topic": "r", "partition": 0,
                                                "replicas": list(reversed(now))}]}))
    code = tools_main(["reassign", "--zookeeper", cluster.connect, "--plan", str(plan),
                       "--execute", "--wait", "30"])
    out = capsys.readouterr().out
    assert code == 0 and "r/0: done" in out, out
    assert assignment(cluster, "r").partitions[0] == tuple(reversed(now))


def test_the_tools_need_the_cluster():
    out = run_module("broker.tools", "reassign", "--drain-broker", "1")
    assert out.returncode == 2 and b"reassign needs the cluster" in out.stderr
    out = run_module("broker.tools", "reassign", "--zookeeper", "127.0.0.1:1/x")
    assert out.returncode == 2 and b"--plan FILE or --drain-broker N" in out.stderr
