"""How far a consumer group is behind, per partition, in bytes: one function
for the groups tool (``python -m broker.tools groups``) and the lab's status.
(The mirror's lag metrics and the lag service judge lag with monitor.py.)

A partition's lag is the bytes between where the group stands (its position:
a committed offset, or a position the caller knows better) and the
partition's latest offset (the high watermark).
Offsets are byte positions, so the lag is in bytes. Where no position is
known the caller chooses: count from the partition's earliest offset (what a
new member would read) or report no lag.

Reads offsets from the brokers with the Offsets API; never touches broker
internals. Broker addresses come from the cluster's view in ZooKeeper
(anything with ``address(broker_id)``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping, Protocol

from broker.protocol.errors import SamsaError

from broker.client.admin import AdminClient
from broker.client.connection import BrokerConnectionError


class BrokerAddresses(Protocol):
    def address(self, broker_id: int) -> str | None: ...

    def locate(self, topic: str, name: str) -> tuple[int | None, int]: ...


@dataclass(frozen=True)
class PartitionLag:
    topic: str
    partition: str              # the broker-partition "b-p", or a replicated one's number
    position: int | None        # where the group stands (None: nothing known)
    log_end: int | None         # the partition's latest offset (None: unreachable)
    lag: int | None             # bytes behind (None when unknown)
    uncommitted: bool = False   # no position was known: counted from the earliest offset
    error: str | None = None


class AdminPool:
    """One AdminClient per broker address, reused across calls; close() when done."""

    def __init__(self, client_id: str = "samsa-lag", request_timeout: float = 5.0,
                 tls=None, sasl=None) -> None:
        """``tls``, ``sasl``: as AdminClient's, for brokers that ask for them."""
        self.client_id = client_id
        self.request_timeout = request_timeout
        self.tls, self.sasl = tls, sasl
        self._admins: dict[str, AdminClient] = {}

    def get(self, address: str) -> AdminClient:
        admin = self._admins.get(address)
        if admin is None:
            admin = self._admins[address] = AdminClient(address, self.client_id,
                                                        request_timeout=self.request_timeout,
                                                        tls=self.tls, sasl=self.sasl)
        return admin

    def drop(self, address: str) -> None:
        admin = self._admins.pop(address, None)
        if admin is not None:
            admin.close()

    def close(self) -> None:
        for address in list(self._admins):
            self.drop(address)

    def __enter__(self) -> "AdminPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def partition_lags(brokers: BrokerAddresses, partitions: Iterable[tuple[str, str]],
                   positions: Mapping[tuple[str, str], int], pool: AdminPool,
                   from_earliest: bool = True) -> list[PartitionLag]:
    """The lag of each (topic, broker-partition), in the order given.
    ``from_earliest``: a partition with no position counts from its earliest
    offset (and is marked ``uncommitted``); otherwise its lag is None."""
    out = []
    for topic, bp in partitions:
        broker_id, partition = brokers.locate(topic, bp)
        position = positions.get((topic, bp))
        address = brokers.address(broker_id) if broker_id is not None else None
        if address is None:
            out.append(PartitionLag(topic, bp, position, None, None,
                                    error=f"broker {broker_id} is not in the cluster"
                                    if broker_id is not None else "the partition has no leader"))
            continue
        try:
            admin = pool.get(address)
            end = admin.latest_offset(topic, partition)
            uncommitted = position is None
            if uncommitted and from_earliest:
                position = admin.earliest_offset(topic, partition)
        except (BrokerConnectionError, SamsaError, OSError, ValueError) as exc:
            pool.drop(address)
            out.append(PartitionLag(topic, bp, position, None, None, error=str(exc)))
            continue
        lag = max(0, end - position) if position is not None else None
        out.append(PartitionLag(topic, bp, position, end, lag, uncommitted))
    return out
