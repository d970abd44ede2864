"""The mirror's audit counts survive a kill -9 (a defect the drill found:
the mirror committed source offsets before publishing the counts of what it
had copied, so a crash between the two made the audit report a loss at the
mirror tier that never happened). The counts of what a commit covers are
published first now: a crash re-copies and counts again."""
from __future__ import annotations

import signal
import time

import pytest

from audit.counting import AUDIT_TOPIC
from broker.coordination import offsets as zk_offsets
from broker.service_kit.process import read_from
from broker_helpers import wait_until
from cluster_helpers import read_all
from mirror_helpers import mirror_config
from schemas import catalog
from schemas.registry import SchemaRegistry
from schemas.wire import ValueReader
from test_mirror_faults import SIZE, messages_in, produce

N = 5_000


def mirror_counted(analysis) -> int:
    registry = SchemaRegistry.open(f"zookeeper://{analysis.connect}")
    try:
        registry.register(AUDIT_TOPIC, catalog.load(catalog.MONITORING_EVENT))
        reader = ValueReader(registry, subject=AUDIT_TOPIC)
        events = [reader.decode(m.value) for ms in read_all(analysis, AUDIT_TOPIC).values()
                  for m in ms]
    finally:
        registry.close()
    return sum(e["message_count"] for e in events if e["tier"] == "mirror")


@pytest.mark.slow
def test_a_killed_mirror_loses_no_counts(clusters, mirror_processes):
    dc_a, analysis = clusters("dc-a"), clusters("analysis")
    dc_a.create_topic("events", 2)
    assert len(produce(dc_a.brokers[0].address, "events", 0, N, 2)) == N
    # counts published rarely, offsets committed often: the window the defect needed
    config = mirror_config([dc_a], analysis, commit_interval_ms=100,
                           audit_publish_interval_ms=600_000, target_partitions=2)
    first = mirror_processes(config)
    wait_until(lambda: messages_in(analysis, "events") >= N, 60, what="the copy")
    # several commit intervals (100 ms): before the fix everything is committed
    # by then, with no count published. What must not happen can only be
    # watched for a while: there is no event to wait on.
    time.sleep(1.0)
    first.send_signal(signal.SIGKILL)
    first.wait(30)
    assert mirror_counted(analysis) == 0          # nothing published before the kill

    second = mirror_processes(config)
    _proc, log_path = mirror_processes.logs[-1]
    wait_until(lambda: "copying" in read_from(log_path), 30, what="the restarted mirror")

    def committed() -> int:
        return sum(zk_offsets.read_offsets(dc_a.zk, "mirror-test").values())
    # fixed: nothing was committed, so it copies (and counts) everything again;
    # the defect: everything was committed, nothing is copied again
    wait_until(lambda: messages_in(analysis, "events") >= 2 * N or committed() >= N * SIZE,
               60, what="the restarted mirror to copy again or find everything committed")
    second.send_signal(signal.SIGTERM)
    assert second.wait(60) == 0
    assert committed() == N * SIZE                # its stop published, then committed
    # every message copied is counted at the mirror tier (some twice: re-copied)
    assert mirror_counted(analysis) >= N
