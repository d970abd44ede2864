"""The produce path: append produced message sets to their partitions' logs,
write them, flush them (group commit) and answer the acks.

One read of a connection (``BrokerServer.handle_frames``) goes:
  ``produce`` (or ``append_no_ack_run``) for each produce request: validate
  and append each message set to its log's in-memory buffer (its offset is the
  byte position in the log: base = the log's end when appended, end = base +
  size) -> ``write_dirty_logs`` once the read is handled: one write per log
  of what it buffered, then answer the acks=written requests; acks=flushed
  ones wait in ``_flush_waiters`` for a flush past their end -> flushes go to
  the Flusher thread when a log reached flush.messages, its flush.ms timer
  fired, or a "flushed" ack waits on it -> ``_flushes_done`` (back on the
  loop): the log's flushed end advances, "flushed" acks are answered, and
  ``on_flushed(log)`` wakes the fetches parked on it (flush before visible:
  consumers read only below the flushed end). acks=none requests get no reply:
  an error closes the connection (once the replies before it are sent).

What this module owns, and its invariants:
  * ``_dirty``: the logs with appends buffered by the read being handled (->
    whether one was acks=none); ``_produce_waits``: that read's acked requests;
    ``_failed_logs``: that read's logs whose write failed (-> from which offset
    on its appends were lost, the error). ``write_dirty_logs`` empties all
    three at the end of every read (and before a topic is deleted); once a
    log's write failed, no later set of the read is appended to that log
    (none may take the offsets given back).
  * ``_flush_waiters``: log -> (end, wait, result) of "flushed" acks. A
    ProduceWait's ``outstanding`` is the number of its entries there; it is
    answered when that reaches 0, or by its timer (REQUEST_TIMED_OUT).
  * at most one flush in progress per log (``lg.flush_in_progress``); a forced
    flush asked for meanwhile is remembered in ``_reflush`` and started when
    the running one completes; at most one flush.ms timer per log
    (``_flush_timers``).
  * the Flusher thread and the validation thread pool (``close`` stops both).

Threads: every method of ProducePath runs on the broker's event-loop thread.
The Flusher thread only fsyncs pinned segments and reports through
``loop.call_soon_threadsafe``; the validation thread only runs the
``validate`` closure of ``validate_off_loop`` (``validate_message_set`` on
the entries handed to it) and reports the same way. Nothing else is shared
between threads, so there are no locks.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from dataclasses import dataclass
from typing import Callable, Iterable

from broker.config import BrokerConfig
from broker.protocol import api
from broker.protocol.api import Acks, quote_name
from broker.protocol.compression import DecompressionLimitError
from broker.protocol.errors import CorruptMessageError, ErrorCode
from broker.protocol.message import validate_message_set
from broker.storage.errors import InvalidConfigError, StorageError
from broker.storage.log import Log
from broker.storage.log_manager import LogManager
from broker.storage.page_cache import PageCacheBudget

from .connection import Connection, Reply
from .flusher import Flusher
from .memory_trim import MemoryTrimmer
from .metrics import BrokerMetrics

log = logging.getLogger(__name__)
#: how long after the last check of a compressed set off the loop the memory
#: it freed is given back (memory_trim.py)
TRIM_AFTER_IDLE_S = 0.5


@dataclass(slots=True, eq=False)
class ProduceWait:
    """A produce request whose reply waits for its writes (and flushes)."""

    conn: Connection
    reply: Reply
    correlation_id: int
    acks: int
    results: list         # each result: [topic, partition, error, message, base, end, log]
    timeout_ms: int
    outstanding: int = 0  # entries waiting for a flush
    timer: asyncio.TimerHandle | None = None


class ProducePath:
    def __init__(self, config: BrokerConfig, logs: LogManager, metrics: BrokerMetrics,
                 loop: asyncio.AbstractEventLoop, clock: Callable[[], int],
                 page_cache: PageCacheBudget | None, on_flushed: Callable[[Log], None],
                 on_topics_changed: Callable[[], None]) -> None:
        """``on_flushed(log)`` is called after each flush of ``log`` completes
        (the fetch long-poll's wake-up); ``on_topics_changed()`` after a
        produce auto-created a topic."""
        self.config = config
        self.logs = logs
        self.metrics = metrics
        self.stopping = False         # set by the server: refuse produce requests
        self._loop = loop
        self._clock = clock
        self._page_cache = page_cache
        self._on_flushed = on_flushed
        self._on_topics_changed = on_topics_changed
        self._dirty: dict[Log, bool] = {}
        self._produce_waits: list[ProduceWait] = []
        self._failed_logs: dict[Log, tuple[int, str]] = {}
        self._close_after_flush_pending = False
        self._flush_waiters: dict[Log, list] = {}
        # acks=all: log -> (end, wait, result) waiting for the high watermark
        self._replica_waiters: dict[Log, list] = {}
        # set by the server when the broker replicates (replica_manager.py):
        # its ``replicated`` map (log -> replica) is read on every append
        self.replication = None
        self._replicated: dict = {}
        self._flush_timers: set[Log] = set()
        self._reflush: set[Log] = set()
        self._flusher = Flusher(lambda results: loop.call_soon_threadsafe(
            self._flushes_done, results))
        self._validator = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="samsa-validate")
        # what the validation thread inflated is given back to the system once
        # the validations have stopped for TRIM_AFTER_IDLE_S (memory_trim.py)
        self._trimmer = MemoryTrimmer()
        self._trim_timer: asyncio.TimerHandle | None = None
        self._validations_in_flight = 0
        # with authorization: (conn, request) -> True when the request is
        # refused (and answered so); asked again of a produce checked off the
        # loop, just before its append (set by the server)
        self.refused: Callable[[Connection, tuple], bool] | None = None

    def set_replication(self, replication) -> None:
        """Check every append to a replicated log with ``replication``
        (ReplicaManager: produce_refusal, log_written)."""
        self.replication = replication
        self._replicated = replication.replicated

    def close(self) -> None:
        """Stop the flusher and validation threads (after the last flush)."""
        if self._trim_timer is not None:
            self._trim_timer.cancel()
            self._trim_timer = None
        self._flusher.stop()
        self._validator.shutdown(wait=True, cancel_futures=True)

    # ------------------------------------------------------------ produce requests

    def produce(self, conn: Connection, correlation_id: int, acks: int, timeout_ms: int,
                entries, now: int, no_ack_logs: dict | None = None) -> None:
        """Append each entry (topic, partition, message set, info) to its log's
        buffer; the reply (unless acks is NONE) waits for the write, and for
        the flush with acks FLUSHED. ``no_ack_logs`` (for
        ``append_no_ack_run``) gets the logs an acks=none entry was
        appended to."""
        if self.stopping:
            if acks == Acks.NONE:
                conn.close()
            else:
                conn.add_reply(Reply(api.encode_error_response(
                    correlation_id, ErrorCode.BROKER_SHUTTING_DOWN, "broker is stopping")))
            return
        append = self._append
        if acks == Acks.NONE:
            for topic, partition, message_set, info in entries:
                result = append(topic, partition, message_set, info, now, Acks.NONE)
                if result[2]:
                    # No response can carry the error: log it and close the
                    # connection so the producer notices (Kafka does so for acks=0).
                    log.warning("produce (acks=none) from %s to %s/%s failed: %s; closing the "
                                "connection", conn.peer, topic, partition, result[3])
                    conn.close_after_flush = True
                elif no_ack_logs is not None and partition == result[1] \
                        and result[6] is not None:
                    no_ack_logs[(topic, partition)] = result[6]
            return
        results = [append(topic, partition, message_set, info, now, acks)
                   for topic, partition, message_set, info in entries]
        reply = Reply()
        conn.add_reply(reply)
        self._produce_waits.append(ProduceWait(conn, reply, correlation_id, acks, results,
                                               timeout_ms))

    def append_no_ack_run(self, conn: Connection, frames: list, i: int, no_ack_logs: dict,
                          now: int, c_frame, max_message_bytes: int) -> tuple[int, tuple | None]:
        """The paper's batch-1 case, short cut: from ``frames[i]`` on, every
        acks=none produce of one message set to a partition that ``produce``
        appended an acks=none set to earlier in this read (``no_ack_logs``)
        goes straight to the log. Returns the index of the first frame not
        taken, and that frame's C parse when it was parsed here (so that the
        caller does not parse it again; None otherwise). A run of such
        requests is one call: at batch 1 this loop is the broker's work per
        message. A failed append sets the connection to close and ends the
        run after its frame."""
        metrics = self.metrics
        requests, messages_in, bytes_in = metrics.requests, metrics.messages_in, metrics.bytes_in
        taken = 0
        for i in range(i, len(frames)):
            payload = frames[i]
            raw = c_frame(payload, max_message_bytes)
            if raw is None or raw[1] != 0 or len(raw[3]) != 1:
                break
            topic, partition, start, stop, count, first_ts, max_ts = raw[3][0]
            lg = no_ack_logs.get((topic, partition))
            if lg is None or not count or self._failed_logs or self.stopping:
                break
            requests["produce"] += 1
            try:
                lg.append(payload[start:stop], count, first_ts, max_ts, now)
            except StorageError as exc:
                self._storage_failed(lg, exc, True)
                log.warning("produce (acks=none) from %s to %s/%s failed: %s; closing the "
                            "connection", conn.peer, topic, partition, exc)
                return self._end_run(conn, no_ack_logs, taken, i)
            except Exception:   # a bug: as _append does, fail this one, go on
                log.exception("error appending to %s/%s", quote_name(topic), partition)
                metrics.errors[("produce", "UNKNOWN")] += 1
                return self._end_run(conn, no_ack_logs, taken, i)
            messages_in[topic] += count
            bytes_in[topic] += stop - start
            taken += 1
        else:
            metrics.produce_short_cuts += taken
            return len(frames), None
        metrics.produce_short_cuts += taken
        return i, raw

    def _end_run(self, conn: Connection, no_ack_logs: dict, taken: int,
                 i: int) -> tuple[int, None]:
        """A short-cut append failed at ``frames[i]``: close the connection
        once its replies are out, take no more short cuts in this read."""
        self.metrics.produce_short_cuts += taken
        conn.close_after_flush = True
        no_ack_logs.clear()
        return i + 1, None

    def _not_to_create_here(self, topic_name: str) -> tuple[int, str] | None:
        """Why an unknown topic must not be auto-created here as an
        unreplicated one, as (error code, message), or None. Refused (retry):
        a replicated topic this broker's watch has not delivered yet (its
        replicas are being made), and any name while the broker cannot tell
        whether it is replicated (it has not read the cluster's replicated
        topics since it started, or ZooKeeper gave no answer in time): a
        broker that lost its disk and restarted would otherwise take the
        writes of a replicated partition it used to lead into a local twin,
        and acknowledge them, and they would never reach the real replicas.
        During a ZooKeeper outage the topics it read before tell it. A broker
        without ZooKeeper creates the topic."""
        if self.replication is None:
            return None
        replicated = self.replication.replicated_in_zookeeper(topic_name)
        if replicated is None:
            return (ErrorCode.NOT_LEADER_FOR_PARTITION,
                    f"topic {quote_name(topic_name)} is unknown here and this broker cannot "
                    f"tell yet whether it is a replicated topic of the cluster (ZooKeeper "
                    f"has not answered since it started); retry")
        if not replicated:
            return None
        return (ErrorCode.NOT_LEADER_FOR_PARTITION,
                f"topic {quote_name(topic_name)} is replicated and this broker is making its "
                f"replicas; retry")

    def _append(self, topic_name: str, partition: int, message_set, info, now: int,
                acks: int) -> list:
        """Validate (unless ``info`` says it was) and buffer one message set.
        Returns the result row [topic, partition, error, message, base, end, log].
        Never raises: whatever goes wrong becomes this entry's error. A
        replicated log takes it only where this broker leads (and, for
        acks=all, has enough replicas in sync)."""
        no_ack = acks == Acks.NONE
        try:
            topic = self.logs.topics.get(topic_name)
            if topic is None:
                if not self.config.auto_create_topics:
                    return self._error_result(topic_name, partition,
                                              ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                              f"unknown topic {quote_name(topic_name)}")
                if self.replication is not None and (
                        self.config.replication_factor
                        or topic_name in self.replication.known_topics):
                    # created cluster-wide, in ZooKeeper (or it is, and this
                    # broker's replicas are being made): answered "retry" meanwhile
                    if topic_name not in self.replication.known_topics:
                        self.replication.auto_create(topic_name)
                    return self._error_result(
                        topic_name, partition, ErrorCode.NOT_LEADER_FOR_PARTITION,
                        f"topic {quote_name(topic_name)} is being created with "
                        f"{self.config.replication_factor} replicas; retry once its leaders "
                        f"are known")
                refusal = self._not_to_create_here(topic_name)
                if refusal is not None:
                    return self._error_result(topic_name, partition, *refusal)
                try:
                    topic = self.logs.create_topic(topic_name, self.config.default_partitions)
                    self._on_topics_changed()
                except InvalidConfigError as exc:
                    return self._error_result(topic_name, partition, ErrorCode.INVALID_TOPIC,
                                              str(exc))
                except OSError as exc:
                    return self._error_result(topic_name, partition, ErrorCode.STORAGE_ERROR,
                                              f"cannot create topic: {exc}")
            logs = topic.logs
            if partition == api.ANY_PARTITION:
                if topic.replicated and self.replication is not None:
                    # a replicated topic: one of the partitions this broker leads
                    led = self.replication.led_partitions(topic_name)
                    if not led:
                        return self._error_result(
                            topic_name, partition, ErrorCode.NOT_LEADER_FOR_PARTITION,
                            f"this broker leads no partition of {quote_name(topic_name)}")
                    partition = led[topic.next_any_partition % len(led)]
                    topic.next_any_partition += 1
                else:
                    partition = topic.next_any_partition % len(logs)
                    topic.next_any_partition = partition + 1
            elif not 0 <= partition < len(logs):
                return self._error_result(topic_name, partition,
                                          ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                          f"topic {quote_name(topic_name)} has no partition "
                                          f"{partition}")
            if info is None:
                try:
                    info = validate_message_set(message_set, self.config.max_message_bytes)
                except CorruptMessageError as exc:
                    return self._error_result(topic_name, partition, exc.code, str(exc))
            elif isinstance(info, CorruptMessageError):     # validated off the loop: refused
                return self._error_result(topic_name, partition, info.code, str(info))
            count, size, first_ts, max_ts = info
            lg = logs[partition]
            if topic.replicated and self.replication is not None:
                refusal = self.replication.produce_refusal(lg, acks)
                if refusal is not None:
                    return self._error_result(topic_name, partition, *refusal)
            if count == 0:
                return [topic_name, partition, 0, "", lg.end_offset, lg.end_offset, None]
            lost = self._failed_logs.get(lg) if self._failed_logs else None
            if lost is not None:
                # an earlier append of this read failed: refuse the rest of it, so
                # no later set takes the offsets the failed ones gave back
                return self._error_result(topic_name, partition, ErrorCode.STORAGE_ERROR, lost[1])
            try:
                base = lg.append(message_set, count, first_ts, max_ts, now)
            except StorageError as exc:
                # A roll wrote what this read had buffered, and failed: those sets
                # are lost (their offsets given back) and so is this one.
                self._storage_failed(lg, exc, no_ack)
                return self._error_result(topic_name, partition, ErrorCode.STORAGE_ERROR, str(exc))
            if no_ack:
                self._dirty[lg] = True
            elif lg not in self._dirty:
                self._dirty[lg] = False
            metrics = self.metrics
            metrics.messages_in[topic_name] += count
            metrics.bytes_in[topic_name] += size
            return [topic_name, partition, 0, "", base, base + size, lg]
        except Exception as exc:     # a bug: this entry fails, the others go on
            log.exception("error appending to %s/%s", quote_name(topic_name), partition)
            return self._error_result(topic_name, partition, ErrorCode.UNKNOWN,
                                      f"internal error: {exc}")

    def _error_result(self, topic: str, partition: int, code: int, message: str) -> list:
        self.metrics.errors[("produce", ErrorCode(code).name)] += 1
        return [topic, partition, code, message, -1, -1, None]

    def _storage_failed(self, lg: Log, exc: StorageError, has_no_ack: bool) -> None:
        """A write of ``lg``'s buffered appends failed: every set of this read
        buffered at or after ``lg.written_end`` is lost (the log gave their
        offsets back). Remember it so their results become STORAGE_ERROR."""
        self._failed_logs[lg] = (lg.written_end, str(exc))
        log.error("append to %s failed: %s", lg.name, exc)
        metrics = self.metrics
        metrics.errors[("produce", "STORAGE_ERROR")] += 1
        topic = lg.name.rpartition("/")[0]    # counted when buffered: take back
        metrics.messages_in[topic] -= getattr(exc, "lost_messages", 0)
        metrics.bytes_in[topic] -= getattr(exc, "lost_bytes", 0)
        if has_no_ack or self._dirty.get(lg):
            # acks=none data was lost: the only way to tell is to close
            self._close_after_flush_pending = True

    # ------------------------------------------------------------ validation off the loop

    def validate_on_loop(self, entries: list) -> bool:
        """Validate the entries not validated yet (``info`` None), filling in
        their info (or the CorruptMessageError that refuses them). False if
        one holds compressed wrappers that inflate beyond
        ``inline_decompress_bytes``: then the caller has them validated off
        the loop (``validate_off_loop``)."""
        cap = self.config.inline_decompress_bytes
        max_message_bytes = self.config.max_message_bytes
        for i, (topic, partition, message_set, info) in enumerate(entries):
            if info is not None:
                continue
            try:
                info = validate_message_set(message_set, max_message_bytes,
                                            max_decompressed_bytes=cap)
            except DecompressionLimitError:
                if cap >= self.config.max_decompressed_bytes:
                    info = CorruptMessageError(
                        f"a compressed wrapper inflates beyond max_decompressed_bytes "
                        f"({self.config.max_decompressed_bytes})")
                else:
                    return False
            except CorruptMessageError as exc:
                info = exc
            entries[i] = (topic, partition, message_set, info)
        return True

    def validate_off_loop(self, conn: Connection, request: tuple,
                          then: Callable[[], None]) -> None:
        """Validate ``request``'s entries (a produce: correlation id, acks,
        timeout, entries) on the validation thread; back on the loop, produce
        them (unless ``conn`` closed meanwhile), then call ``then()``."""
        self.metrics.validations_off_loop += 1
        max_message_bytes = self.config.max_message_bytes
        cap = self.config.max_decompressed_bytes
        entries = request[3]

        def validate() -> list:
            out = []
            for topic, partition, message_set, info in entries:
                if info is None:
                    try:
                        info = validate_message_set(message_set, max_message_bytes,
                                                    max_decompressed_bytes=cap)
                    except CorruptMessageError as exc:
                        info = exc
                out.append((topic, partition, message_set, info))
            return out

        future = self._validator.submit(validate)
        self._validations_in_flight += 1
        future.add_done_callback(lambda f: self._loop.call_soon_threadsafe(
            self._validated_off_loop, conn, request, f, then))

    def _validated_off_loop(self, conn: Connection, request: tuple, future,
                            then: Callable[[], None]) -> None:
        self._validations_in_flight -= 1
        if self._validations_in_flight == 0 and self._trimmer.available:
            if self._trim_timer is not None:
                self._trim_timer.cancel()
            self._trim_timer = self._loop.call_later(TRIM_AFTER_IDLE_S, self._trim_if_idle)
        if not conn.closed:
            try:
                entries = future.result()
            except Exception as exc:      # a bug: fail these entries, keep serving
                log.exception("validating a produce from %s failed", conn.peer)
                error = CorruptMessageError(f"internal error: {exc}")
                error.code = ErrorCode.UNKNOWN
                entries = [(t, p, ms, error) for t, p, ms, _info in request[3]]
            # the ACLs (or the topic) may have changed while it was checked:
            # asked again now, just before the append (``refused`` answers)
            if self.refused is None or not self.refused(conn, request):
                self.produce(conn, request[0], request[1], request[2], entries,
                             self._clock())
        then()

    def _trim_if_idle(self) -> None:
        self._trim_timer = None
        if self._validations_in_flight == 0 and not self.stopping:
            self._trimmer.release()
            self.metrics.memory_trims = self._trimmer.trims

    # ------------------------------------------------------------ writes and acks

    def write_dirty_logs(self, conn: Connection | None = None) -> None:
        """Write every log's buffered appends; answer "written" acks, queue
        "flushed" ones, and fail the requests whose write failed. ``conn``
        (the connection whose read is handled) is closed once its replies are
        sent if acks=none data was lost."""
        if not self._dirty and not self._produce_waits and not self._failed_logs:
            return
        now = self._clock()
        for lg, has_no_ack in self._dirty.items():
            if lg in self._failed_logs:
                continue
            try:
                lg.write_pending()
            except StorageError as exc:
                self._storage_failed(lg, exc, has_no_ack)
                continue
            if lg.needs_flush(now):
                self._request_flush(lg)
            elif lg.unflushed_messages:
                self._arm_flush_timer(lg)
            if self._replicated and lg in self._replicated:
                self.replication.log_written(lg)
        self._dirty.clear()
        failed, self._failed_logs = self._failed_logs, {}
        if self._close_after_flush_pending:
            self._close_after_flush_pending = False
            if conn is not None:
                conn.close_after_flush = True
        waits, self._produce_waits = self._produce_waits, []
        for pw in waits:
            if failed:
                for r in pw.results:
                    lost = failed.get(r[6]) if r[6] is not None else None
                    if lost is not None and r[4] >= lost[0]:
                        r[2], r[3], r[4], r[5], r[6] = (ErrorCode.STORAGE_ERROR, lost[1],
                                                        -1, -1, None)
            if pw.acks == Acks.FLUSHED:
                self._await_flush(pw)
            elif pw.acks == Acks.ALL:
                self._await_replicas(pw)
            else:
                self._finish_produce(pw)

    def _await_flush(self, pw: ProduceWait) -> None:
        for r in pw.results:
            if r[6] is not None:
                self._wait_for_flush(pw, r[6], r)
        self._finish_or_wait(pw)

    def _wait_for_flush(self, pw: ProduceWait, lg: Log, r: list) -> None:
        """Entry ``r`` of ``pw`` waits for ``lg``'s flush past its end (if it must)."""
        if lg.flushed_end < r[5]:
            pw.outstanding += 1
            self._flush_waiters.setdefault(lg, []).append((r[5], pw, r))
            self._request_flush(lg, force=True)

    def _finish_or_wait(self, pw: ProduceWait) -> None:
        """Answer ``pw`` now if nothing of it waits, else arm its timeout."""
        if pw.outstanding == 0:
            self._finish_produce(pw)
        else:
            pw.timer = self._loop.call_later(max(1, pw.timeout_ms) / 1000,
                                             self._produce_timed_out, pw)

    def _await_replicas(self, pw: ProduceWait) -> None:
        """acks=all: each entry of a replicated log waits for the high
        watermark to pass its end; one of a log without replication waits
        for its flush (the only copy made durable)."""
        for r in pw.results:
            lg = r[6]
            if lg is None:
                continue
            if lg in self._replicated:
                if lg.high_watermark < r[5]:
                    pw.outstanding += 1
                    self._replica_waiters.setdefault(lg, []).append((r[5], pw, r))
                elif not self.replication.enough_in_sync(lg):
                    self._not_enough_after_append(lg, r)
            else:
                self._wait_for_flush(pw, lg, r)
        self._finish_or_wait(pw)

    def _not_enough_after_append(self, lg: Log, r: list) -> None:
        r[2] = ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        r[3] = (f"appended to {lg.name} and replicated to the in-sync set, but that set is "
                f"smaller than min.insync.replicas")
        self.metrics.errors[("produce", "NOT_ENOUGH_REPLICAS_AFTER_APPEND")] += 1

    def high_watermark_advanced(self, lg: Log) -> None:
        """The high watermark of ``lg`` moved (or its in-sync set changed):
        answer the acks=all entries it now covers."""
        waiters = self._replica_waiters.get(lg)
        if not waiters:
            return
        hw = lg.high_watermark
        keep = []
        done = []
        for w in waiters:
            (done if hw >= w[0] else keep).append(w)
        if not done:
            return
        self._replica_waiters[lg] = keep
        enough = self.replication.enough_in_sync(lg)
        for _end, pw, r in done:
            if not enough:
                self._not_enough_after_append(lg, r)
            self._flush_wait_over(pw)

    def fail_replica_waiters(self, lg: Log, code: int, message: str) -> None:
        """``lg``'s replica stopped leading: its acks=all and acks=flushed
        entries fail (what they wait for may be cut from the log, as the
        replica agrees with its new leader, and other bytes take its place)."""
        for waiting in (self._replica_waiters, self._flush_waiters):
            for _end, pw, r in waiting.pop(lg, ()):
                r[2], r[3] = code, message
                self.metrics.errors[("produce", ErrorCode(code).name)] += 1
                self._flush_wait_over(pw)

    def append_replica(self, lg: Log, message_set, count: int, first_ts: int,
                       max_ts: int) -> None:
        """A follower appends its leader's bytes: written now, flushed by the
        rules of every log (flush.messages, flush.ms). Raises StorageError."""
        now = self._clock()
        lg.append(message_set, count, first_ts, max_ts, now)
        lg.write_pending()
        if lg.needs_flush(now):
            self._request_flush(lg)
        elif lg.unflushed_messages:
            self._arm_flush_timer(lg)

    def _produce_timed_out(self, pw: ProduceWait) -> None:
        if pw.outstanding == 0:
            return
        for waiting, what in ((self._flush_waiters, "flushed"),
                              (self._replica_waiters, "replicated to every in-sync replica")):
            for lg, waiters in list(waiting.items()):
                keep = []
                for w in waiters:
                    if w[1] is pw:
                        w[2][2] = ErrorCode.REQUEST_TIMED_OUT
                        w[2][3] = f"not {what} within the request timeout"
                    else:
                        keep.append(w)
                waiting[lg] = keep
        pw.outstanding = 0
        self._finish_produce(pw)

    def _flush_wait_over(self, pw: ProduceWait) -> None:
        """One of ``pw``'s entries stopped waiting for a flush."""
        pw.outstanding -= 1
        if pw.outstanding == 0:
            self._finish_produce(pw)

    def _finish_produce(self, pw: ProduceWait) -> None:
        if pw.timer is not None:
            pw.timer.cancel()
        results = tuple(api.ProduceResult(r[0], r[1], int(r[2]), r[3], r[4], r[5])
                        for r in pw.results)
        pw.reply.set([api.encode_response(pw.correlation_id, api.ProduceResponse(results))])
        pw.conn.pump()

    def forget_logs(self, logs: Iterable[Log]) -> None:
        """``logs``' topic is being deleted: write what this read buffered,
        drop their pending re-flushes and answer the "flushed" acks waiting
        on them with UNKNOWN_TOPIC_OR_PARTITION."""
        self.write_dirty_logs()
        for lg in logs:
            self._reflush.discard(lg)
            for _end, pw, r in self._flush_waiters.pop(lg, ()):
                r[2], r[3] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "topic deleted"
                self._flush_wait_over(pw)
            self.fail_replica_waiters(lg, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "topic deleted")

    # ------------------------------------------------------------ flushing

    def flush_all(self) -> None:
        """Start a flush of every log with unflushed data (at shutdown)."""
        for lg in list(self.logs.all_logs()):
            if lg.end_offset > lg.flushed_end:
                self._request_flush(lg, force=True)

    def _request_flush(self, lg: Log, force: bool = False) -> None:
        """Hand ``lg`` to the flusher if it needs a flush (``force``: if it
        has anything unflushed); one flush at a time per log."""
        if lg.deleted:          # a timer or a re-flush outliving its topic
            return
        if lg.flush_in_progress:
            if force:
                self._reflush.add(lg)
            return
        if lg.written_end <= lg.flushed_end and not lg.unflushed_messages:
            return
        if not force and not lg.needs_flush(self._clock()):
            return
        try:
            segments, target = lg.begin_flush()
        except StorageError as exc:
            log.error("flush of %s failed before fsync: %s", lg.name, exc)
            return
        self._flusher.submit(lg, segments, target)

    def _arm_flush_timer(self, lg: Log) -> None:
        """Have one flush.ms timer pending for ``lg``."""
        if lg not in self._flush_timers:
            self._flush_timers.add(lg)
            self._loop.call_later(lg.config.flush_ms / 1000, self._flush_timer_fired, lg)

    def _flush_timer_fired(self, lg: Log) -> None:
        self._flush_timers.discard(lg)
        if lg.unflushed_messages:
            if lg.flush_in_progress:
                self._reflush.add(lg)
            else:
                self._request_flush(lg, force=True)

    def _flushes_done(self, results) -> None:
        """The flusher's report (on the loop): advance each log's flushed
        end, answer the "flushed" acks it covers (or fails), wake the fetches
        parked on it, and start the next flush if one is due."""
        for lg, segments, target, ok, seconds, error in results:
            durable = lg.complete_flush(segments, target, ok)
            if durable and self._page_cache is not None:
                self._page_cache.flushed(durable)
            self.metrics.observe_flush(seconds)
            waiters = self._flush_waiters.get(lg)
            if waiters:
                keep = []
                for w in waiters:
                    end, pw, r = w
                    if lg.flushed_end >= end:
                        pass
                    elif not ok and end <= target:
                        r[2], r[3] = ErrorCode.STORAGE_ERROR, f"fsync failed: {error}"
                    else:
                        keep.append(w)
                        continue
                    self._flush_wait_over(pw)
                self._flush_waiters[lg] = keep
            self._on_flushed(lg)
            if lg in self._reflush:
                self._reflush.discard(lg)
                self._request_flush(lg, force=True)
            elif lg.unflushed_messages:
                if lg.needs_flush(self._clock()):
                    self._request_flush(lg)
                else:
                    self._arm_flush_timer(lg)
