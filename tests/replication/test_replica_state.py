"""The pure rules of replication (broker/coordination/replica_state.py):
placement across racks, the choice of a leader, the JSON of the ZooKeeper
records."""
from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from broker.coordination.replica_state import (NO_LEADER, PartitionState, PlacementError,
                                               TopicAssignment, choose_leader, place_replicas,
                                               split_topic_config)


@given(st.dictionaries(st.integers(0, 50), st.sampled_from([None, "a", "b", "c"]), min_size=1,
                       max_size=12),
       st.integers(1, 40), st.integers(1, 4), st.integers(0, 100))
def test_placement_gives_distinct_replicas_spread_over_racks(brokers, partitions, factor, start):
    if factor > len(brokers):
        with pytest.raises(PlacementError):
            place_replicas(brokers, partitions, factor, start)
        return
    placement = place_replicas(brokers, partitions, factor, start)
    assert len(placement) == partitions
    racks = {r for r in brokers.values()}
    for replicas in placement:
        assert len(set(replicas)) == factor and set(replicas) <= set(brokers)
        # as many racks as the factor allows, when every rack has as many brokers
        sizes = {rack: sum(1 for r in brokers.values() if r == rack) for rack in racks}
        if len(set(sizes.values())) == 1:
            assert len({brokers[b] for b in replicas}) == min(len(racks), factor)
    if partitions >= len(brokers):
        assert {r[0] for r in placement} == set(brokers)      # leaders rotate over all


def test_choose_leader_prefers_assignment_order_among_live_in_sync():
    assert choose_leader((3, 1, 2), (1, 2, 3), {1, 2, 3}) == (3, False)
    assert choose_leader((3, 1, 2), (1, 2), {1, 2, 3}) == (1, False)
    assert choose_leader((3, 1, 2), (3,), {1, 2}) == (NO_LEADER, False)
    assert choose_leader((3, 1, 2), (3,), {1, 2}, unclean=True) == (1, True)
    assert choose_leader((3, 1, 2), (3,), set(), unclean=True) == (NO_LEADER, False)


def test_state_and_assignment_round_trip_and_reject_garbage():
    s = PartitionState(2, 7, (2, 0), 3)
    assert PartitionState.from_json(s.to_json()) == s
    assert s.with_leader(0, (0,), 4) == PartitionState(0, 8, (0,), 4)
    a = TopicAssignment(((1, 2), (2, 1)), {"min.insync.replicas": "2"})
    assert TopicAssignment.from_json(a.to_json()) == a
    assert a.replication_factor == 2
    for bad in (b"", b"{}", b"[1]", b'{"leader": "x"}', b"\xff"):
        with pytest.raises(ValueError):
            PartitionState.from_json(bad)
    for bad in (b'{"partitions": []}', b'{"partitions": [[1, 1]]}', b'{"partitions": [[]]}',
                b"null"):
        with pytest.raises(ValueError):
            TopicAssignment.from_json(bad)


def test_topic_config_splits_replication_from_log_settings():
    replication, logs = split_topic_config({"replication.factor": "3", "retention.ms": "5",
                                            "min.insync.replicas": "2"})
    assert replication == {"replication.factor": "3", "min.insync.replicas": "2"}
    assert logs == {"retention.ms": "5"}
