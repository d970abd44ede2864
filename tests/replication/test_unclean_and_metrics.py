"""Unclean leader election (issue 28, point 4) and the replication metrics
(point 6), on real brokers and ZooKeeper.

Unclean election: replica B falls out of the in-sync set, its leader A takes
more acknowledged writes alone, then A dies and B comes back. Off (the
default), the partition stays offline until A returns, and nothing
acknowledged is lost; on (the topic's or the broker's setting), B leads
at once and what only A had is lost, A cutting it when it returns.

Metrics: what a broker's /metrics says of the partitions it leads while a
follower stops and comes back (docs/replication.md, "Metrics")."""
from __future__ import annotations

import json
import signal

import pytest

from broker.coordination.replica_state import NO_LEADER
from broker.protocol.api import Acks
from broker.protocol.errors import ErrorCode
from broker_helpers import (connect, log_text, message_set, metric, produce, read_partition,
                            run_module, scrape_metrics, wait_until)
from replication_helpers import (REPLICATED, assert_replicas_identical, create_replicated,
                                 leader_of, log_end_on_disk, replica_bytes, state,
                                 wait_in_sync, wait_serving)

COMMITTED = [f"committed-{i}".encode() for i in range(50)]   # every replica has them
TAIL = [f"tail-{i}".encode() for i in range(20)]             # acks=all while only A is in sync
AFTER = [f"after-{i}".encode() for i in range(10)]           # written to B as unclean leader


def produce_to(broker, topic: str, partition: int, values: list[bytes],
               acks: Acks = Acks.ALL) -> list:
    """One produce per value to ``broker`` (whether it leads or not)."""
    with connect(broker.address) as conn:
        return [produce(conn, topic, partition, message_set([v]), acks) for v in values]


def wait_reads(broker, topic: str, partition: int, values: list[bytes]) -> None:
    """Wait until ``broker`` (the leader) serves exactly ``values``: acks=all
    answers once the in-sync replicas have them, consumers see them once the
    leader also flushed them (flush_ms later)."""
    got: list[bytes] = []

    def same() -> bool:
        with connect(broker.address) as conn:
            got[:] = [m.value for m in read_partition(conn, topic, partition)]
        return got == values
    wait_until(same, 20, what=lambda: f"broker {broker.broker_id} to serve {len(values)} "
                                      f"values of {topic}/{partition}; it serves {len(got)}: "
                                      f"{got[-3:]}")


def out_of_sync_then_leader_lost(cluster, topic: str) -> tuple[int, int, int, int]:
    """The sequence both election tests share: ``topic``/0 has replicas
    {A, B}; B dies and leaves the in-sync set; A takes TAIL with acks=all
    alone (acknowledged: the set is {A} and min.insync.replicas is 1); then A
    dies, and the partition goes offline (leader -1) since no in-sync
    replica is live. Returns (A, B, the offline state's epoch, the offset
    where TAIL begins)."""
    first = state(cluster, topic, 0)              # a new topic's: every replica in sync
    assert len(first.isr) == 2
    a = first.leader
    (b,) = set(first.isr) - {a}
    assert all(r.error == 0 for r in produce_to(cluster.brokers[a], topic, 0, COMMITTED))
    wait_until(lambda: log_end_on_disk(cluster.brokers[b], topic, 0)
               >= log_end_on_disk(cluster.brokers[a], topic, 0), 20,
               what="B to hold every committed message")
    cluster.brokers[b].kill()
    wait_in_sync(cluster, topic, 0, {a})          # by A's lag check or the controller
    results = produce_to(cluster.brokers[a], topic, 0, TAIL)
    assert [r.error for r in results] == [0] * len(TAIL), results[0].message
    # acknowledged and visible to consumers: committed, as the in-sync set is {A}
    wait_reads(cluster.brokers[a], topic, 0, COMMITTED + TAIL)
    epoch = state(cluster, topic, 0).leader_epoch
    cluster.brokers[a].kill()
    offline = wait_until(lambda: (lambda s: s if s.leader == NO_LEADER else None)(
        state(cluster, topic, 0)), 30, interval=0.05,
        what=lambda: f"{topic}/0 offline once A is gone: {state(cluster, topic, 0)}")
    # the in-sync set is kept, so that A (and only A) may lead again
    assert offline.isr == (a,) and offline.leader_epoch > epoch
    return a, b, offline.leader_epoch, results[0].base_offset


