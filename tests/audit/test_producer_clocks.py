"""Producer hosts whose clocks are off (issue 29, point 5): the audit buckets
by event time, which is the producer host's clock, and must not call that
clock's error a loss.

The clock cannot be put off per process (Linux time namespaces offset the
monotonic and boot clocks, not CLOCK_REALTIME), so the producers here run
with a faked clock, ``audit.counting.offset_clock``: their events are
stamped with it and their producer tier counts by it, as on a host whose
clock is wrong. Everything else (brokers, ZooKeeper, the mirror, the
cluster counters, the audit service) is real and reads the system's clock.

* minutes off, behind or ahead (less than the grace): every tier counts
  the events in the windows of their own event time, and every window is
  complete, never lost on the way;
* hours behind: the events land in windows whose grace ran out long ago.
  The grace runs from the producers' report of a window as well as from
  its end, so those windows are pending until the tiers have counted, then
  complete; a real loss among them is still called lost, a grace after
  the report (before, the window read lost as soon as the producers'
  report was stored, before any counter could count);
* days ahead: every tier counts the events in the windows of their event
  time (before, the counters, whose clocks are right, took anything more
  than a day ahead of their clock for "no time" and counted it in the
  window of its arrival, so the producers' windows read lost once they had
  passed and the arrival window duplicated).
"""
from __future__ import annotations

import threading
import time

import pytest

from audit.cluster_counter import ClusterCounter
from audit.compare import LOSING
from audit.config import CountConfig, ServeConfig
from audit.counting import AUDIT_TOPIC, AuditedProducer, offset_clock
from audit.service import AuditService
from audit_helpers import WINDOW, page_views
from broker.client.cluster_producer import ClusterProducer
from broker.client.producer import Producer
from broker.coordination.named_cluster import NamedCluster
from broker.harness.lying_proxy import LyingProxy
from broker_helpers import wait_until
from mirror.config import MirrorConfig
from mirror.mirror import Mirror
from schemas.wire import ValueWriter
from test_tiers import zk_registry

MINUTE = 60_000
HOUR = 60 * MINUTE
DAY = 24 * HOUR
GRACE = 30 * MINUTE


def produce_with_clock(producer, registry, offset_ms: int, n: int, name: str = "dc-a"
                       ) -> list[int]:
    """``n`` page views through an audited ``producer`` whose host clock is
    ``offset_ms`` off: each event stamped with that clock when it is sent,
    as an application does, and the producer tier counting by it. Their
    event times."""
    clock = offset_clock(offset_ms)
    writer = ValueWriter(registry, "page_views")
    times = []
    with AuditedProducer.publishing(producer, ValueWriter(registry, AUDIT_TOPIC),
                                    datacenter=name, cluster=name, window_ms=WINDOW,
                                    clock=clock) as audited:
        for _ in range(n):
            t = int(clock() * 1000)
            (value,), _ids = page_views(writer, [t])
            audited.send("page_views", value, timestamp=t)
            times.append(t)
        publisher = audited.publisher
    assert publisher.published > 0 and publisher.unsent == 0
    return times


def windows_of(times) -> set[int]:
    return {t - t % WINDOW for t in times}


class Reader:
    """The audit service reading its cluster's audit topic in a thread."""

    def __init__(self, service: AuditService) -> None:
        self.service = service
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=lambda: [service.step() for _ in iter(self._stop.is_set, True)])
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(30)


def verdicts(service: AuditService, windows, now_ms: int | None = None) -> dict:
    """{(window, tier, cluster): verdict} of ``windows``, compared with
    every tier seen up to now (a tier that reported since, and not these
    windows, is compared as 0, as in the service's default period)."""
    begin = min(windows)
    end = max(max(windows), int(time.time() * 1000)) + WINDOW
    return {(v.window_begin_ms, v.tier, v.cluster): v
            for v in service.verdicts("page_views", begin, end, now_ms=now_ms)
            if v.window_begin_ms in windows}


def run_counter(cluster, name: str) -> tuple[ClusterCounter, threading.Thread]:
    counter = ClusterCounter(CountConfig(cluster=name, zookeeper=cluster.connect,
                                         window_ms=WINDOW, publish_interval_ms=300,
                                         group=f"count-{name}"))
    thread = threading.Thread(target=counter.run)
    thread.start()
    return counter, thread


def stop_counter(counter: ClusterCounter, thread: threading.Thread) -> None:
    counter.stop()
    thread.join(30)
    counter.close()


