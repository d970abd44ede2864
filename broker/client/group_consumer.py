"""A consumer in a group: the group's consumers share the partitions of the
topics they subscribe to (ZooKeeper rebalance, broker/coordination/ownership.py),
each receives the messages of the partitions it owns, and the group's offsets
are kept in ZooKeeper (at-least-once).

Inside (as Kafka 0.7's ZookeeperConsumerConnector): one *fetcher* thread per
broker that holds owned partitions pulls with a simple Consumer and puts
chunks of messages on a bounded queue; the application's iterator takes them
off. Offsets committed are those of messages the application has finished
with: a message counts once the iterator is asked for the next one (or
``commit()`` is called after it), so a crash never skips a message.

A rebalance stops every fetcher and drops what they fetched and the
application was not handed. Partitions this member gives up are handed over
in order: it waits (up to ``revoke_timeout_ms``) for the application to
finish what it was handed — to come back for more, or, with explicit
acknowledgement, for the ``on_revoke`` listener to return once what it has
in flight is acknowledged — then commits, and only then deletes its owner
nodes, so the new owner starts after every message done here. Partitions it
keeps go on from what was handed to the application, never back to the last
commit. So a clean stop or a member joining or leaving delivers nothing
twice; duplicates come from crashes (bounded by what was handed out since the
last commit) or from an application slower than ``revoke_timeout_ms``.
"""
from __future__ import annotations

import logging
import os
import queue
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Iterator

from broker.coordination import offsets as zk_offsets
from broker.coordination.cluster import ClusterView
from broker.coordination.ownership import Assignment, GroupMember, Subscription
from broker.coordination.zk import make_client, start_client
from broker.coordination.zk_acls import Identity
from broker.coordination.zk_tls import ZooKeeperTlsSettings
from broker.protocol.errors import ErrorCode, SamsaError
from broker.protocol.message import Message

from .consumer import Consumer, ConsumerConfig
from .errors import CorruptDataError, InvalidOffsetError

log = logging.getLogger(__name__)
#: errors a fetcher hands to the application rather than retry
REFUSALS = frozenset({ErrorCode.SASL_AUTHENTICATION_FAILED, ErrorCode.ILLEGAL_SASL_STATE,
                      ErrorCode.UNSUPPORTED_SASL_MECHANISM, ErrorCode.TOPIC_AUTHORIZATION_FAILED})


