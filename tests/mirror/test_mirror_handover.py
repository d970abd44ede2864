"""Partitions change hands without copying twice (issue 16): two mirror
processes of one group copy a cluster under load (~10 k msg/s); a clean stop
of one (SIGTERM) and its restart, or a member added, moves partitions between
them twice, and every message reaches the target exactly once. Before the
fix, the member giving partitions up released them with up to a publish
interval of copies not yet committed, and the new owner copied those again
(256-345 duplicates per SIGTERM + restart, seen from outside)."""
from __future__ import annotations

import signal
import threading
import time

import pytest

from broker.coordination import paths
from broker_helpers import wait_until
from mirror_helpers import mirror_config, values_of
from test_mirror_faults import produce, quiesced

TOTAL = 60_000


class Load(threading.Thread):
    """~10 k msg/s into dc-a's ``events`` for 6 s, in the background."""

    def __init__(self, cluster) -> None:
        super().__init__(daemon=True)
        self.cluster = cluster
        self.sent: list[bytes] = []
        self.progress = threading.Condition()

    def run(self) -> None:
        for i in range(0, TOTAL, 1000):
            self.sent.extend(produce(self.cluster.brokers[0].address, "events", i, 1000, 4))
            with self.progress:
                self.progress.notify_all()

    def wait_sent(self, n: int, timeout: float = 60) -> None:
        with self.progress:
            assert self.progress.wait_for(lambda: len(self.sent) >= n, timeout)


def members(cluster, group: str) -> list[str]:
    try:
        return cluster.zk.get_children(paths.consumer_ids_path(group))
    except Exception:   # noqa: BLE001 - not there yet
        return []


def owners(cluster, group: str) -> set[str]:
    """The consumer ids owning partitions of ``events`` now."""
    from kazoo.exceptions import NoNodeError
    out = set()
    try:
        children = cluster.zk.get_children(paths.owners_path(group, "events"))
    except NoNodeError:
        return out
    for bp in children:
        try:
            out.add(cluster.zk.get(paths.owners_path(group, "events", bp))[0].decode())
        except NoNodeError:
            continue                    # released meanwhile
    return out


def finish(source, analysis, load: Load, procs) -> list[bytes]:
    """Once the group has committed every message of the source (all copied
    and acknowledged), stop the mirrors cleanly; the target's values."""
    from broker.client.admin import AdminClient
    from broker.coordination import offsets as zk_offsets
    load.join(120)
    assert len(load.sent) == TOTAL

    def all_committed() -> bool:
        with AdminClient(source.brokers[0].address) as admin:
            ends = {("events", f"0-{p}"): admin.latest_offset("events", p) for p in range(4)}
        return zk_offsets.read_offsets(source.zk, "mirror-test") == ends
    wait_until(all_committed, 90, what="everything to be copied and committed")
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    for proc in procs:
        assert proc.wait(60) == 0
    wait_until(lambda: quiesced(analysis), 30, what="the target to settle")
    copied = values_of(analysis, "events")
    assert set(copied) == set(load.sent), "a message was lost"
    return copied


@pytest.mark.slow
def test_sigterm_and_restart_of_a_member_copies_nothing_twice(clusters, mirror_processes):
    dc_a, analysis = clusters("dc-a"), clusters("analysis")
    dc_a.create_topic("events", 4)
    config = mirror_config([dc_a], analysis, max_unacknowledged=5000, batch_size=500,
                           target_partitions=2)
    first, second = mirror_processes(config), mirror_processes(config)
    wait_until(lambda: len(members(dc_a, "mirror-test")) == 2, 30, what="two members")
    load = Load(dc_a)
    load.start()
    load.wait_sent(15_000)
    wait_until(lambda: len(owners(dc_a, "mirror-test")) == 2, 30,
               what="both members to own partitions")
    second.send_signal(signal.SIGTERM)               # a clean stop under load ...
    assert second.wait(60) == 0
    wait_until(lambda: owners(dc_a, "mirror-test") == set(members(dc_a, "mirror-test")), 30,
               what="the first member to own everything")
    load.wait_sent(30_000)
    third = mirror_processes(config)                 # ... and its restart
    wait_until(lambda: len(owners(dc_a, "mirror-test")) == 2, 30,
               what="the restarted member to take its share")
    copied = finish(dc_a, analysis, load, [first, third])
    assert len(copied) - len(set(copied)) == 0, "copied twice"


