"""Realistic traffic for the demo and the drills: Avro events of several
topics produced through each datacenter's load balancer by audited producers.

* topics ``page_views`` (the v2 schema, with a session id, from
  ``v2_from`` of the way through), ``searches`` and ``logins``, in the
  proportions 6 : 3 : 1; keys are member ids (a member's events stay in one
  partition, in order);
* event times spread evenly over the last ``hours`` whole hours (a
  datacenter's clock, not the producer's: the audit and the loader bucket
  by event time), the hour being loaded included; ``clock_offset_ms``
  shifts them, and the producer tier's clock, as a producer host whose
  clock is off would;
* per datacenter one ``AuditedProducer`` publishing the producer tier's
  monitoring events to that cluster's audit topic; what was acknowledged is
  counted per datacenter, topic and hour. It sends through the load
  balancer with ``acks="flushed"``, or, on a replicated cluster, to each
  partition's leader (a ``ClusterProducer``, leaders found in ZooKeeper)
  with ``acks="all"``.

The registry of every datacenter gets the shipped schemas first. In a
secured lab (``security``: its LabSecurity) the producers are its
``producer`` user over TLS, topics are made as its ``admin`` and schemas
registered with the registry's ZooKeeper identity.
"""
from __future__ import annotations

import random
import sys
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from infra.local.lab_security import LabSecurity
    from broker.coordination.zk_tls import ZooKeeperTls

HOUR_MS = 3_600_000
TOPIC_WEIGHTS = (("page_views", 6), ("searches", 3), ("logins", 1))
PAGES = ("feed", "profile", "jobs", "messaging", "search", "company")
VERTICALS = ("ALL", "PEOPLE", "JOBS", "COMPANIES", "POSTS")


@dataclass(frozen=True)
class TrafficConfig:
    messages_per_dc: int = 20_000
    hours: int = 3
    """Event times over the last ``hours`` whole hours before ``now``."""
    v2_from: float = 0.5
    """Page views switch to schema v2 this far through the traffic."""
    members: int = 5_000
    """Member ids (the events' keys) are drawn from 1..members."""
    partitions: int = 4
    """Partitions per broker of each topic (created before the first send)."""
    batch_size: int = 500
    window_ms: int = 600_000
    seed: int = 1
    clock_offset_ms: int = 0
    """How far the producer hosts' clocks are off (negative: behind): ``now``
    and the producer tier's clock are the system's plus it, so event times
    and the producer tier's counts are those of a host with a wrong clock
    (docs/audit.md, "Producer clocks")."""

    def __post_init__(self) -> None:
        if self.messages_per_dc <= 0 or self.hours <= 0 or not 0 <= self.v2_from <= 1:
            raise ValueError("messages_per_dc and hours must be positive, v2_from in 0..1")


@dataclass
class TrafficResult:
    """What the brokers acknowledged: datacenter -> topic -> hour start (ms) -> count."""
    acked: dict[str, dict[str, dict[int, int]]] = field(default_factory=dict)
    seconds: float = 0.0
    first_hour_ms: int = 0
    failed: int = 0               # sends not acknowledged after the producer's retries

    def add(self, dc: str, topic: str, hour_ms: int, n: int = 1) -> None:
        hours = self.acked.setdefault(dc, {}).setdefault(topic, {})
        hours[hour_ms] = hours.get(hour_ms, 0) + n

    def total(self, dc: str | None = None, topic: str | None = None) -> int:
        return sum(n for d, topics in self.acked.items() if dc in (None, d)
                   for t, hours in topics.items() if topic in (None, t)
                   for n in hours.values())

    def per_topic_hour(self) -> dict[tuple[str, int], int]:
        """(topic, hour start) -> count, every datacenter together."""
        out: dict[tuple[str, int], int] = {}
        for topics in self.acked.values():
            for topic, hours in topics.items():
                for hour, n in hours.items():
                    out[(topic, hour)] = out.get((topic, hour), 0) + n
        return out


def make_event(topic: str, rng: random.Random, t: int, v2: bool,
               members: int) -> tuple[dict, bytes, int]:
    """(record, key, schema version) of one event at time ``t``."""
    member = rng.randrange(1, members + 1)
    header = {"time_ms": t, "host": f"web-{rng.randrange(20)}", "service": "frontend",
              "event_id": uuid.UUID(int=rng.getrandbits(128), version=4).bytes}
    if topic == "page_views":
        rec = {"header": header, "member_id": member, "page_key": rng.choice(PAGES),
               "url": f"/{rng.choice(PAGES)}/{rng.randrange(10_000)}", "referrer": None,
               "user_agent": "Mozilla/5.0 (demo)", "duration_ms": rng.randrange(5, 5_000)}
        if v2:
            rec["session_id"] = f"s-{member}-{t // 1_800_000}"
        return rec, str(member).encode(), 2 if v2 else 1
    if topic == "searches":
        return ({"header": header, "member_id": member, "query": f"q{rng.randrange(50_000)}",
                 "vertical": rng.choice(VERTICALS), "result_count": rng.randrange(200),
                 "page": rng.randrange(3)}, str(member).encode(), 1)
    return ({"header": header, "member_id": member,
             "method": rng.choice(("PASSWORD", "SSO", "TOKEN")), "success": rng.random() > 0.05,
             "failure_reason": None, "client_ip": f"10.{rng.randrange(256)}.{rng.randrange(256)}.1"},
            str(member).encode(), 1)


