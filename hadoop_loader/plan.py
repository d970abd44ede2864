"""Planning a load: one work unit per broker-partition byte range.

For every topic of the cluster matching the whitelist (and not the
blacklist; the audit topic never), every broker-partition on a live broker:

    [start, end)  start = the committed offset (state.py), or the earliest
                  retained offset for a partition never loaded
                  end   = the partition's high watermark at plan time

A range longer than ``max_unit_bytes`` is split at segment starts (the
broker's Offsets API by time lists the base offsets of its segments, which
are message boundaries), so several tasks pull one big partition in
parallel; a single segment is never split (no other boundary is known
without reading it).

Retention: a committed offset below the partition's earliest retained one
means data was deleted before it was loaded. ``on_retention_gap="fail"``
(the default) refuses to plan; ``"skip"`` starts at the earliest offset and
reports the bytes skipped (the audit then shows them as loss).

A reload of an hour plans from the ranges recorded for it instead
(``plan_ranges``): the same units, each range checked against what the
brokers still keep, all or nothing.
"""
from __future__ import annotations

import contextlib
import re
import time
from dataclasses import dataclass

from broker.client.admin import AdminClient
from broker.security.credentials import ServiceCredentials
from broker.coordination.cluster import ClusterView
from broker.coordination.zk import make_client, start_client
from broker.coordination.zk_acls import Identity
from broker.protocol.errors import SamsaError

from hadoop_loader import state

AUDIT_TOPIC = "_audit"


class PlanError(RuntimeError):
    pass


@dataclass(frozen=True)
class WorkUnit:
    topic: str
    name: str             # the partition's name: "b-p", or a replicated partition's "p"
    partition: int        # its number on the broker that serves it
    address: str          # that broker's host:port (a replicated partition's leader)
    start: int
    end: int

    @property
    def key(self) -> str:
        return state.key(self.topic, self.name)

    @property
    def size(self) -> int:
        return self.end - self.start


@dataclass
class Plan:
    units: list[WorkUnit]
    ends: dict[str, int]              # per broker-partition key: where this load stops
    skipped: dict[str, tuple[int, int]]   # retention gaps skipped: key -> (from, to)

    @property
    def total_bytes(self) -> int:
        return sum(u.size for u in self.units)


def topic_filter(whitelist: str = ".*", blacklist: str = ""):
    """The topics a load takes: whole names matching the whitelist and not
    the blacklist; never the audit topic."""
    allow = re.compile(whitelist)
    deny = re.compile(blacklist) if blacklist else None
    return lambda topic: (topic != AUDIT_TOPIC and allow.fullmatch(topic) is not None
                          and not (deny and deny.fullmatch(topic)))


def split_range(start: int, end: int, boundaries: list[int], max_bytes: int) -> list[tuple[int, int]]:
    """[start, end) cut at ``boundaries`` (message boundaries inside it) so
    that each piece is at most ``max_bytes`` when the boundaries allow."""
    cuts = sorted(b for b in set(boundaries) if start < b < end)
    pieces = []
    piece_start = start
    last_cut = start
    for b in cuts + [end]:
        if b - piece_start > max_bytes and last_cut > piece_start:
            pieces.append((piece_start, last_cut))
            piece_start = last_cut
        last_cut = b
    pieces.append((piece_start, end))
    return [p for p in pieces if p[1] > p[0]]


@contextlib.contextmanager
def _cluster(zookeeper: str, credentials: ServiceCredentials):
    """(the cluster's view, an AdminClient per broker address, made on first
    use), for the length of a plan; the addresses are the brokers' TLS
    listeners when ``credentials.tls``."""
    options = credentials.admin_options()
    client = make_client(zookeeper,
                         identity=Identity.from_file(credentials.zookeeper_auth_file),
                         tls=credentials.zookeeper_tls_settings())
    try:
        start_client(client, zookeeper, timeout=10.0, what="loader")
    except OSError as exc:
        raise PlanError(f"cannot plan: {exc}") from None
    admins: dict[str, AdminClient] = {}
    try:
        yield ClusterView(client, tls=credentials.tls), \
            lambda address: admins.get(address) or admins.setdefault(
                address, AdminClient(address, "samsa-loader", **options))
    except SamsaError as exc:
        # a broker's refusal (authentication, authorization, ...): bad
        # settings or grants, not a bug: said as such
        raise PlanError(f"cannot plan: a broker of {zookeeper} refused: {exc}") from None
    finally:
        for admin in admins.values():
            admin.close()
        client.stop()
        client.close()