@dataclass(frozen=True)
class GroupConsumerConfig(ZooKeeperTlsSettings):
    zookeeper: str
    """Connect string with the cluster's chroot, e.g. "127.0.0.1:2181/dc-a"."""
    group: str
    topics: tuple[str, ...] = ()
    """Topics to consume; or leave empty and give ``whitelist``."""
    whitelist: str | None = None
    """Regex: consume every topic whose whole name matches (and not ``blacklist``)."""
    blacklist: str | None = None
    consumer_id: str = ""
    """Unique in the group; default host-pid-random."""
    auto_offset_reset: str = "earliest"
    """Where a partition with no committed offset starts: "earliest" or "latest"."""
    auto_commit: bool = True
    auto_commit_interval_ms: int = 1000
    """Commit what the application has taken this often, checked each time it
    calls messages()/poll() (and before partitions are given up in a
    rebalance, and at close(), whatever auto_commit says)."""
    explicit_acknowledgement: bool = False
    """False: a message counts as done once the application asks for the next
    (or calls commit()). True: only offsets given to ``acknowledge()`` count,
    for an application that finishes messages asynchronously (the mirror
    acknowledges once the target cluster has flushed them)."""
    fetch_max_bytes: int = 300 * 1024
    fetch_rate_bytes: int = 0
    """Across a long round trip each partition asks for round trip x this
    many bytes per second (up to ``fetch_rtt_max_bytes``) instead of
    ``fetch_max_bytes``: see ConsumerConfig. 0: off."""
    fetch_rtt_max_bytes: int = 16 << 20
    fetchers_per_broker: int = 1
    """Connections (each with its own fetch in flight) that share the owned
    partitions of one broker: a fetch's next offsets are known only once its
    answer is in, so across a long round trip more of them in flight carry
    more per round trip."""
    receive_buffer_bytes: int = 1 << 20
    """SO_RCVBUF of each fetcher's connection; -1: the kernel's autotuning."""
    max_wait_ms: int = 100
    """Long-poll wait of the fetchers (short, so a rebalance stops them quickly)."""
    queue_chunks: int = 16
    """Fetched chunks held for the application (back-pressure on the fetchers)."""
    session_timeout_ms: int = 6000
    rebalance_backoff_ms: int = 100
    rebalance_max_attempts: int = 50
    check_crcs: bool = True
    revoke_timeout_ms: int = 10_000
    """A member giving up partitions waits this long at most for the
    application to finish what it was handed (and ``on_revoke`` to return)
    before it commits and releases them anyway."""
    raw_chunks: bool = False
    """messages()/poll() hand out RawChunks (a partition's fetched bytes,
    undecoded; see Consumer) where they can: the mirror's forwarding path."""
    on_corrupt: str = "raise"
    """Corrupt data in a partition: "raise" stops that partition's fetcher
    (and so the owned partitions that share its connection to the broker) and
    raises CorruptDataError from messages()/poll() once the intact messages
    before it were handed out (nothing past it is committed);
    "skip" skips it, logs a WARNING and counts it (``corrupt_skips``)."""
    sasl_username: str = ""
    """The fetchers authenticate as this user (SCRAM-SHA-512) to brokers whose
    plaintext port asks for it (docs/security.md); empty: they do not."""
    sasl_password_file: str = ""
    """The file holding sasl_username's password (its first line)."""
    sasl_password: str = field(default="", repr=False)
    """The password itself, for programs that hold it (tests)."""
    zookeeper_auth_file: str = ""
    """A file holding ``user:password``: the group's ZooKeeper identity. Its
    records (members, owners, offsets) are then created so that only that
    identity may change them (docs/security.md, "ZooKeeper"); every member
    of the group uses the same. Empty: open records."""
    tls: bool = False
    """The fetchers connect to the brokers' TLS listeners (registered in
    ZooKeeper, /brokers/tls), checking their certificates."""
    tls_ca_file: str = ""
    """The authorities trusted for the brokers' certificates (empty: the system's)."""
    tls_cert_file: str = ""
    """The client certificate, for listeners that ask for one."""
    tls_key_file: str = ""
    tls_verify_hostname: bool = True

    def __post_init__(self) -> None:
        Subscription(tuple(self.topics), self.whitelist, self.blacklist)   # validates
        if self.auto_offset_reset not in ("earliest", "latest"):
            raise ValueError("auto_offset_reset must be earliest or latest")
        if self.fetchers_per_broker < 1:
            raise ValueError("fetchers_per_broker must be >= 1")
        if not self.group or "/" in self.group:
            raise ValueError(f"bad group name {self.group!r}")
        self.fetcher_config("127.0.0.1:9092", "check")     # the fetchers' settings, validated
        self.zookeeper_tls_settings()                       # and ZooKeeper's

    def fetcher_config(self, address: str, client_id: str) -> ConsumerConfig:
        """The settings of a fetcher's Consumer of the broker at ``address``."""
        return ConsumerConfig(
            bootstrap=address, client_id=client_id, fetch_max_bytes=self.fetch_max_bytes,
            fetch_rate_bytes=self.fetch_rate_bytes, fetch_rtt_max_bytes=self.fetch_rtt_max_bytes,
            max_wait_ms=self.max_wait_ms, receive_buffer_bytes=self.receive_buffer_bytes,
            check_crcs=self.check_crcs, auto_offset_reset=self.auto_offset_reset,
            raw_chunks=self.raw_chunks, request_timeout_ms=max(10_000, self.max_wait_ms * 4),
            on_corrupt=self.on_corrupt, sasl_username=self.sasl_username,
            sasl_password_file=self.sasl_password_file, sasl_password=self.sasl_password,
            tls=self.tls, tls_ca_file=self.tls_ca_file, tls_cert_file=self.tls_cert_file,
            tls_key_file=self.tls_key_file, tls_verify_hostname=self.tls_verify_hostname)