def create_topics(zookeeper: str, topics, partitions: int = 4,
                  admin_options: dict | None = None,
                  zookeeper_tls: ZooKeeperTls | None = None) -> bool:
    """Create ``topics`` on every broker of the cluster (keyed messages need
    their topic's partition count; through a load balancer the producer may
    reach any broker). An existing topic is left as it is. On a replicated
    cluster (brokers with ``replication_factor`` >= 1) the first broker
    creates each topic cluster-wide with ``partitions`` partitions in all.
    Returns whether the topics are replicated. ``admin_options``: the
    AdminClient's ``tls`` and ``sasl`` for brokers that ask for them (with
    ``tls``, the brokers' TLS listeners are used); ``zookeeper_tls``: how
    ZooKeeper is reached (None: plaintext)."""
    from broker.client.admin import AdminClient
    from broker.coordination.cluster import ClusterView
    from broker.coordination.zk import make_client, start_client
    from broker.protocol.errors import ErrorCode, SamsaError
    admin_options = admin_options or {}
    client = make_client(zookeeper, tls=zookeeper_tls)
    start_client(client, zookeeper, timeout=10.0, what="traffic")
    try:
        view = ClusterView(client, tls=admin_options.get("tls") is not None)
        view.wait_for(lambda v: bool(v.brokers()), 10.0)
        for host, port in view.brokers().values():
            missing = [t for t in topics if not view.is_replicated(t)]
            if not missing:
                break                   # made cluster-wide (by an earlier broker or call)
            with AdminClient(f"{host}:{port}", **admin_options) as admin:
                for topic in missing:
                    try:
                        admin.create_topic(topic, partitions)
                    except SamsaError as exc:
                        if exc.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                            raise
            view.wait_for(lambda v: all(v.is_replicated(t) or v.partitions(t) for t in topics),
                          10.0)
        return all(view.is_replicated(t) for t in topics)
    finally:
        client.stop()
        client.close()


def _open_registry(zookeeper: str, security: LabSecurity | None = None):
    """The schema registry in ``zookeeper`` (with the secured lab's
    registry identity, which may write there)."""
    from schemas.registry import SchemaRegistry
    from schemas.stores import open_store
    if security is None:
        return SchemaRegistry.open(f"zookeeper://{zookeeper}")
    from infra.local.lab_security import ZK_REGISTRY
    return SchemaRegistry(open_store(
        f"zookeeper://{zookeeper}",
        zookeeper_auth_file=security.zookeeper_identity_file(ZK_REGISTRY),
        zookeeper_tls=security.zookeeper_tls().kazoo_options()))


def _zookeeper_tls(security: LabSecurity | None) -> ZooKeeperTls | None:
    """How the secured lab's ZooKeeper is reached (over TLS); None: plaintext."""
    return None if security is None else security.zookeeper_tls()


def _admin_options(security: LabSecurity | None) -> dict:
    if security is None:
        return {}
    from infra.local.lab_security import ADMIN
    return security.admin_options(ADMIN)


def prepare_clusters(clusters: dict[str, int], security: LabSecurity | None = None) -> None:
    """For each cluster (a ZooKeeper connect string with chroot -> the
    partitions of its topics, as ``create_topics`` means them): the shipped
    schemas in its registry, and the traffic's topics and the audit topic
    made on its brokers, before any consumer group (mirror, counter) starts:
    a topic made under a running group moves its partitions, and
    at-least-once copies again what was not committed yet. ``security``:
    a secured lab's LabSecurity."""
    from audit.counting import AUDIT_TOPIC
    topics = [t for t, _ in TOPIC_WEIGHTS] + [AUDIT_TOPIC]
    for connect, partitions in clusters.items():
        with _open_registry(connect, security) as registry:
            register_schemas(registry)
        create_topics(connect, topics, partitions, _admin_options(security),
                      _zookeeper_tls(security))


def register_schemas(registry) -> None:
    from schemas import catalog
    catalog.register_defaults(registry)
    registry.register("page_views", catalog.load("samsa.events.PageViewEvent.v2"))