def _units(topic: str, name: str, partition: int, address: str, admin, start: int,
           end: int, max_unit_bytes: int, stamp: int) -> list[WorkUnit]:
    """[start, end) as work units of at most ``max_unit_bytes`` where segment
    starts allow."""
    segments = admin.offsets(topic, partition, stamp, max_offsets=100_000) \
        if end - start > max_unit_bytes else []
    return [WorkUnit(topic, name, partition, address, a, b)
            for a, b in split_range(start, end, segments, max_unit_bytes)]


def plan(zookeeper: str, committed: dict[str, int], *, whitelist: str = ".*",
         blacklist: str = "", max_unit_bytes: int = 256 << 20,
         on_retention_gap: str = "fail", now_ms: int | None = None,
         credentials: ServiceCredentials = ServiceCredentials()) -> Plan:
    """The work of one load of the cluster at ``zookeeper`` (with its chroot),
    asked of its brokers with ``credentials``."""
    if on_retention_gap not in ("fail", "skip"):
        raise ValueError("on_retention_gap is 'fail' or 'skip'")
    loaded = topic_filter(whitelist, blacklist)
    units: list[WorkUnit] = []
    ends: dict[str, int] = {}
    skipped: dict[str, tuple[int, int]] = {}
    stamp = int(time.time() * 1000) if now_ms is None else now_ms
    with _cluster(zookeeper, credentials) as (view, admin_for):
        for topic in view.topics():
            if not loaded(topic):
                continue
            for bp in view.partitions(topic):
                broker_id, partition = view.locate(topic, bp)
                address = view.address(broker_id) if broker_id is not None else None
                if address is None:
                    continue              # no leader now: the next load takes it
                admin = admin_for(address)
                earliest = admin.earliest_offset(topic, partition)
                latest = admin.latest_offset(topic, partition)
                k = state.key(topic, bp)
                start = committed.get(k, earliest)
                if start < earliest:
                    if on_retention_gap == "fail":
                        raise PlanError(
                            f"{k}: the last load stopped at offset {start}, but the broker "
                            f"keeps data only from {earliest} ({earliest - start} bytes "
                            f"were deleted by retention before they were loaded); set "
                            f"on_retention_gap=skip to go on from {earliest} and record "
                            f"the loss")
                    skipped[k] = (start, earliest)
                    start = earliest
                if start > latest:
                    raise PlanError(f"{k}: the last load stopped at {start}, beyond the "
                                    f"partition's end {latest} (was the topic re-created?)")
                ends[k] = latest
                if latest > start:
                    units += _units(topic, bp, partition, address, admin, start,
                                    latest, max_unit_bytes, stamp)
    return Plan(units, ends, skipped)


class RetentionCut(PlanError):
    """Part of the ranges to re-read has been deleted by the brokers' retention."""


def plan_ranges(zookeeper: str, ranges: dict[str, list[list[int]]], *,
                max_unit_bytes: int = 256 << 20, now_ms: int | None = None,
                credentials: ServiceCredentials = ServiceCredentials()) -> Plan:
    """The work of re-reading ``ranges`` ({broker-partition key: [[start,
    end], ...]}, an hour's record: state.HourRanges). RetentionCut naming
    every broker-partition whose earliest retained offset lies past the
    start of its first range; PlanError when a broker-partition is not on a
    live broker or ends before its ranges do. Nothing is read."""
    stamp = int(time.time() * 1000) if now_ms is None else now_ms
    units: list[WorkUnit] = []
    cut: list[str] = []
    with _cluster(zookeeper, credentials) as (view, admin_for):
        for k, spans in sorted(ranges.items()):
            topic, name = state.parse_key(k)
            broker_id, partition = view.locate(topic, name)
            address = view.address(broker_id) if broker_id is not None else None
            if address is None:
                raise PlanError(f"{k}: broker {broker_id} is not registered in the cluster: "
                                f"its ranges cannot be read again" if broker_id is not None
                                else f"{k}: the partition has no leader now: its ranges "
                                     f"cannot be read again")
            admin = admin_for(address)
            earliest = admin.earliest_offset(topic, partition)
            latest = admin.latest_offset(topic, partition)
            first, last = spans[0][0], spans[-1][1]
            if earliest > first:
                cut.append(f"{k} held them from offset {first}, the broker keeps data only "
                           f"from {earliest} ({earliest - first} bytes deleted)")
                continue
            if last > latest:
                raise PlanError(f"{k}: the rows were read up to offset {last}, beyond the "
                                f"partition's end {latest} (was the topic re-created?)")
            for start, end in spans:
                units += _units(topic, name, partition, address, admin, start, end,
                                max_unit_bytes, stamp)
    if cut:
        raise RetentionCut("; ".join(cut))
    return Plan(units, {}, {})