def offline_partitions(cluster, brokers: set[int]) -> float:
    """samsa_offline_partitions summed over ``brokers`` (only the
    controller's is not 0)."""
    return sum(metric(scrape_metrics(cluster.brokers[i].metrics_port),
                      "samsa_offline_partitions") for i in brokers)


def unavailable_rows(cluster, topic: str) -> list[dict]:
    out = run_module("broker.tools", "topics", "--zookeeper", cluster.connect,
                     "--unavailable", "--json")
    assert out.returncode == 0, out.stderr.decode()
    return [r for r in json.loads(out.stdout)["partitions"] if r["topic"] == topic]


def test_without_unclean_election_the_partition_waits_for_its_in_sync_replica(clusters):
    cluster = clusters("clean", brokers=3, settings=REPLICATED)
    create_replicated(cluster, "t", replication_factor=2)
    # a probe: one partition on each broker alone (3 partitions over 3 brokers)
    create_replicated(cluster, "probe", partitions=3, replication_factor=1)
    a, b, offline_epoch, _tail_start = out_of_sync_then_leader_lost(cluster, "t")
    (probe_on_b,) = [p for p in range(3) if state(cluster, "probe", p).isr == (b,)]
    cluster.brokers[b].start()
    # The controller's pass that elects B for the probe (its only replica,
    # back) read B live and judged t/0 as well: that pass's verdict on t/0 is
    # what stays, nothing later changes it.
    assert wait_serving(cluster, "probe", probe_on_b) == b
    s = state(cluster, "t", 0)
    assert (s.leader, s.isr, s.leader_epoch) == (NO_LEADER, (a,), offline_epoch)
    refused = produce_to(cluster.brokers[b], "t", 0, [b"refused"], Acks.WRITTEN)[0]
    assert refused.error == ErrorCode.NOT_LEADER_FOR_PARTITION, refused
    assert f"broker {b} does not lead t/0" in refused.message
    rows = unavailable_rows(cluster, "t")
    assert [(r["partition"], r["leader"], r["isr"]) for r in rows] == [(0, NO_LEADER, [a])]
    # the controller (B or C) counts t/0 and A's probe partition offline
    wait_until(lambda: offline_partitions(cluster, set(cluster.brokers) - {a}) == 2, 20,
               what="the controller to count 2 offline partitions")
    # A returns: it leads again (a new epoch), with everything acknowledged
    cluster.brokers[a].start()
    assert wait_serving(cluster, "t", 0) == a
    assert state(cluster, "t", 0).leader_epoch > offline_epoch
    wait_reads(cluster.brokers[a], "t", 0, COMMITTED + TAIL)
    assert unavailable_rows(cluster, "t") == []
    wait_until(lambda: offline_partitions(cluster, set(cluster.brokers)) == 0, 20,
               what="the controller to count no offline partition")
    wait_in_sync(cluster, "t", 0, {a, b})
    assert_replicas_identical(cluster, "t", 0, [a, b])
    assert sum(metric(scrape_metrics(broker.metrics_port), "samsa_unclean_elections_total")
               or 0 for broker in cluster.brokers.values()) == 0


@pytest.mark.parametrize("setting", ["topic", "broker"])
def test_unclean_election_lets_an_out_of_sync_replica_lead_and_loses_what_it_lacked(
        clusters, setting):
    """``setting``: the topic's unclean.leader.election.enable, or the
    brokers' unclean_leader_election (the controller's default)."""
    if setting == "topic":
        cluster = clusters("unclean-topic", brokers=3, settings=REPLICATED)
        create_replicated(cluster, "t", replication_factor=2,
                          **{"unclean.leader.election.enable": "true"})
    else:
        cluster = clusters("unclean-broker", brokers=3,
                           settings={**REPLICATED, "unclean_leader_election": "true"})
        create_replicated(cluster, "t", replication_factor=2)
    logs_from = {i: len(log_text(broker.log_path)) for i, broker in cluster.brokers.items()}
    a, b, offline_epoch, tail_start = out_of_sync_then_leader_lost(cluster, "t")
    cluster.brokers[b].start()
    # B leads, alone in the in-sync set, by a new epoch, and takes writes
    assert wait_serving(cluster, "t", 0) == b
    s = state(cluster, "t", 0)
    assert s.isr == (b,) and s.leader_epoch > offline_epoch
    results = produce_to(cluster.brokers[b], "t", 0, AFTER)
    assert [r.error for r in results] == [0] * len(AFTER), results[0].message
    # at the offsets TAIL had on A: a consumer that read TAIL reads other
    # messages there now
    assert results[0].base_offset == tail_start
    # A's acknowledged (and consumed) tail is gone: B never had it
    wait_reads(cluster.brokers[b], "t", 0, COMMITTED + AFTER)
    # A returns as a follower and cuts its log to B's (by leader epoch)
    cluster.brokers[a].start()
    wait_in_sync(cluster, "t", 0, {a, b})
    assert leader_of(cluster, "t", 0) == b
    hw = assert_replicas_identical(cluster, "t", 0, [a, b])
    assert hw == results[-1].end_offset
    _earliest, data = replica_bytes(cluster.brokers[a], "t", 0)
    assert b"tail-" not in data
    assert metric(scrape_metrics(cluster.brokers[a].metrics_port),
                  "samsa_replica_truncations_total") >= 1
    # the controller (C: A and B were down) counted it and said so
    counted = {i: metric(scrape_metrics(broker.metrics_port), "samsa_unclean_elections_total")
               for i, broker in cluster.brokers.items()}
    assert sorted(v or 0 for v in counted.values()) == [0, 0, 1], counted
    said = [i for i, broker in cluster.brokers.items()
            if f"UNCLEAN election of t/0: broker {b} leads"
            in log_text(broker.log_path, logs_from[i])]
    assert said == [i for i, v in counted.items() if v == 1], (said, counted)


