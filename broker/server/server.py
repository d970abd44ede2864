"""The broker: serves the Samsa protocol over TCP on one asyncio event loop.

Request flow (one event-loop thread; the flusher thread only fsyncs):

  bytes -> Connection (framing) -> handle_frames: decode and handle every
  whole request of the read, appending produced message sets to in-memory
  buffers of their logs -> write those buffers to the segment files (one
  write per partition per read: cheap batching for small requests) ->
  answer "written" acks -> hand logs that reached flush.messages (or whose
  flush.ms timer fired, or that a "flushed" ack waits on) to the flusher ->
  on flush completion: advance the flushed end, wake long-polling fetches,
  answer "flushed" acks.

The broker keeps no per-consumer state: a fetch names its offset.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import signal
import threading
import time
from typing import Callable

from broker.config import BrokerConfig
from broker.service_kit.logging_setup import RateLimitedLog
from broker.protocol import api
from broker.protocol.api import Acks, ApiKey, quote_name
from broker.protocol.errors import CorruptMessageError, ErrorCode, ProtocolError
from broker.protocol.compression import DecompressionLimitError
from broker.protocol.message import validate_message_set
from broker.storage.errors import (CorruptRangeError, InvalidConfigError, OffsetOutOfRangeError,
                                   StorageError)
from broker.storage.log import Log
from broker.storage.log_config import parse_overrides
from broker.storage.log_manager import LogManager, TopicExistsError, UnknownTopicError
from broker.storage.page_cache import PageCacheBudget, drop_behind_enabled

from .connection import Connection, FileRegion, Reply
from .flusher import Flusher
from .memory_pool import RequestMemoryPool
from .metrics import BrokerMetrics, serve_metrics

log = logging.getLogger(__name__)
limited_log = RateLimitedLog(log)      # for what a client can trigger at will

API_NAMES = {k: k.name.lower() for k in ApiKey}


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class _ProduceWait:
    """A produce request whose reply waits for its writes (and flushes)."""

    __slots__ = ("conn", "reply", "correlation_id", "acks", "results", "outstanding", "timer",
                 "timeout_ms")

    def __init__(self, conn, reply, correlation_id, acks, results, timeout_ms=30_000) -> None:
        self.timeout_ms = timeout_ms
        self.conn = conn
        self.reply = reply
        self.correlation_id = correlation_id
        self.acks = acks
        # each result: [topic, partition, error, message, base, end, log]
        self.results = results
        self.outstanding = 0
        self.timer = None


class _FetchWait:
    """A fetch waiting (long-poll) for min_bytes to become visible."""

    __slots__ = ("conn", "reply", "correlation_id", "request", "logs", "timer", "done")

    def __init__(self, conn, reply, correlation_id, request) -> None:
        self.conn = conn
        self.reply = reply
        self.correlation_id = correlation_id
        self.request = request
        self.logs: list[Log] = []
        self.timer = None
        self.done = False


class BrokerServer:
    def __init__(self, config: BrokerConfig, clock: Callable[[], int] = wall_clock_ms) -> None:
        self.config = config
        self.clock = clock
        self.metrics = BrokerMetrics()
        self.memory_pool = RequestMemoryPool(config.queued_max_request_bytes)
        self.metrics.memory_pool = self.memory_pool
        self.logs: LogManager | None = None
        self.page_cache: PageCacheBudget | None = None     # drop-behind, when on
        self.port = config.port
        self.metrics_port: int | None = None
        self.connections: set[Connection] = set()
        self._dirty: dict[Log, bool] = {}    # logs with buffered appends -> any acks=none?
        self._produce_waits: list[_ProduceWait] = []
        # logs whose write failed during the read being handled -> (offset
        # from which this read's appends were lost, the error)
        self._failed_logs: dict[Log, tuple[int, str]] = {}
        self._close_after_flush_pending = False
        # connections whose requests wait for a produce validated off the loop
        self._held_frames: dict[Connection, list] = {}
        self._validator = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="samsa-validate")
        self._flush_waiters: dict[Log, list] = {}
        self._fetch_waiters: dict[Log, set[_FetchWait]] = {}
        self._flush_timers: set[Log] = set()
        self._reflush: set[Log] = set()
        self._server: asyncio.base_events.Server | None = None
        self._flusher: Flusher | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping = False
        self._stopped = asyncio.Event()
        self._tasks: list[asyncio.Task] = []
        self._metrics_server = None
        self.registry = None          # BrokerRegistry when config.zookeeper is set
        self._handlers = {
            ApiKey.FETCH: self._handle_fetch,
            ApiKey.OFFSETS: self._handle_offsets,
            ApiKey.METADATA: self._handle_metadata,
            ApiKey.CREATE_TOPIC: self._handle_create_topic,
            ApiKey.DELETE_TOPIC: self._handle_delete_topic,
        }

    # ------------------------------------------------------------ life cycle

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        started = time.monotonic()
        os.makedirs(self.config.data_dir, exist_ok=True)
        self.logs = LogManager(self.config.data_dir, self.config.log, self.clock)
        cut = sum(lg.recovered_bytes_cut for lg in self.logs.all_logs())
        if cut:
            log.warning("recovery cut %d bytes of torn or corrupt data in total", cut)
        quarantined = [(lg.name, lg.quarantined_bytes) for lg in self.logs.all_logs()
                       if lg.quarantined]
        if quarantined:
            log.warning("%d partitions hold quarantined (corrupt or missing) byte ranges, %d "
                        "bytes in total: %s; consumers get CORRUPT_MESSAGE there with the "
                        "offset to go on from (samsa_log_quarantined_bytes)", len(quarantined),
                        sum(n for _name, n in quarantined),
                        ", ".join(f"{name} ({n} bytes)" for name, n in quarantined[:10]))
        if drop_behind_enabled(self.config.drop_behind):
            self.page_cache = PageCacheBudget(self.config.page_cache_budget_bytes)
            self.metrics.page_cache = self.page_cache
            log.info("drop-behind on (%s): at most %d recently flushed bytes stay in the "
                     "page cache", self.config.drop_behind, self.config.page_cache_budget_bytes)
        self._flusher = Flusher(lambda results: self._loop.call_soon_threadsafe(
            self._flushes_done, results))
        self._server = await self._loop.create_server(
            lambda: Connection(self), self.config.host, self.config.port, reuse_address=True,
            backlog=1024)
        self.port = self._server.sockets[0].getsockname()[1]
        if self.config.metrics_port >= 0:
            self._metrics_server, self.metrics_port = serve_metrics(
                self.metrics, self._partition_snapshot, self.config.host,
                self.config.metrics_port)
        if self.config.zookeeper:
            from broker.coordination.registry import BrokerRegistry
            self.registry = BrokerRegistry(self.config.zookeeper, self.config.broker_id,
                                           self.config.public_host, self.port,
                                           self.config.zookeeper_session_timeout_ms)
            self._topics_changed()
            self.registry.start()
        self._tasks.append(self._loop.create_task(self._periodic(
            self.config.retention_check_ms, self._run_retention)))
        self._tasks.append(self._loop.create_task(self._periodic(
            self.config.checkpoint_interval_ms, self._write_checkpoints)))
        self._tasks.append(self._loop.create_task(self._periodic(
            min(10_000, max(100, self.config.connections_max_idle_ms // 4)),
            self._close_idle_connections)))
        log.info("broker %d listening on %s:%d (metrics port %s), data in %s, %d topics, "
                 "started in %.2fs", self.config.broker_id, self.config.host, self.port,
                 self.metrics_port, self.config.data_dir, len(self.logs.topics),
                 time.monotonic() - started,
                 extra={"event": "started", "port": self.port, "metrics_port": self.metrics_port})

    def install_signal_handlers(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGINT):
            self._loop.add_signal_handler(sig, lambda s=sig: self._loop.create_task(
                self.shutdown(f"signal {signal.Signals(s).name}")))

    async def wait_stopped(self) -> None:
        await self._stopped.wait()

    async def shutdown(self, reason: str = "requested") -> None:
        """Stop accepting, finish in-flight requests, flush, checkpoint, close."""
        if self._stopping:
            return
        self._stopping = True
        log.info("shutting down (%s)", reason, extra={"event": "shutdown"})
        self._server.close()
        if self.registry is not None:
            # leave the cluster first, so producers and consumers move away now
            await self._loop.run_in_executor(None, self.registry.close)
        for task in self._tasks:
            task.cancel()
        for conn in list(self.connections):
            conn._pause_reading()
        # answer waiting fetches now with what they have
        for waits in list(self._fetch_waiters.values()):
            for fw in list(waits):
                self._complete_fetch(fw, final=True)
        # flush everything; "flushed" acks complete as the flushes land
        for lg in list(self.logs.all_logs()):
            if lg.end_offset > lg.flushed_end:
                self._request_flush(lg, force=True)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and (
                any(lg.flush_in_progress or lg.end_offset > lg.flushed_end
                    for lg in self.logs.all_logs())
                or any(c.outbox for c in self.connections)):
            await asyncio.sleep(0.01)
        self._flusher.stop()
        self._validator.shutdown(wait=True, cancel_futures=True)
        self.logs.close(clean=True)
        for conn in list(self.connections):
            conn.close()
        if self._metrics_server is not None:
            # shutdown() waits out the HTTP server's 0.5 s poll: do not hold up the exit
            threading.Thread(target=self._metrics_server.shutdown, daemon=True).start()
        log.info("stopped cleanly", extra={"event": "stopped"})
        self._stopped.set()

    async def _periodic(self, interval_ms: int, fn) -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000)
            try:
                fn()
            except Exception:
                log.exception("periodic task %s failed", fn.__name__)

    def _run_retention(self) -> None:
        now = self.clock()
        for lg in list(self.logs.all_logs()):
            lg.apply_retention(now)

    def _write_checkpoints(self) -> None:
        for lg in list(self.logs.all_logs()):
            if lg.flushed_end != lg.recovery_point:
                try:
                    lg.write_checkpoint()
                except OSError as exc:
                    log.error("cannot write the recovery checkpoint of %s: %s", lg.name, exc)

    def _close_idle_connections(self) -> None:
        """Kafka's connections.max.idle.ms: close connections that sent
        nothing and wait for nothing for that long."""
        deadline = time.monotonic() - self.config.connections_max_idle_ms / 1000
        for conn in list(self.connections):
            if conn.last_active < deadline and not conn.outbox and not conn.closed:
                log.info("closing connection from %s: idle for more than %d ms", conn.peer,
                         self.config.connections_max_idle_ms)
                self.metrics.connections_closed_idle += 1
                conn.close()

    def _topics_changed(self) -> None:
        """Tell ZooKeeper (if any) which topics this broker now holds."""
        if self.registry is not None:
            self.registry.set_topics({name: len(t.logs) for name, t in self.logs.topics.items()})

    def _partition_snapshot(self):
        for name, topic in list(self.logs.topics.items()):
            for p, lg in enumerate(list(topic.logs)):
                yield name, p, lg

    def connection_opened(self, conn: Connection) -> None:
        self.connections.add(conn)
        self.metrics.connections = len(self.connections)
        if self._stopping:
            conn.close()

    def connection_closed(self, conn: Connection) -> None:
        """Drop the closed connection's pending work at once: its parked
        fetches (their timers and wake-ups) and requests held for validation."""
        self.connections.discard(conn)
        self.metrics.connections = len(self.connections)
        self._held_frames.pop(conn, None)
        for fw in conn.parked_fetches:
            fw.done = True
            if fw.timer is not None:
                fw.timer.cancel()
            for lg in fw.logs:
                waiting = self._fetch_waiters.get(lg)
                if waiting is not None:
                    waiting.discard(fw)
        conn.parked_fetches.clear()

    # ------------------------------------------------------------ dispatch

    def handle_frames(self, conn: Connection, frames: list) -> None:
        """Handle every whole request of one read, then write the produced
        data (one vectored write per partition) and send what is ready.

        A produce whose compressed wrappers inflate beyond what may be checked
        on the event loop is validated on a worker thread; the connection's
        later requests wait for it (held, reading paused), so its requests
        are still handled in order while other connections are served."""
        if self._held_frames:
            held = self._held_frames.get(conn)
            if held is not None:
                held.extend(frames)
                return
        metrics = self.metrics
        now = self.clock()
        fast_produce = api.decode_produce_frame
        max_message_bytes = self.config.max_message_bytes
        # The paper's batch-1 case: runs of acks=none produce requests of one
        # message set each. Once a (topic, partition) had one appended through
        # the full path in this read, its next ones skip straight to the log.
        # Only this read: a request other than produce clears it (a topic
        # deleted between two produces must not be appended to).
        c_frame = api.produce_frame_c
        no_ack_logs: dict[tuple[str, int], Log] = {}
        requests = metrics.requests
        for i, payload in enumerate(frames):
            raw = None
            if no_ack_logs:
                raw = c_frame(payload, max_message_bytes)
                if raw is not None and raw[1] == 0 and len(raw[3]) == 1:
                    topic, partition, start, stop, count, first_ts, max_ts = raw[3][0]
                    lg = no_ack_logs.get((topic, partition))
                    if lg is not None and count and not self._failed_logs \
                            and not self._stopping:
                        requests["produce"] += 1
                        try:
                            lg.append(payload[start:stop], count, first_ts, max_ts, now)
                        except StorageError as exc:
                            self._storage_failed(lg, exc, True)
                            log.warning("produce (acks=none) from %s to %s/%s failed: %s; "
                                        "closing the connection", conn.peer, topic, partition,
                                        exc)
                            conn.close_after_flush = True
                            no_ack_logs.clear()
                            continue
                        except Exception:   # a bug: as _append does, fail this one, go on
                            log.exception("error appending to %s/%s", quote_name(topic),
                                          partition)
                            metrics.errors[("produce", "UNKNOWN")] += 1
                            conn.close_after_flush = True
                            no_ack_logs.clear()
                            continue
                        metrics.messages_in[topic] += count
                        metrics.bytes_in[topic] += stop - start
                        metrics.produce_short_cuts += 1
                        continue
            # a frame the short cut parsed but could not take is not parsed again
            produce = (api.produce_of_c_frame(payload, raw) if raw is not None
                       else fast_produce(payload, max_message_bytes))
            if produce is not None:
                metrics.requests["produce"] += 1
                entries = produce[3]
                # the C fast path validated every entry (info set); the
                # Python fallback validates none (info None): check the first
                if entries and entries[0][3] is None and not self._validated_on_loop(entries):
                    self._validate_off_loop(conn, produce, frames[i + 1:])
                    break
                self._produce(conn, produce[0], produce[1], produce[2], entries, now,
                              no_ack_logs if c_frame is not None else None)
                continue
            no_ack_logs.clear()
            try:
                header, request = api.decode_request(payload)
            except ProtocolError as exc:
                correlation_id = getattr(exc, "correlation_id", None)
                api_name = API_NAMES.get(getattr(exc, "api_key", None), "unknown")
                metrics.errors[(api_name, ErrorCode(exc.code).name)] += 1
                if correlation_id is None:
                    limited_log.log(logging.WARNING, "unreadable request header",
                                    "closing connection from %s: unreadable request header: %s",
                                    conn.peer, exc)
                    conn.close()
                    break
                limited_log.log(logging.INFO, "invalid request", "invalid request from %s: %s",
                                conn.peer, exc)
                conn.add_reply(Reply(api.encode_error_response(correlation_id, exc.code,
                                                               str(exc))))
                continue
            metrics.requests[API_NAMES[header.api_key]] += 1
            try:
                if header.api_key == ApiKey.PRODUCE:
                    produce = (header.correlation_id, request.acks, request.timeout_ms,
                               [(t, p, ms, None) for t, p, ms in request.entries])
                    if not self._validated_on_loop(produce[3]):
                        self._validate_off_loop(conn, produce, frames[i + 1:])
                        break
                    self._produce(conn, *produce, now)
                else:
                    self._handlers[header.api_key](conn, header, request)
            except Exception as exc:   # a bug: answer, log, keep serving others
                log.exception("error handling %s from %s", API_NAMES[header.api_key], conn.peer)
                metrics.errors[(API_NAMES[header.api_key], "UNKNOWN")] += 1
                conn.add_reply(Reply(api.encode_error_response(
                    header.correlation_id, ErrorCode.UNKNOWN, f"internal error: {exc}")))
        self._write_dirty_logs(conn)
        conn.pump()

    # ------------------------------------------------------------ validation off the loop

    def _validated_on_loop(self, entries: list) -> bool:
        """Validate the entries not validated yet (``info`` None), filling in
        their info (or the CorruptMessageError that refuses them). False if
        one holds compressed wrappers that inflate beyond
        ``inline_decompress_bytes``: then the caller validates them off the loop."""
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

    def _validate_off_loop(self, conn: Connection, produce: tuple, rest: list) -> None:
        """Validate ``produce``'s entries on the validation thread; hold the
        connection's later requests (``rest`` and whatever it sends meanwhile)
        until it is done."""
        self._held_frames[conn] = list(rest)
        conn._pause_reading("validating")
        self.metrics.validations_off_loop += 1
        max_message_bytes = self.config.max_message_bytes
        cap = self.config.max_decompressed_bytes
        entries = produce[3]

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
        future.add_done_callback(lambda f: self._loop.call_soon_threadsafe(
            self._validated_off_loop, conn, produce, f))

    def _validated_off_loop(self, conn: Connection, produce: tuple, future) -> None:
        rest = self._held_frames.pop(conn, [])
        if conn.closed:
            return
        try:
            entries = future.result()
        except Exception as exc:      # a bug: fail these entries, keep serving
            log.exception("validating a produce from %s failed", conn.peer)
            error = CorruptMessageError(f"internal error: {exc}")
            error.code = ErrorCode.UNKNOWN
            entries = [(t, p, ms, error) for t, p, ms, _info in produce[3]]
        self._produce(conn, produce[0], produce[1], produce[2], entries, self.clock())
        self.handle_frames(conn, rest)
        if conn not in self._held_frames:
            conn._resume_reading("validating")

    # ------------------------------------------------------------ produce

    def _produce(self, conn: Connection, correlation_id: int, acks: int, timeout_ms: int,
                 entries, now: int, no_ack_logs: dict | None = None) -> None:
        """Append each entry (topic, partition, message set) to its log's
        buffer; the reply (unless acks is NONE) waits for the write, and for
        the flush with acks FLUSHED. ``no_ack_logs`` (handle_frames' fast
        path) gets the logs an acks=none entry was appended to."""
        if self._stopping:
            if acks == Acks.NONE:
                conn.close()
            else:
                conn.add_reply(Reply(api.encode_error_response(
                    correlation_id, ErrorCode.BROKER_SHUTTING_DOWN, "broker is stopping")))
            return
        append = self._append
        if acks == Acks.NONE:
            for topic, partition, message_set, info in entries:
                result = append(topic, partition, message_set, info, now, True)
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
        results = [append(topic, partition, message_set, info, now, False)
                   for topic, partition, message_set, info in entries]
        reply = Reply()
        conn.add_reply(reply)
        self._produce_waits.append(_ProduceWait(conn, reply, correlation_id, acks, results,
                                                timeout_ms))

    def _append(self, topic_name: str, partition: int, message_set, info, now: int,
                no_ack: bool) -> list:
        """Validate (unless ``info`` says it was) and buffer one message set.
        Returns the result row [topic, partition, error, message, base, end, log].
        Never raises: whatever goes wrong becomes this entry's error."""
        try:
            topic = self.logs.topics.get(topic_name)
            if topic is None:
                if not self.config.auto_create_topics:
                    return self._error_result(topic_name, partition,
                                              ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                              f"unknown topic {quote_name(topic_name)}")
                try:
                    topic = self.logs.create_topic(topic_name, self.config.default_partitions)
                    self._topics_changed()
                except InvalidConfigError as exc:
                    return self._error_result(topic_name, partition, ErrorCode.INVALID_TOPIC,
                                              str(exc))
                except OSError as exc:
                    return self._error_result(topic_name, partition, ErrorCode.STORAGE_ERROR,
                                              f"cannot create topic: {exc}")
            logs = topic.logs
            if partition == api.ANY_PARTITION:
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

    def _write_dirty_logs(self, conn: Connection | None = None) -> None:
        """Write every log's buffered appends; answer "written" acks, queue
        "flushed" ones, and fail the requests whose write failed."""
        if not self._dirty and not self._produce_waits and not self._failed_logs:
            return
        now = self.clock()
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
            elif lg not in self._flush_timers and lg.unflushed_messages:
                self._flush_timers.add(lg)
                self._loop.call_later(lg.config.flush_ms / 1000, self._flush_timer_fired, lg)
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
            else:
                self._finish_produce(pw)

    def _await_flush(self, pw: _ProduceWait) -> None:
        for r in pw.results:
            lg = r[6]
            if lg is not None and lg.flushed_end < r[5]:
                pw.outstanding += 1
                self._flush_waiters.setdefault(lg, []).append((r[5], pw, r))
                self._request_flush(lg, force=True)
        if pw.outstanding == 0:
            self._finish_produce(pw)
        else:
            pw.timer = self._loop.call_later(max(1, pw.timeout_ms) / 1000,
                                             self._produce_timed_out, pw)

    def _produce_timed_out(self, pw: _ProduceWait) -> None:
        if pw.outstanding == 0:
            return
        for lg, waiters in list(self._flush_waiters.items()):
            keep = []
            for w in waiters:
                if w[1] is pw:
                    w[2][2] = ErrorCode.REQUEST_TIMED_OUT
                    w[2][3] = "not flushed within the request timeout"
                else:
                    keep.append(w)
            self._flush_waiters[lg] = keep
        pw.outstanding = 0
        self._finish_produce(pw)

    def _finish_produce(self, pw: _ProduceWait) -> None:
        if pw.timer is not None:
            pw.timer.cancel()
        results = tuple(api.ProduceResult(r[0], r[1], int(r[2]), r[3], r[4], r[5])
                        for r in pw.results)
        pw.reply.set([api.encode_response(pw.correlation_id, api.ProduceResponse(results))])
        pw.conn.pump()

    # ------------------------------------------------------------ flushing

    def _request_flush(self, lg: Log, force: bool = False) -> None:
        if lg.deleted:          # a timer or a re-flush outliving its topic
            return
        if lg.flush_in_progress:
            if force:
                self._reflush.add(lg)
            return
        if lg.written_end <= lg.flushed_end and not lg.unflushed_messages:
            return
        if not force and not lg.needs_flush(self.clock()):
            return
        try:
            segments, target = lg.begin_flush()
        except StorageError as exc:
            log.error("flush of %s failed before fsync: %s", lg.name, exc)
            return
        self._flusher.submit(lg, segments, target)

    def _flush_timer_fired(self, lg: Log) -> None:
        self._flush_timers.discard(lg)
        if lg.unflushed_messages:
            if lg.flush_in_progress:
                self._reflush.add(lg)
            else:
                self._request_flush(lg, force=True)

    def _flushes_done(self, results) -> None:
        for lg, segments, target, ok, seconds, error in results:
            durable = lg.complete_flush(segments, target, ok)
            if durable and self.page_cache is not None:
                self.page_cache.flushed(durable)
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
                    pw.outstanding -= 1
                    if pw.outstanding == 0:
                        self._finish_produce(pw)
                self._flush_waiters[lg] = keep
            fetches = self._fetch_waiters.get(lg)
            if fetches:
                for fw in list(fetches):
                    self._complete_fetch(fw, final=False)
            if lg in self._reflush:
                self._reflush.discard(lg)
                self._request_flush(lg, force=True)
            elif lg.unflushed_messages:
                if lg.needs_flush(self.clock()):
                    self._request_flush(lg)
                elif lg not in self._flush_timers:
                    self._flush_timers.add(lg)
                    self._loop.call_later(lg.config.flush_ms / 1000, self._flush_timer_fired, lg)

    # ------------------------------------------------------------ fetch

    def _handle_fetch(self, conn: Connection, header, req: api.FetchRequest) -> None:
        reply = Reply()
        conn.add_reply(reply)
        fw = _FetchWait(conn, reply, header.correlation_id, req)
        max_wait = min(req.max_wait_ms, self.config.max_fetch_wait_ms)
        if self._complete_fetch(fw, final=max_wait == 0 or self._stopping):
            return
        for entry in req.entries:
            topic = self.logs.get(entry.topic)
            lg = topic.logs[entry.partition]
            fw.logs.append(lg)
            self._fetch_waiters.setdefault(lg, set()).add(fw)
        conn.parked_fetches.add(fw)
        fw.timer = self._loop.call_later(max_wait / 1000, self._complete_fetch, fw, True)

    def _complete_fetch(self, fw: _FetchWait, final: bool) -> bool:
        """Answer the fetch if it has min_bytes (or an error, or ``final``)."""
        if fw.done:
            return True
        plan = []
        total = 0
        has_error = False
        for entry in fw.request.entries:
            try:
                row = self._plan_fetch_entry(entry)
            except Exception as exc:     # a bug: this entry fails, the others go on
                log.exception("error planning a fetch of %s/%s", quote_name(entry.topic),
                              entry.partition)
                row = (entry, ErrorCode.UNKNOWN, f"internal error: {exc}", -1, -1, None, 0, 0)
            plan.append(row)
            if row[1]:
                has_error = True
            else:
                total += row[7]
        if not (final or has_error or total >= max(fw.request.min_bytes, 1)
                or fw.request.min_bytes == 0):
            return False
        fw.done = True
        fw.conn.parked_fetches.discard(fw)
        if fw.timer is not None:
            fw.timer.cancel()
        for lg in fw.logs:
            waiting = self._fetch_waiters.get(lg)
            if waiting is not None:
                waiting.discard(fw)
        parts: list = [api._I32.pack(len(plan))]
        size = 4
        has_regions = False
        metrics = self.metrics
        for entry, error, message, earliest, hw, seg, position, length in plan:
            head = api.encode_fetch_result_header(entry.topic, entry.partition, error, message,
                                                  earliest, hw, length)
            parts.append(head)
            size += len(head) + length
            if type(seg) is bytes:         # an error's payload (a quarantined range)
                parts.append(seg)
            elif length:
                seg.pin()
                parts.append(FileRegion(seg, position, length))
                has_regions = True
                metrics.bytes_out[entry.topic] += length
            if error:
                metrics.errors[("fetch", ErrorCode(error).name)] += 1
        parts.insert(0, api.encode_response_header(fw.correlation_id, size))
        if has_regions:
            fw.reply.set(parts, has_regions=True)
        else:
            fw.reply.set([b"".join(parts)])
        fw.conn.pump()
        return True

    def _plan_fetch_entry(self, entry) -> tuple:
        """What to send for one fetch entry: (entry, error, message, earliest,
        high watermark, segment or error payload, position, length)."""
        topic = self.logs.get(entry.topic)
        if topic is None or not 0 <= entry.partition < len(topic.logs):
            return (entry, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    f"unknown topic or partition {quote_name(entry.topic)}/{entry.partition}",
                    -1, -1, None, 0, 0)
        lg = topic.logs[entry.partition]
        try:
            seg, position, length = lg.locate(entry.offset, entry.max_bytes)
        except OffsetOutOfRangeError as exc:
            return (entry, ErrorCode.OFFSET_OUT_OF_RANGE, str(exc), exc.earliest, exc.latest,
                    None, 0, 0)
        except CorruptRangeError as exc:
            # bit rot or lost bytes found by recovery: tell where to go on
            payload = api.encode_corrupt_range(exc.start, exc.end)
            return (entry, ErrorCode.CORRUPT_MESSAGE, str(exc), lg.earliest_offset,
                    lg.flushed_end, payload, 0, len(payload))
        if length and not lg.check_message_at(entry.offset, self.config.max_message_bytes):
            # The broker has no index, but it can tell that no valid message
            # starts here: the client would otherwise parse garbage lengths.
            end = lg.corrupt_message_end(entry.offset, self.config.max_message_bytes)
            if end is not None:
                # a damaged message at a real boundary (bit rot since start-up)
                payload = api.encode_corrupt_range(entry.offset, end)
                return (entry, ErrorCode.CORRUPT_MESSAGE,
                        f"the message at offset {entry.offset} is corrupt; the next one "
                        f"starts at {end}", lg.earliest_offset, lg.flushed_end, payload, 0,
                        len(payload))
            return (entry, ErrorCode.INVALID_OFFSET,
                    f"offset {entry.offset} is not the start of a valid message",
                    lg.earliest_offset, lg.flushed_end, None, 0, 0)
        return (entry, ErrorCode.NONE, "", lg.earliest_offset, lg.flushed_end, seg, position,
                length)

    # ------------------------------------------------------------ offsets, metadata, admin

    def _handle_offsets(self, conn: Connection, header, req: api.OffsetsRequest) -> None:
        topic = self.logs.get(req.topic)
        if topic is None or not 0 <= req.partition < len(topic.logs):
            resp = api.OffsetsResponse(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                       f"unknown topic or partition {quote_name(req.topic)}/"
                                       f"{req.partition}", ())
        else:
            lg = topic.logs[req.partition]
            if req.time == api.LATEST:
                offsets = [lg.flushed_end]
            elif req.time == api.EARLIEST:
                offsets = [lg.earliest_offset]
            else:
                offsets = lg.offsets_before(req.time, req.max_offsets)
            resp = api.OffsetsResponse(0, "", tuple(offsets[:req.max_offsets]))
        conn.add_reply(Reply(api.encode_response(header.correlation_id, resp)))

    def _handle_metadata(self, conn: Connection, header, req: api.MetadataRequest) -> None:
        names = req.topics or sorted(self.logs.topics)
        topics = []
        for name in names:
            topic = self.logs.get(name)
            if topic is None:
                topics.append(api.TopicInfo(name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                            f"unknown topic {quote_name(name)}"))
                continue
            parts = tuple(api.PartitionInfo(p, lg.earliest_offset, lg.flushed_end,
                                            lg.size_bytes, len(lg.segments))
                          for p, lg in enumerate(topic.logs))
            topics.append(api.TopicInfo(name, 0, "", tuple(sorted(topic.overrides.items())),
                                        parts))
        resp = api.MetadataResponse(self.config.broker_id, self.config.public_host, self.port,
                                    tuple(topics), self.config.max_message_bytes)
        conn.add_reply(Reply(api.encode_response(header.correlation_id, resp)))

    def _handle_create_topic(self, conn: Connection, header, req: api.CreateTopicRequest) -> None:
        try:
            self.logs.create_topic(req.name, req.partitions, parse_overrides(req.config))
            self._topics_changed()
            data = api.encode_response(header.correlation_id, api.EmptyResponse())
        except TopicExistsError as exc:
            data = api.encode_error_response(header.correlation_id,
                                             ErrorCode.TOPIC_ALREADY_EXISTS, str(exc))
        except InvalidConfigError as exc:
            code = ErrorCode.INVALID_TOPIC if "topic name" in str(exc) else \
                ErrorCode.INVALID_CONFIG
            data = api.encode_error_response(header.correlation_id, code, str(exc))
        except OSError as exc:
            data = api.encode_error_response(header.correlation_id, ErrorCode.STORAGE_ERROR,
                                             f"cannot create topic: {exc}")
        conn.add_reply(Reply(data))

    def _handle_delete_topic(self, conn: Connection, header, req: api.DeleteTopicRequest) -> None:
        topic = self.logs.get(req.name)
        if topic is None:
            data = api.encode_error_response(header.correlation_id,
                                             ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                             f"unknown topic {req.name!r}")
        else:
            self._write_dirty_logs()
            waiting_fetches = []
            for lg in topic.logs:
                self._reflush.discard(lg)
                waiting_fetches.extend(self._fetch_waiters.pop(lg, ()))
                for _end, pw, r in self._flush_waiters.pop(lg, ()):
                    r[2], r[3] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "topic deleted"
                    pw.outstanding -= 1
                    if pw.outstanding == 0:
                        self._finish_produce(pw)
            try:
                self.logs.delete_topic(req.name)
                self._topics_changed()
                data = api.encode_response(header.correlation_id, api.EmptyResponse())
            except (UnknownTopicError, OSError) as exc:
                data = api.encode_error_response(header.correlation_id, ErrorCode.STORAGE_ERROR,
                                                 f"cannot delete topic: {exc}")
            # Answered after the delete: they see UNKNOWN_TOPIC_OR_PARTITION,
            # not an empty result with the deleted log's watermarks.
            for fw in waiting_fetches:
                self._complete_fetch(fw, final=True)
        conn.add_reply(Reply(data))