def produce(datacenters: dict[str, tuple[str, str]], config: TrafficConfig,
            now_ms: int | None = None, progress=None,
            first_hour_ms: int | None = None, tolerate_failures: bool = False,
            result: TrafficResult | None = None,
            security: LabSecurity | None = None) -> TrafficResult:
    """Produce ``config.messages_per_dc`` events into each datacenter:
    ``{name: (load balancer address, ZooKeeper connect string with chroot)}``,
    event times over ``config.hours`` hours from ``first_hour_ms`` (default:
    the last hours up to now, the current one included; now being ``now_ms``,
    default the system's clock, plus ``config.clock_offset_ms``). ``progress(done,
    total)`` is called as it goes. ``security``: a secured lab's LabSecurity
    (see the module)."""
    from audit.counting import AUDIT_TOPIC, AuditedProducer, offset_clock
    from schemas.wire import ValueWriter
    client = {}
    if security is not None:
        from infra.local.lab_security import PRODUCER
        client = security.client_settings(PRODUCER)
    now = (int(time.time() * 1000) if now_ms is None else now_ms) + config.clock_offset_ms
    clock = offset_clock(config.clock_offset_ms) if config.clock_offset_ms else time.time
    if first_hour_ms is None:
        first_hour = now - now % HOUR_MS - (config.hours - 1) * HOUR_MS
        span = now - first_hour
    else:
        first_hour = first_hour_ms - first_hour_ms % HOUR_MS
        span = min(config.hours * HOUR_MS, now - first_hour)
    result = result or TrafficResult()
    result.first_hour_ms = result.first_hour_ms or first_hour
    topics = [t for t, w in TOPIC_WEIGHTS for _ in range(w)]
    total = config.messages_per_dc * len(datacenters)
    done = 0
    t0 = time.monotonic()
    for index, (dc, (lb, zookeeper)) in enumerate(sorted(datacenters.items())):
        rng = random.Random(config.seed * 1000 + index)
        registry = _open_registry(zookeeper, security)
        try:
            register_schemas(registry)
            replicated = create_topics(zookeeper, [t for t, _ in TOPIC_WEIGHTS],
                                       config.partitions, _admin_options(security),
                                       _zookeeper_tls(security))
            writers = {(t, v): ValueWriter(registry, t, version=v)
                       for t in ("page_views", "searches", "logins") for v in (1, 2)
                       if v == 1 or t == "page_views"}
            producer = AuditedProducer.publishing(
                _producer(lb, zookeeper, replicated, config.batch_size, client,
                          _zookeeper_tls(security)),
                ValueWriter(registry, AUDIT_TOPIC), datacenter=dc, cluster=dc,
                interval_s=5.0, window_ms=config.window_ms, service="demo-traffic",
                clock=clock)
            pending: list[tuple[object, str, int]] = []
            try:
                for i in range(config.messages_per_dc):
                    topic = topics[i % len(topics)]
                    t = first_hour + (i * span) // config.messages_per_dc
                    v2 = i >= config.v2_from * config.messages_per_dc
                    rec, key, version = make_event(topic, rng, t, v2, config.members)
                    future = producer.send(topic, writers[(topic, version)].encode(rec),
                                           key=key, timestamp=t)
                    pending.append((future, topic, t - t % HOUR_MS))
                    if len(pending) >= 5_000:
                        done += _settle(pending, result, dc, tolerate_failures)
                        if progress:
                            progress(done, total)
                try:
                    producer.flush()
                except Exception:             # noqa: BLE001 - failures settle below
                    if not tolerate_failures:
                        raise
                done += _settle(pending, result, dc, tolerate_failures)
                if progress:
                    progress(done, total)
            finally:
                producer.close()
        finally:
            registry.close()
    result.seconds += time.monotonic() - t0
    return result


def _producer(lb: str, zookeeper: str, replicated: bool, batch_size: int,
              client: dict | None = None, zookeeper_tls: ZooKeeperTls | None = None):
    """Through the load balancer with acks="flushed"; on a replicated
    cluster a ClusterProducer with acks="all" instead, which sends each
    partition's batches to its leader, found in ZooKeeper (a load balancer
    reaches any broker, and only the leader takes a partition's writes).
    ``client``: the producer's security settings (tls, sasl_*);
    ``zookeeper_tls``: how the ClusterProducer reaches ZooKeeper."""
    from broker.client.cluster_producer import ClusterProducer
    from broker.client.producer import Producer, ProducerConfig
    client = client or {}
    if replicated:
        return ClusterProducer(zookeeper, ProducerConfig(acks="all", batch_size=batch_size,
                                                         client_id="demo-traffic", **client),
                               zookeeper_tls=zookeeper_tls)
    return Producer(bootstrap=lb, acks="flushed", batch_size=batch_size, **client)


def _settle(pending: list, result: TrafficResult, dc: str, tolerate: bool = False) -> int:
    """Wait for the pending sends; count the acknowledged ones. A send that
    failed after the producer's retries raises, or, with ``tolerate``, is
    counted in ``result.failed`` (not acknowledged: the audit does not count
    it either)."""
    n = 0
    for future, topic, hour in pending:
        try:
            future.result(timeout=120)
        except Exception:                 # noqa: BLE001 - see the docstring
            if not tolerate:
                raise
            result.failed += 1
        else:
            result.add(dc, topic, hour)
        n += 1
    pending.clear()
    return n


def progress_bar(stream=None):
    """A progress callback drawing one line: [#####     ] 45% 9,000/20,000."""
    def show(done: int, total: int) -> None:
        out = stream or sys.stderr
        width = 30
        filled = width * done // max(total, 1)
        out.write(f"\r  [{'#' * filled}{' ' * (width - filled)}] {100 * done // max(total, 1):3d}% "
                     f"{done:,}/{total:,}")
        if done >= total:
            out.write("\n")
        out.flush()
    return show
