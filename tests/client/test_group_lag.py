"""broker/lag/group_lag.py: the one lag computation of the groups tool,
the lab's status and the mirror (issue 9: three copies before), against a
real broker: positions given, missing (from earliest, or unknown), a broker
the cluster does not know."""
from __future__ import annotations

from broker.coordination.paths import parse_broker_partition
from broker.lag.group_lag import AdminPool, partition_lags

from broker_helpers import connect, message_set, produce


class Addresses:
    def __init__(self, known: dict[int, str]) -> None:
        self.known = known

    def address(self, broker_id: int) -> str | None:
        return self.known.get(broker_id)

    def locate(self, topic: str, name: str) -> tuple[int | None, int]:
        return parse_broker_partition(name)       # broker-partitions only here


def test_lags_from_positions_earliest_or_unknown(broker, topic):
    with connect(broker.address) as conn:
        end0 = produce(conn, topic, 0, message_set([b"x" * 100] * 10)).end_offset
        end1 = produce(conn, topic, 1, message_set([b"y" * 100] * 3)).end_offset
    brokers = Addresses({0: broker.address})
    wanted = [(topic, "0-0"), (topic, "0-1"), (topic, "9-0")]
    with AdminPool() as pool:
        rows = partition_lags(brokers, wanted, {(topic, "0-0"): 122}, pool)
        assert [(r.partition, r.position, r.log_end, r.lag, r.uncommitted) for r in rows[:2]] \
            == [("0-0", 122, end0, end0 - 122, False), ("0-1", 0, end1, end1, True)]
        assert rows[2].error and rows[2].lag is None           # broker 9 is not there
        rows = partition_lags(brokers, wanted[:2], {}, pool, from_earliest=False)
        assert [(r.position, r.lag) for r in rows] == [(None, None), (None, None)]