@pytest.mark.slow
def test_producers_minutes_behind_and_ahead_lose_nothing_at_any_tier(clusters, tmp_path):
    """Two producers of dc-a, one 15 minutes behind and one 15 minutes
    ahead (the grace is 30), mirrored into analysis: the producer, cluster,
    mirror and analysis tiers count every event in the window of its own
    event time, all complete, and no verdict reads lost on the way."""
    dc, analysis = clusters("dc-a"), clusters("analysis")
    registries = [zk_registry(dc), zk_registry(analysis)]
    behind = produce_with_clock(ClusterProducer(dc.connect, acks="flushed"), registries[0],
                                -15 * MINUTE, 40)
    ahead = produce_with_clock(ClusterProducer(dc.connect, acks="flushed"), registries[0],
                               15 * MINUTE, 60)
    windows = windows_of(behind) | windows_of(ahead)
    real_now = int(time.time() * 1000)
    assert max(behind) < real_now - 14 * MINUTE and min(ahead) > real_now + 14 * MINUTE

    counters = [run_counter(dc, "dc-a"), run_counter(analysis, "analysis")]
    mirror = Mirror(MirrorConfig(
        sources=(NamedCluster("dc-a", dc.connect),),
        target=NamedCluster("analysis", analysis.connect), group="mirror-clocks",
        metrics_port=-1, audit_window_ms=WINDOW, audit_publish_interval_ms=300))
    service = AuditService(ServeConfig(zookeeper=analysis.connect, http_port=0,
                                       data_dir=str(tmp_path), grace_ms=GRACE))
    mirror.start()
    reader = Reader(service)
    tiers = {("cluster", "dc-a"), ("mirror", "dc-a"), ("cluster", "analysis")}
    seen_states: set[str] = set()

    def settled() -> bool:
        found = verdicts(service, windows)
        seen_states.update(v.state for v in found.values())
        done = {(w, t, c) for (w, t, c), v in found.items() if v.state == "complete"}
        return done >= {(w, t, c) for w in windows for t, c in tiers | {("producer", "dc-a")}}

    try:
        wait_until(settled, 120, what=lambda: f"every tier complete: {verdicts(service, windows)}")
        found = verdicts(service, windows)
    finally:
        reader.close()
        mirror.close()
        for counter, thread in counters:
            stop_counter(counter, thread)
        service.close()
        for r in registries:
            r.close()
    assert not seen_states & set(LOSING), seen_states
    # the windows are those of the skewed event times, at every tier, and
    # hold exactly what was produced in them: nothing went to other windows
    for tier, cluster in tiers | {("producer", "dc-a")}:
        at_tier = {w: v for (w, t, c), v in found.items() if (t, c) == (tier, cluster)}
        assert set(at_tier) == windows, (tier, cluster, sorted(at_tier))
        for w, v in at_tier.items():
            produced = sum(1 for t in behind + ahead if t - t % WINDOW == w)
            assert (v.state, v.count, v.missing, v.duplicated, v.no_time) == \
                ("complete", produced, 0, 0, 0), v


@pytest.mark.slow
def test_a_producer_hours_behind_is_pending_until_counted_and_a_real_loss_is_still_lost(
        clusters, tmp_path):
    """A producer three hours behind writes into windows whose grace ran out
    long ago, while dc-a's counter is down for a deploy; another one, three
    hours and twenty minutes behind, loses 3 messages on the way (a lying
    proxy acknowledges them and drops them). Until the counter counts
    again, both windows are pending, not lost (before the fix: lost at once);
    then the first is complete, and the second is lost, 3 exact, once the
    grace from the producers' report has passed."""
    dc = clusters("dc-a")
    registry = zk_registry(dc)
    service = AuditService(ServeConfig(zookeeper=dc.connect, http_port=0,
                                       data_dir=str(tmp_path), grace_ms=GRACE))
    reader = Reader(service)
    try:
        # the counter runs and reports the current window, then stops
        now_times = produce_with_clock(ClusterProducer(dc.connect, acks="flushed"), registry,
                                       0, 20)
        counter, thread = run_counter(dc, "dc-a")
        wait_until(lambda: all(v.state == "complete" for v in
                               verdicts(service, windows_of(now_times)).values())
                   and len(verdicts(service, windows_of(now_times))) >= 2, 60,
                   what="the counter to report the current window")
        stop_counter(counter, thread)

        honest = produce_with_clock(ClusterProducer(dc.connect, acks="flushed"), registry,
                                    -3 * HOUR, 30)
        broker = next(iter(dc.brokers.values()))
        drops = iter(range(3))

        def decide(topic: str, message) -> int:
            return 0 if topic == "page_views" and next(drops, None) is not None else 1

        proxy = LyingProxy(("127.0.0.1", broker.port), decide).start()
        try:
            lossy = produce_with_clock(Producer(bootstrap=f"127.0.0.1:{proxy.port}",
                                                acks="flushed"), registry,
                                       -3 * HOUR - 20 * MINUTE, 30)
        finally:
            proxy.close()
        assert len(proxy.dropped) == 3
        honest_w, lossy_w = windows_of(honest), windows_of(lossy)
        assert not honest_w & lossy_w
        windows = honest_w | lossy_w
        assert max(windows) + WINDOW + GRACE < int(time.time() * 1000)   # long past the grace

        def producers_stored() -> bool:
            found = verdicts(service, windows)
            return sum(v.produced for (w, t, c), v in found.items() if t == "producer") == 60

        wait_until(producers_stored, 60, what="the producers' reports to be stored")
        # the counter is down: nothing counted these windows yet; they wait
        found = verdicts(service, windows)
        cluster = {w: v.state for (w, t, c), v in found.items() if t == "cluster"}
        assert cluster == {w: "pending" for w in windows}, cluster

        states: set[str] = set()

        def counted() -> bool:
            found = verdicts(service, windows)
            states.update(v.state for (w, t, c), v in found.items() if t == "cluster")
            return {w: (v.state, v.count) for (w, t, c), v in found.items() if t == "cluster"} \
                == {**{w: ("complete", 30) for w in honest_w},
                    **{w: ("pending", 27) for w in lossy_w}}

        counter, thread = run_counter(dc, "dc-a")
        try:
            wait_until(counted, 60, what=lambda: f"the counter to count the late windows: "
                                                 f"{verdicts(service, windows)}")
        finally:
            stop_counter(counter, thread)
        assert not states & set(LOSING), states

        # a grace after the producers' last report: the loss is called, exactly
        reported = max(r.reported_ms for r in service.store.totals("page_views")
                       if r.tier == "producer" and r.window_begin_ms in windows)
        later = verdicts(service, windows, now_ms=reported + GRACE)
        assert {w: (v.state, v.missing, v.exact) for (w, t, c), v in later.items()
                if t == "cluster"} == {**{w: ("complete", 0, True) for w in honest_w},
                                       **{w: ("lost", 3, True) for w in lossy_w}}
        just_before = verdicts(service, windows, now_ms=reported + GRACE - 1)
        assert {v.state for (w, t, c), v in just_before.items()
                if t == "cluster" and w in lossy_w} == {"pending"}
    finally:
        reader.close()
        service.close()
        registry.close()