class _Fetcher(threading.Thread):
    """Pulls the owned partitions of one broker into the group's queue."""

    def __init__(self, owner: "GroupConsumer", broker_id: int, address: str,
                 starts: dict[tuple[str, int], tuple[str, int | str]], generation: int,
                 index: int = 0) -> None:
        super().__init__(name=f"fetcher-{owner.config.group}-b{broker_id}-{index}",
                         daemon=True)
        self.owner = owner
        self.broker_id = broker_id
        self.address = address
        self.starts = starts           # (topic, partition) -> (broker-partition, offset|reset)
        self.generation = generation
        self.stopping = threading.Event()

    def run(self) -> None:
        cfg = self.owner.config
        consumer = Consumer(cfg.fetcher_config(self.address,
                                               f"{cfg.group}-{self.owner.consumer_id}"))
        consumer.skip_listener = self.owner._corrupt_skipped
        try:
            consumer.assign(list(self.starts), start=0)
            for tp, (bp, start) in self.starts.items():
                consumer.label_partition(tp, bp)
                if self.stopping.is_set():
                    return
                consumer.seek(tp, start)
            out = self.owner._chunks
            while not self.stopping.is_set():
                if self.owner._paused.is_set():
                    self.owner._resumed.wait(0.1)
                    continue
                if self.owner.member.interrupted:     # the pause is on its way
                    self.stopping.wait(0.01)
                    continue
                try:
                    messages = consumer.poll(cfg.max_wait_ms)
                except (CorruptDataError, InvalidOffsetError) as exc:
                    # the application decides: hand it the error, in order
                    # after the messages before it, and stop fetching here
                    log.error("fetcher for broker %d: %s", self.broker_id, exc)
                    while not self.stopping.is_set():
                        try:
                            out.put((self.generation, exc), timeout=0.1)
                            break
                        except queue.Full:
                            continue
                    return
                if not messages:
                    continue
                while not self.stopping.is_set():
                    try:
                        out.put((self.generation, messages), timeout=0.1)
                        break
                    except queue.Full:
                        continue
        except Exception as exc:   # noqa: BLE001 - report, and let a rebalance decide
            if self.stopping.is_set():
                return
            if isinstance(exc, SamsaError) and exc.code in REFUSALS:
                # a refused login or read does not get better by retrying:
                # the application gets the error from messages()/poll()
                log.error("fetcher for broker %d (%s): %s", self.broker_id, self.address, exc)
                while not self.stopping.is_set():
                    try:
                        self.owner._chunks.put((self.generation, exc), timeout=0.1)
                        break
                    except queue.Full:
                        continue
                return
            log.error("fetcher for broker %d (%s) failed: %s", self.broker_id,
                      self.address, exc)
            self.owner._fetcher_failed(self, exc)
        finally:
            consumer.close()


def _shares(starts: dict, count: int) -> list[dict]:
    """A broker's partitions dealt round-robin over at most ``count``
    fetchers (in a stable order: the same partitions share a connection
    after every rebalance that leaves them here)."""
    shares: list[dict] = [{} for _ in range(min(count, len(starts)))]
    for i, tp in enumerate(sorted(starts)):
        shares[i % len(shares)][tp] = starts[tp]
    return shares