# ---------------------------------------------------------------- metrics

def scrape(cluster, broker_id: int) -> dict:
    return scrape_metrics(cluster.brokers[broker_id].metrics_port)


def wait_metrics(cluster, broker_id: int, expected: dict[tuple, float]) -> dict:
    """Scrape ``broker_id`` until every metric of ``expected`` ((name,) or
    (name, topic, partition): value) has its value; the last scrape."""
    def values(samples) -> dict:
        return {key: metric(samples, key[0], **({"topic": key[1], "partition": str(key[2])}
                                                if len(key) > 1 else {}))
                for key in expected}
    last: list[dict] = [{}]

    def done():
        last[0] = scrape(cluster, broker_id)
        return last[0] if values(last[0]) == expected else None
    return wait_until(done, 20, interval=0.1,
                      what=lambda: f"broker {broker_id}'s metrics {expected}; "
                                   f"they are {values(last[0])}")


def test_replication_metrics_follow_a_follower_out_and_back(clusters):
    """2 partitions with 3 replicas on 3 brokers: two brokers lead one
    partition each, the third (F) only follows. F is paused (SIGSTOP) past
    replica_lag_time_max_ms while both partitions take writes, then
    resumed. The ZooKeeper session outlives the pause, so it is each leader
    (not the controller) that takes F out of its in-sync set."""
    settings = {**REPLICATED, "zookeeper_session_timeout_ms": 20_000}
    cluster = clusters("metrics", brokers=3, settings=settings)
    create_replicated(cluster, "m", partitions=2, replication_factor=3,
                      **{"min.insync.replicas": "3"})
    everyone = set(cluster.brokers)
    for p in range(2):
        wait_in_sync(cluster, "m", p, everyone)
    leaders = {p: leader_of(cluster, "m", p) for p in range(2)}
    (f,) = everyone - set(leaders.values())
    samples = {b: scrape(cluster, b) for b in everyone}
    led = {b: metric(samples[b], "samsa_leader_partitions") for b in everyone}
    assert led == {b: list(leaders.values()).count(b) for b in everyone}
    assert sum(led.values()) == 2
    assert sum(metric(samples[b], "samsa_controller_active") for b in everyone) == 1
    assert all(metric(samples[b], "samsa_under_replicated_partitions") == 0 for b in everyone)

    for p, leader in leaders.items():
        assert all(r.error == 0 for r in produce_to(cluster.brokers[leader], "m", p,
                                                    [b"x" * 100] * 20, Acks.ALL))

    def lags(p: int) -> dict[int, float]:
        got = scrape(cluster, leaders[p])
        return {b: metric(got, "samsa_follower_lag_bytes", topic="m", partition=str(p),
                          follower=str(b)) for b in everyone - {leaders[p]}}
    for p in range(2):
        # one lag per follower, none for the leader itself; all caught up
        wait_until(lambda: lags(p) == {b: 0 for b in everyone - {leaders[p]}}, 20,
                   what=lambda: f"every follower of m/{p} caught up: {lags(p)}")
        assert metric(scrape(cluster, leaders[p]), "samsa_follower_lag_bytes", topic="m",
                      partition=str(p), follower=str(leaders[p])) is None
    before = {p: scrape(cluster, leaders[p]) for p in range(2)}
    ends = {p: metric(before[p], "samsa_log_end_offset", topic="m", partition=str(p))
            for p in range(2)}

    cluster.brokers[f].proc.send_signal(signal.SIGSTOP)
    try:
        written = {}
        for p, leader in leaders.items():
            results = produce_to(cluster.brokers[leader], "m", p, [b"y" * 200] * 10,
                                 Acks.WRITTEN)
            assert all(r.error == 0 for r in results)
            written[p] = results[-1].end_offset - ends[p]
        for p, leader in leaders.items():
            wait_in_sync(cluster, "m", p, everyone - {f})
            # the leader counts the shrink once its write is answered
            during = wait_metrics(cluster, leader, {
                ("samsa_isr_shrinks_total",): metric(before[p], "samsa_isr_shrinks_total") + 1,
                ("samsa_under_replicated_partitions",): 1,
                ("samsa_under_min_isr_partitions",): 1,
                ("samsa_partition_in_sync_replicas", "m", p): 2})
            assert metric(during, "samsa_isr_expands_total") == \
                metric(before[p], "samsa_isr_expands_total")
            # F lacks exactly what was written since it stopped; the other
            # follower catches up
            assert lags(p)[f] == written[p]
            (other,) = everyone - {f, leader}
            wait_until(lambda: lags(p)[other] == 0, 20,
                       what=lambda: f"follower {other} of m/{p} caught up: {lags(p)}")
    finally:
        cluster.brokers[f].proc.send_signal(signal.SIGCONT)

    for p, leader in leaders.items():
        wait_in_sync(cluster, "m", p, everyone)
        after = wait_metrics(cluster, leader, {
            ("samsa_isr_expands_total",): metric(before[p], "samsa_isr_expands_total") + 1,
            ("samsa_under_replicated_partitions",): 0,
            ("samsa_under_min_isr_partitions",): 0,
            ("samsa_partition_in_sync_replicas", "m", p): 3,
            ("samsa_log_high_watermark", "m", p): ends[p] + written[p]})
        assert metric(after, "samsa_isr_shrinks_total") == \
            metric(before[p], "samsa_isr_shrinks_total") + 1
        wait_until(lambda: lags(p)[f] == 0, 20,
                   what=lambda: f"follower {f} of m/{p} caught up: {lags(p)}")
    resumed = scrape(cluster, f)
    assert metric(resumed, "samsa_leader_partitions") == 0
    assert metric(resumed, "samsa_replication_bytes_in_total") >= sum(written.values())


