"""The partition count of each topic a producer sends to, learned from a
broker's metadata (a MetadataRequest, through an AdminClient on a
connection of its own to ``bootstrap``, opened for the ask and closed after
it: between asks a producer holds only its own connection, which is what a
load balancer's session counts and a broker's connection limits see) and
cached.

``count(topic)`` — asked by send() for every key-less message — never waits
on the network: it returns the cached count, or None while none is known
(the producer then sends to ``api.ANY_PARTITION``, and the broker places the
message, as before producers chose). The asking is done by a thread of its
own, started on the first miss. ``count_now(topic)`` asks at once, in the
calling thread, when nothing is cached (keyed messages need the count).

A topic is asked again:
  * ``max_age_ms`` after its last answer (Kafka's metadata.max.age.ms): a
    topic whose partitions grew (deleted and created again, or another
    broker behind a load balancer) is picked up;
  * at once after ``refresh(topic)`` (the producer calls it when a broker
    refused a partition: UNKNOWN_TOPIC_OR_PARTITION; the count is dropped
    until the answer) or ``refresh()`` (every topic, when the producer's
    connection was lost: behind a load balancer it may now reach another
    broker; the counts stay in use until the answers);
  * ``retry_max_ms`` after the broker said it does not know the topic (it
    may be auto-created by the first message, sent to "any partition");
  * after a back-off (from ``retry_ms``, doubling up to ``retry_max_ms``)
    when asking failed: no broker, or one that does not answer metadata
    requests (then the count stays what it was, or unknown).

Behind a load balancer the metadata connection may reach another broker
than the producer's: the brokers must agree on a topic's partition count
(topics created with the same count on each, or auto-created with the same
``default_partitions``), else use ``partitioner="any"``.

Locking: ``_cond`` guards ``_due`` and the writes of ``_counts`` (reads of
``_counts`` take no lock); ``_asking`` serializes the use of the AdminClient
(not thread-safe), which is never called with ``_cond`` held.
"""
from __future__ import annotations

import logging
import ssl
import threading
import time

from broker.protocol.errors import ErrorCode, SamsaError

from .admin import AdminClient
from .backoff import Backoff
from .connection import BrokerConnectionError

log = logging.getLogger(__name__)


class PartitionCounts:
    def __init__(self, bootstrap: str, client_id: str, request_timeout: float,
                 max_age_ms: int, retry_ms: int, retry_max_ms: int,
                 tls: "ssl.SSLContext | None" = None, sasl=None) -> None:
        self.bootstrap = bootstrap
        self.tls = tls
        self.sasl = sasl
        self.client_id = client_id
        self.request_timeout = request_timeout
        self.max_age = max_age_ms / 1000
        self.unknown_retry = retry_max_ms / 1000     # after "no such topic"
        self._backoff = Backoff(retry_ms, retry_max_ms)
        self._counts: dict[str, int] = {}
        self._due: dict[str, float] = {}          # topic -> when to ask next (monotonic)
        self._cond = threading.Condition()
        self._asking = threading.Lock()
        self._admin: AdminClient | None = None
        self._thread: threading.Thread | None = None
        self._closed = False
        self.requests = 0                          # metadata requests answered

    def count(self, topic: str) -> int | None:
        """The cached count, or None (then the topic is asked in the
        background). Never blocks."""
        n = self._counts.get(topic)
        if n is None and topic not in self._due:
            self._schedule([topic], forget=False)
        return n

    def count_now(self, topic: str) -> int | None:
        """The count, asked at once if none is cached; None if the broker
        does not know the topic. Raises what asking raised (SamsaError,
        BrokerConnectionError)."""
        n = self._counts.get(topic)
        if n is None:
            with self._asking:
                n = self._counts.get(topic)
                if n is None:
                    self._ask([topic])
                    n = self._counts.get(topic)
        return n

    def refresh(self, topic: str | None = None) -> None:
        """Ask again soon: ``topic`` (its count dropped until the answer), or
        every topic known (their counts kept until the answers)."""
        if topic is not None:
            self._schedule([topic], forget=True)
        elif self._due:
            self._schedule(list(self._due), forget=False)

    def close(self) -> None:
        """Stop asking: the thread ends (closing the connection wakes it if
        it waits for an answer) and the connection is closed."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        admin = self._admin
        if admin is not None:
            admin.close()           # wakes the thread if it waits for an answer
        if self._thread is not None:
            self._thread.join(timeout=5)
        # an ask in progress ends (and closes its connection) before this
        # lock is ours, and none starts after: both check _closed under it
        with self._asking:
            pass

    # ------------------------------------------------------------ internals

    def _schedule(self, topics: list[str], forget: bool) -> None:
        with self._cond:
            if self._closed:
                return
            now = time.monotonic()
            for topic in topics:
                self._due[topic] = now
                if forget:
                    self._counts.pop(topic, None)
            self._start_asker()
            self._cond.notify_all()

    def _start_asker(self) -> None:
        """Start the thread that asks when topics are due (called with _cond)."""
        if self._thread is None and not self._closed:
            self._thread = threading.Thread(target=self._run, daemon=True,
                                            name="samsa-producer-metadata")
            self._thread.start()

    def _ask(self, topics: list[str]) -> None:
        """One metadata request for ``topics``; records the answers. Called
        with ``_asking``; raises when the request fails."""
        if self._closed:
            raise BrokerConnectionError("the producer is closed: no partition counts to ask")
        self._admin = AdminClient(self.bootstrap, self.client_id, self.request_timeout,
                                  tls=self.tls, sasl=self.sasl)
        try:
            response = self._admin.metadata(topics)
        finally:                     # close() may have closed it already: closing is idempotent
            self._admin.close()
            self._admin = None
        now = time.monotonic()
        with self._cond:
            self.requests += 1
            for info in response.topics:
                if info.error == ErrorCode.NONE and info.partitions:
                    if self._counts.get(info.name) != len(info.partitions):
                        log.info("topic %s has %d partitions (asked %s)", info.name,
                                 len(info.partitions), self.bootstrap)
                    self._counts[info.name] = len(info.partitions)
                    self._due[info.name] = now + self.max_age
                else:
                    self._counts.pop(info.name, None)
                    self._due[info.name] = now + self.unknown_retry
            self._start_asker()      # to ask these again when due

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    if self._closed:
                        return
                    now = time.monotonic()
                    topics = [t for t, at in self._due.items() if at <= now]
                    if topics:
                        break
                    wake = min(self._due.values(), default=None)
                    self._cond.wait(None if wake is None else wake - now)
            try:
                with self._asking:
                    if self._closed:
                        return
                    self._ask(topics)
                self._backoff.reset()
            except (SamsaError, BrokerConnectionError, OSError) as exc:
                if self._closed:
                    return
                delay = self._backoff.next_delay_ms() / 1000
                log.warning("cannot learn the partition counts of %s from %s (%s); sending "
                            "to any partition meanwhile, asking again in %.1f s",
                            ", ".join(topics), self.bootstrap, exc, delay)
                with self._cond:
                    for t in topics:
                        self._due[t] = time.monotonic() + delay