@pytest.mark.slow
def test_a_producer_two_days_ahead_is_counted_in_its_windows_at_every_tier(clusters, tmp_path):
    """A producer two days ahead: its events are counted by the cluster
    counter (right clock) in the windows of their event time, as by the
    producer tier, and are complete there; none is taken for "no time"
    (before the fix, the counter put them in the window of their arrival,
    and the producers' windows could only end lost)."""
    dc = clusters("dc-a")
    registry = zk_registry(dc)
    service = AuditService(ServeConfig(zookeeper=dc.connect, http_port=0,
                                       data_dir=str(tmp_path), grace_ms=GRACE))
    reader = Reader(service)
    counter, thread = run_counter(dc, "dc-a")
    try:
        ahead = produce_with_clock(ClusterProducer(dc.connect, acks="flushed"), registry,
                                   2 * DAY, 50)
        windows = windows_of(ahead)
        assert min(windows) > int(time.time() * 1000) + DAY

        def counted() -> dict:
            found = verdicts(service, windows)
            return {(w, t): (v.state, v.count, v.no_time) for (w, t, c), v in found.items()}

        wait_until(lambda: all(counted().get((w, t), ("",))[0] == "complete" for w in windows
                               for t in ("producer", "cluster")), 60,
                   what=lambda: f"both tiers complete in the future windows: {counted()}")
        for (w, t), (state, count, no_time) in counted().items():
            assert (state, count, no_time) == \
                ("complete", sum(1 for x in ahead if x - x % WINDOW == w), 0)
        # nothing was counted anywhere else (the window of arrival, before)
        now = int(time.time() * 1000)
        others = [r for r in service.store.totals("page_views")
                  if r.window_begin_ms not in windows]
        assert others == [], others
        assert now < min(windows)
    finally:
        stop_counter(counter, thread)
        reader.close()
        service.close()
        registry.close()


def test_the_traffic_generator_can_run_on_a_host_whose_clock_is_behind(clusters):
    """``TrafficConfig(clock_offset_ms=...)``: the demo's traffic stamped by a
    clock 20 minutes behind, and its producer tier counting by that clock:
    the monitoring events count every message in the window of its event
    time, and carry the producer's (wrong) time."""
    from cluster_helpers import read_all
    from infra.local.traffic import TrafficConfig, produce
    from test_tiers import audit_events
    dc = clusters("dc-a")
    now = int(time.time() * 1000)
    config = TrafficConfig(messages_per_dc=300, hours=1, batch_size=100, partitions=1,
                           clock_offset_ms=-20 * MINUTE)
    result = produce({"dc-a": (dc.brokers[0].address, dc.connect)}, config, now_ms=now)
    assert result.total("dc-a") == 300
    stamps = [m.timestamp for ms in read_all(dc, "page_views").values() for m in ms]
    assert len(stamps) == 180 and max(stamps) <= now - 20 * MINUTE
    with zk_registry(dc) as registry:
        events = [e for e in audit_events(dc, registry)
                  if e["tier"] == "producer" and e["topic"] == "page_views"]
    counted: dict[int, int] = {}
    for e in events:
        counted[e["window_begin_ms"]] = counted.get(e["window_begin_ms"], 0) \
            + e["message_count"]
    by_window: dict[int, int] = {}
    for t in stamps:
        by_window[t - t % WINDOW] = by_window.get(t - t % WINDOW, 0) + 1
    assert counted == by_window
    published = [e["header"]["time_ms"] for e in events]
    assert max(published) < int(time.time() * 1000) - 19 * MINUTE