@pytest.mark.slow
def test_adding_a_member_under_load_copies_nothing_twice(clusters, mirror_processes):
    dc_a, analysis = clusters("dc-a"), clusters("analysis")
    dc_a.create_topic("events", 4)
    config = mirror_config([dc_a], analysis, max_unacknowledged=5000, batch_size=500,
                           target_partitions=2)
    first = mirror_processes(config)
    wait_until(lambda: len(members(dc_a, "mirror-test")) == 1, 30, what="one member")
    load = Load(dc_a)
    load.start()
    load.wait_sent(20_000)
    second = mirror_processes(config)
    wait_until(lambda: len(owners(dc_a, "mirror-test")) == 2, 30,
               what="the new member to take its share")
    copied = finish(dc_a, analysis, load, [first, second])
    assert len(copied) - len(set(copied)) == 0, "copied twice"


@pytest.mark.slow
def test_the_lag_metric_sees_a_dead_members_partitions(clusters, mirror_processes):
    """kill -9 of one of two members under load: the survivor's
    samsa_mirror_lag_bytes covers the dead member's partitions too (they
    fall behind while nobody copies them), within 2 s of the kill and at
    every sample after, until it owns and copies them. Before, the metric
    covered only the partitions a process owned: 0 for them for 5-8 s."""
    from broker.client.admin import AdminClient
    from broker.coordination import offsets as zk_offsets
    from broker_helpers import metric, scrape_metrics, unused_port

    dc_a, analysis = clusters("dc-a"), clusters("analysis")
    dc_a.create_topic("events", 4)
    ports = [unused_port(), unused_port()]
    procs = [mirror_processes(mirror_config([dc_a], analysis, max_unacknowledged=5000,
                                            batch_size=500, target_partitions=2,
                                            metrics_port=port, consumer_id=f"m{i}"))
             for i, port in enumerate(ports)]
    wait_until(lambda: len(owners(dc_a, "mirror-test")) == 2, 30, what="two owners")
    load = Load(dc_a)
    load.start()
    load.wait_sent(10_000)
    dead = {bp for bp in dc_a.zk.get_children(paths.owners_path("mirror-test", "events"))
            if dc_a.zk.get(paths.owners_path("mirror-test", "events", bp))[0] == b"m1"}
    # the load goes on for a few seconds more: the dead member's partitions fall behind
    assert dead
    procs[1].kill()
    procs[1].wait(30)
    killed = time.monotonic()

    def committed_lag(bp: str) -> int:
        broker_id, partition = paths.parse_broker_partition(bp)
        with AdminClient(dc_a.brokers[broker_id].address) as admin:
            end = admin.latest_offset("events", partition)
        return end - zk_offsets.read_offsets(dc_a.zk, "mirror-test").get(("events", bp), 0)

    samples = 0
    while True:
        if time.monotonic() - killed < 2.0:
            time.sleep(0.1)          # the metric has up to 2 s to show the partitions
            continue
        scraped = scrape_metrics(ports[0])
        taken_over = owners(dc_a, "mirror-test") == {"m0"} and all(
            dc_a.zk.exists(paths.owners_path("mirror-test", "events", bp)) for bp in dead)
        if taken_over:
            break
        for bp in dead:
            shown = metric(scraped, "samsa_mirror_lag_bytes", source="dc-a", topic="events",
                           partition=bp)
            assert shown is not None, f"{bp} missing from the metric"
            if committed_lag(bp) > 0:
                assert shown > 0, f"{bp}: metric 0 while its committed lag is not"
        samples += 1
        assert time.monotonic() - killed < 60, "the survivor never took the partitions over"
    assert samples >= 3        # the session outlives the kill by seconds: it was watched
    copied = finish(dc_a, analysis, load, [procs[0]])
    assert set(copied) == set(load.sent)