def test_a_follower_that_dies_counts_as_a_shrink_and_its_return_as_an_expand(clusters):
    """A follower killed: here the controller takes it out of the in-sync set
    (its registration goes after the session timeout, 4 s, long before the
    leader's lag time, 60 s: the usual order, as with the defaults of 6 s and
    10 s). The leader's shrink counter must count that shrink as well, or a
    crashed follower would show an expand when it returns and never a shrink."""
    cluster = clusters("metrics-crash", brokers=2,
                       settings={**REPLICATED, "replica_lag_time_max_ms": 60_000})
    create_replicated(cluster, "c", replication_factor=2)
    wait_in_sync(cluster, "c", 0, {0, 1})
    leader = leader_of(cluster, "c", 0)
    follower = 1 - leader
    before = scrape(cluster, leader)
    cluster.brokers[follower].kill()
    wait_in_sync(cluster, "c", 0, {leader})
    wait_metrics(cluster, leader, {
        ("samsa_isr_shrinks_total",): metric(before, "samsa_isr_shrinks_total") + 1,
        ("samsa_under_replicated_partitions",): 1,
        ("samsa_partition_in_sync_replicas", "c", 0): 1})
    assert all(r.error == 0 for r in produce_to(cluster.brokers[leader], "c", 0, [b"z"] * 5))
    cluster.brokers[follower].start()
    wait_in_sync(cluster, "c", 0, {0, 1})
    wait_metrics(cluster, leader, {
        ("samsa_isr_shrinks_total",): metric(before, "samsa_isr_shrinks_total") + 1,
        ("samsa_isr_expands_total",): metric(before, "samsa_isr_expands_total") + 1,
        ("samsa_under_replicated_partitions",): 0,
        ("samsa_partition_in_sync_replicas", "c", 0): 2})