class GroupConsumer:
    """Iterate with ``messages()``; ``Message.partition`` is the
    broker-partition ("b-p"). Not thread-safe for the application: one
    thread iterates (the coordination runs on threads of its own).

    ``on_revoke(partitions, deadline)``, for an application that acknowledges
    explicitly: called on the coordination thread (or on the thread calling
    ``close()``) before partitions are given up, after their fetching
    stopped; it returns once what the application has in flight is
    acknowledged, or at ``deadline`` (time.monotonic()). The commit follows."""

    def __init__(self, config: GroupConsumerConfig | None = None, *, on_revoke=None,
                 **settings) -> None:
        self.config = config = config or GroupConsumerConfig(**settings)
        self._on_revoke = on_revoke
        self.consumer_id = config.consumer_id or \
            f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.client = make_client(config.zookeeper, config.session_timeout_ms,
                                  Identity.from_file(config.zookeeper_auth_file),
                                  config.zookeeper_tls_settings())
        start_client(self.client, config.zookeeper, what=f"consumer {self.consumer_id}")
        self.cluster = ClusterView(self.client, tls=config.tls)
        self._chunks: queue.Queue = queue.Queue(maxsize=config.queue_chunks)
        self._generation = 0
        self.corrupt_skips = 0
        self.corrupt_skipped_bytes = 0
        self._skip_lock = threading.Lock()
        self._fetchers: list[_Fetcher] = []
        # (topic, partition name) -> the broker its fetcher reads from (None:
        # no fetcher, the partition had no leader): what a rebalance compares
        self._fetched_from: dict[tuple[str, str], int | None] = {}
        self._delivered: dict[tuple[str, str], int] = {}   # (topic, bp) -> next offset
        # handed to the application and not yet taken (it has not asked for
        # more since): counted by its next request, or by commit()
        self._handed: dict[tuple[str, str], int] = {}
        self._committed: dict[tuple[str, str], int] = {}
        # the next offset after the last message handed to the application,
        # per partition: where kept partitions go on after a rebalance
        self._handed_to: dict[tuple[str, str], int] = {}
        self._app_thread: int | None = None
        self._release_waiting = False           # _on_release waits for the application
        self._taken = threading.Event()
        self._owned: Assignment = frozenset()
        self._paused = threading.Event()
        self._resumed = threading.Event()
        self._lock = threading.RLock()                     # fetchers, owned, commits
        self._last_commit = time.monotonic()
        self._closed = False
        self.member = GroupMember(
            self.client, self.cluster, config.group, self.consumer_id,
            Subscription(tuple(config.topics), config.whitelist, config.blacklist),
            on_release=self._on_release, on_assign=self._on_assign,
            on_pause=self._on_pause, on_resume=self._on_resume, on_lost=self._on_lost,
            backoff_ms=config.rebalance_backoff_ms,
            max_attempts=config.rebalance_max_attempts)
        self.member.start()

    # ------------------------------------------------------------ the application's side

    def messages(self, timeout_ms: int | None = None) -> Iterator[Message]:
        """Messages of the owned partitions, blocking for more; with
        ``timeout_ms``, ends after that long without a message."""
        last = time.monotonic()
        self._app_thread = threading.get_ident()
        self._take_handed()          # asking again: what was handed out is done with
        while not self._closed:
            self._maybe_auto_commit()
            try:
                generation, chunk = self._chunks.get(timeout=0.1)
            except queue.Empty:
                if timeout_ms is not None and time.monotonic() - last >= timeout_ms / 1000:
                    return
                continue
            if isinstance(chunk, Exception):
                if generation == self._generation:
                    raise chunk
                continue
            for m in chunk:
                if generation != self._generation or self._interrupted():
                    break           # rebalanced or suspended meanwhile: drop the rest
                self._handed = {(m.topic, m.partition): m.next_offset}
                self._handed_to[(m.topic, m.partition)] = m.next_offset
                yield m
                # the application came back for more: this one is done with
                self._take_handed()
            last = time.monotonic()

    def poll(self, timeout_ms: int = 1000) -> list[Message]:
        """One chunk of messages (possibly empty after ``timeout_ms``).
        Everything returned by earlier polls counts as taken (unless
        ``explicit_acknowledgement``: then only what ``acknowledge()`` got)."""
        self._app_thread = threading.get_ident()
        self._take_handed()
        self._maybe_auto_commit()
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            try:
                generation, chunk = self._chunks.get(
                    timeout=max(0.0, min(0.1, deadline - time.monotonic())))
            except queue.Empty:
                if time.monotonic() >= deadline:
                    return []
                continue
            if generation != self._generation or self._interrupted():
                continue
            if isinstance(chunk, Exception):
                raise chunk
            # taken at the next poll (or commit()), not now: a rebalance
            # commit meanwhile must not count a chunk still being processed
            handed = {(m.topic, m.partition): m.next_offset for m in chunk}
            self._handed_to.update(handed)
            if not self.config.explicit_acknowledgement:
                self._handed = handed
            return chunk

    def commit(self) -> None:
        """Commit the offsets of what the application has taken, including
        the message (or poll's chunk) it was handed last: call it once done
        with that. Application thread only."""
        self._take_handed()
        self._commit()

    def acknowledge(self, offsets: dict[tuple[str, str], int]) -> None:
        """With ``explicit_acknowledgement``: the messages before these next
        offsets ((topic, broker-partition) -> offset) are done with, and are
        committed at the next auto-commit, rebalance or ``commit()``. Offsets
        only move forward. Any thread."""
        with self._lock:
            delivered = self._delivered
            for key, offset in offsets.items():
                if offset > delivered.get(key, -1):
                    delivered[key] = offset

    def _take_handed(self) -> None:
        if self._handed and not self.config.explicit_acknowledgement:
            self._delivered.update(self._handed)
            self._handed = {}
        if self._release_waiting:
            self._taken.set()

    def _commit(self) -> None:
        """Commit what has been taken (not what is merely handed out)."""
        with self._lock:
            # a copy: the application thread adds keys while this may run
            # on the coordination thread (a rebalance)
            wanted = {k: v for k, v in dict(self._delivered).items()
                      if k in self._owned and self._committed.get(k) != v}
            if not wanted or not self.client.connected or self.member.state != "CONNECTED":
                return
            zk_offsets.commit_offsets(self.client, self.config.group, wanted)
            self._committed.update(wanted)
            self._last_commit = time.monotonic()

    def owned(self) -> Assignment:
        """The partitions this consumer owns and hands out messages of now:
        none while its ZooKeeper connection is suspended or its session lost
        (it hands out nothing then, and another consumer may own them already)."""
        if self._interrupted() or not self.client.connected:
            return frozenset()
        return self._owned

    def _interrupted(self) -> bool:
        """Paused, or about to be: kazoo reported the session suspended or
        lost and the coordination thread has not caught up yet."""
        return self._paused.is_set() or self.member.interrupted

    def close(self) -> None:
        """Commit, release the partitions, leave the group, disconnect."""
        if self._closed:
            return
        self._closed = True
        try:
            self.member.close()          # releases: _on_release commits
        finally:
            self._stop_fetchers()
            self.client.stop()
            self.client.close()

    def __enter__(self) -> "GroupConsumer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _maybe_auto_commit(self) -> None:
        if self.config.auto_commit and \
                time.monotonic() - self._last_commit >= self.config.auto_commit_interval_ms / 1000:
            try:
                self._commit()
            except Exception as exc:   # noqa: BLE001 - retried at the next interval
                log.warning("auto-commit failed: %s", exc)
                self._last_commit = time.monotonic()

    # ------------------------------------------------------------ the group's callbacks

    def _on_release(self, partitions: Assignment) -> None:
        """Before giving partitions up: stop fetching; let the application
        finish what it was handed (bounded by ``revoke_timeout_ms``); commit.
        The owner nodes are deleted after this returns."""
        with self._lock:
            self._stop_fetchers()
        deadline = time.monotonic() + self.config.revoke_timeout_ms / 1000
        if threading.get_ident() != self._app_thread:    # not close() on the app's thread
            self._wait_taken(deadline)
        if self._on_revoke is not None:
            try:
                self._on_revoke(partitions, deadline)
            except Exception as exc:   # noqa: BLE001 - commit what is acknowledged anyway
                log.warning("on_revoke failed: %s; committing what was acknowledged", exc)
        with self._lock:
            try:
                self._commit()
            except Exception as exc:   # noqa: BLE001
                log.warning("commit before release failed: %s", exc)
            self._owned = self._owned - partitions
            for key in partitions:
                self._handed_to.pop(key, None)

    def _wait_taken(self, deadline: float) -> None:
        """Until the application came back for more (it is done with what it
        was handed), or ``deadline``."""
        if self.config.explicit_acknowledgement or not self._handed:
            return
        self._taken.clear()
        self._release_waiting = True
        try:
            while self._handed and not self._closed:
                left = deadline - time.monotonic()
                if left <= 0:
                    log.warning("%s: the application did not finish its last messages in %d "
                                "ms; releasing (they will be delivered again to the new "
                                "owner)", self.config.group, self.config.revoke_timeout_ms)
                    return
                self._taken.wait(min(left, 0.1))
        finally:
            self._release_waiting = False

    def _on_assign(self, owned: Assignment) -> None:
        with self._lock:
            if owned == self._owned and self._fetchers and all(f.is_alive()
                                                               for f in self._fetchers) \
                    and self._fetched_from == self._serving(owned):
                return          # the same partitions from the same brokers: nothing to do
            self._stop_fetchers()
            # partitions held all along go on from what was handed to the
            # application, not back to their last commit (that would deliver
            # it all again); their taken offsets stay (they are committed next)
            kept_keys = self._owned & owned
            delivered_kept = {k: v for k, v in dict(self._delivered).items() if k in kept_keys}
            handed_kept = {k: max(v, delivered_kept.get(k, -1))
                           for k, v in dict(self._handed_to).items() if k in kept_keys}
            self._owned = owned
            committed = {}
            for topic, bp in owned:
                offset = zk_offsets.read_offset(self.client, self.config.group, topic, bp)
                committed[(topic, bp)] = offset
            self._committed = {k: v for k, v in committed.items() if v is not None}
            self._delivered = {**self._committed, **delivered_kept}
            self._handed_to = {**delivered_kept, **handed_kept}
            self._start_fetchers()

    def _serving(self, owned) -> dict[tuple[str, str], int | None]:
        """The broker serving each owned partition now (a replicated one's
        leader: it changes, and a partition without one has no fetcher)."""
        return {(topic, bp): self.cluster.locate(topic, bp)[0] for topic, bp in owned}

    def _start_fetchers(self) -> None:
        """Fetchers for every owned partition, from the offset after the last
        message handed to the application (else what it has taken or the
        committed offset, else the reset policy)."""
        by_broker: dict[int, dict] = {}
        self._fetched_from = {}
        for topic, bp in self._owned:
            # a replicated partition is fetched from its leader: a change of
            # leader changes the cluster view, and the rebalance it starts
            # brings the fetchers here again
            broker_id, partition = self.cluster.locate(topic, bp)
            self._fetched_from[(topic, bp)] = broker_id
            if broker_id is None:
                continue              # no leader now: fetched once one is elected
            start = self._handed_to.get((topic, bp),
                                        self._delivered.get((topic, bp),
                                                            self.config.auto_offset_reset))
            by_broker.setdefault(broker_id, {})[(topic, partition)] = (bp, start)
        self._generation += 1
        for broker_id, starts in by_broker.items():
            address = self.cluster.address(broker_id)
            if address is None:
                continue              # gone meanwhile: the next rebalance drops it
            for index, share in enumerate(_shares(starts, self.config.fetchers_per_broker)):
                fetcher = _Fetcher(self, broker_id, address, share, self._generation, index)
                self._fetchers.append(fetcher)
                fetcher.start()

    def _on_pause(self) -> None:
        self._resumed.clear()
        self._paused.set()

    def _on_resume(self) -> None:
        """The session is back: fetch again from what was handed to the
        application (chunks dropped while paused are fetched anew)."""
        with self._lock:
            self._stop_fetchers()
            self._start_fetchers()
        self._paused.clear()
        self._resumed.set()

    def _on_lost(self) -> None:
        """The session expired: others may own our partitions already. Drop
        everything without committing (we have been paused since SUSPENDED)."""
        with self._lock:
            self._stop_fetchers()
            self._owned = frozenset()
            self._delivered = {}
            self._committed = {}
            self._handed_to = {}

    def _corrupt_skipped(self, tp, offset: int, next_offset: int) -> None:
        """A fetcher skipped corrupt data (on_corrupt="skip"); any thread."""
        with self._skip_lock:
            self.corrupt_skips += 1
            self.corrupt_skipped_bytes += next_offset - offset

    def _fetcher_failed(self, fetcher: _Fetcher, exc: Exception) -> None:
        self.member.request_rebalance()

    def _stop_fetchers(self) -> None:
        """Stop every fetcher and forget what they fetched but nobody took."""
        self._generation += 1
        fetchers, self._fetchers = self._fetchers, []
        for f in fetchers:
            f.stopping.set()
        for f in fetchers:
            f.join(timeout=10)
        while True:
            try:
                self._chunks.get_nowait()
            except queue.Empty:
                break
