"""The broker: serves the Samsa protocol over TCP on one asyncio event loop.

This module holds the broker's life cycle (start, periodic tasks, shutdown),
the listener and its connections, and the dispatch of each request: produce
requests to the produce path (produce.py: appends, writes, flushes, acks),
fetches to the fetch long-poll (fetch.py), offsets, metadata and topic
administration here.

Request flow of one read of a connection (all on the event-loop thread):

  bytes -> Connection (framing) -> handle_frames: decode and handle every
  whole request of the read, appending produced message sets to in-memory
  buffers of their logs -> write those buffers to the segment files (one
  write per partition per read: cheap batching for small requests) ->
  answer "written" acks -> hand logs that reached flush.messages (or whose
  flush.ms timer fired, or that a "flushed" ack waits on) to the flusher
  thread -> on flush completion: advance the flushed end, answer "flushed"
  acks, wake long-polling fetches.

Other threads: the flusher (fsync only) and the validation thread (produce
requests whose compressed wrappers are too large to inflate on the loop),
both reporting back with loop.call_soon_threadsafe; the metrics HTTP server
reads counters. The broker keeps no per-consumer state: a fetch names its
offset.
"""
from __future__ import annotations

import asyncio
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
from broker.protocol.errors import ErrorCode, ProtocolError
from broker.coordination import paths
from broker.coordination.zk_acls import Identity, acl_for
from broker.security.acl import Operation, ResourceType
from broker.storage.errors import InvalidConfigError
from broker.storage.log import Log
from broker.storage.log_config import parse_overrides
from broker.storage.log_manager import LogManager, TopicExistsError, UnknownTopicError
from broker.storage.page_cache import PageCacheBudget, drop_behind_enabled

from .authentication import ANONYMOUS, Authenticator
from .authorization import RequestAuthorizer, permissions_of
from .connection import Connection, Reply
from .fetch import FetchLongPoll
from .memory_pool import RequestMemoryPool
from broker.service_kit.metrics_http import serve_metrics

from .metrics import BrokerCollector, BrokerMetrics
from .produce import ProducePath

log = logging.getLogger(__name__)
limited_log = RateLimitedLog(log)      # for what a client can trigger at will

API_NAMES = {k: k.name.lower() for k in ApiKey}
#: a TLS client has this long to finish its handshake, or its connection is closed
TLS_HANDSHAKE_TIMEOUT_S = 10.0


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


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
        # the request paths, made by start() once the logs are open
        self.produce_path: ProducePath | None = None
        self.fetch_long_poll: FetchLongPoll | None = None
        # connections whose requests wait for a produce validated off the loop
        self._held_frames: dict[Connection, list] = {}
        self._server: asyncio.base_events.Server | None = None
        self._tls_server: asyncio.base_events.Server | None = None
        self.tls_port: int | None = None      # the TLS listener's, when tls_port >= 0
        self.tls_contexts = None              # its ReloadingContext
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping = False
        self._listening = True        # until the shutdown closes the listener
        self._stopped = asyncio.Event()
        self._tasks: list[asyncio.Task] = []
        self._metrics_server = None
        self.registry = None          # BrokerRegistry when config.zookeeper is set
        self.replication = None       # ReplicaManager when config.zookeeper is set
        self.controller = None        # Controller when config.zookeeper is set
        # security (docs/security.md): the users and ACLs read from ZooKeeper,
        # the SASL exchange of connections that must authenticate, the ACL check
        self.security = None          # SecurityCache, when SCRAM or authorization is on
        self.authenticator: Authenticator | None = None
        self.request_authorizer: RequestAuthorizer | None = None
        # the requests other than produce (which handle_frames decodes on a fast
        # path of its own); start() adds FETCH, once the fetch long-poll exists
        self._handlers = {
            ApiKey.OFFSETS: self._handle_offsets,
            ApiKey.METADATA: self._handle_metadata,
            ApiKey.CREATE_TOPIC: self._handle_create_topic,
            ApiKey.DELETE_TOPIC: self._handle_delete_topic,
            # the replication APIs: decoded, not served yet (UNSUPPORTED_VERSION)
            ApiKey.REPLICA_FETCH: self._handle_not_served,
            ApiKey.LEADER_EPOCH_END: self._handle_not_served,
            # after authentication, or on a listener that does not ask for it
            ApiKey.SASL_HANDSHAKE: self._handle_sasl_out_of_place,
            ApiKey.SASL_AUTHENTICATE: self._handle_sasl_out_of_place,
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
        self.fetch_long_poll = FetchLongPoll(self.config, self.logs, self.metrics, self._loop)
        self.produce_path = ProducePath(self.config, self.logs, self.metrics, self._loop,
                                        self.clock, self.page_cache,
                                        on_flushed=self.fetch_long_poll.wake,
                                        on_topics_changed=self._topics_changed)
        self._handlers[ApiKey.FETCH] = self.fetch_long_poll.handle
        if self.config.zookeeper:
            from .replica_manager import ReplicaManager
            self.replication = ReplicaManager(self.config, self.logs, self.metrics, self._loop,
                                              self.clock)
            self.replication.produce_path = self.produce_path
            self.replication.fetch_long_poll = self.fetch_long_poll
            self.replication.load_local()
            self.produce_path.set_replication(self.replication)
            self.fetch_long_poll.set_replication(self.replication)
            self.metrics.replicas = lambda: list(self.replication.partitions.values())
            self._handlers[ApiKey.REPLICA_FETCH] = self.replication.handle_replica_fetch
            self._handlers[ApiKey.LEADER_EPOCH_END] = self.replication.handle_leader_epoch_end
        self._start_security()
        self._server = await self._loop.create_server(
            lambda: Connection(self), self.config.host, self.config.port, reuse_address=True,
            backlog=1024)
        self.port = self._server.sockets[0].getsockname()[1]
        if self.config.tls_port >= 0:
            from broker.security.tls import ReloadingContext, TlsSettings
            c = self.config
            self.tls_contexts = ReloadingContext.server(TlsSettings(
                c.tls_cert_file, c.tls_key_file, c.tls_ca_file, client_auth=c.tls_client_auth))
            self._tls_server = await self._loop.create_server(
                lambda: Connection(self, tls=True), c.host, c.tls_port, reuse_address=True,
                backlog=1024, ssl=self.tls_contexts.listener(),
                ssl_handshake_timeout=TLS_HANDSHAKE_TIMEOUT_S)
            self.tls_port = self._tls_server.sockets[0].getsockname()[1]
        if self.config.metrics_port >= 0:
            self._metrics_server = serve_metrics(
                self.config.host, self.config.metrics_port,
                BrokerCollector(self.metrics, self._partition_snapshot, self.config.data_dir),
                name="broker-metrics", security=self.config.metrics_http)
            self.metrics_port = self._metrics_server.port
        if self.config.zookeeper:
            from broker.coordination.registry import BrokerRegistry
            from broker.coordination.controller import Controller
            self.registry = BrokerRegistry(self.config.zookeeper, self.config.broker_id,
                                           self.config.public_host, self.port,
                                           self.config.zookeeper_session_timeout_ms,
                                           rack=self.config.rack,
                                           identity=Identity.from_file(
                                               self.config.zookeeper_auth_file),
                                           tls_port=self.tls_port if self.config.tls_port >= 0
                                           else None,
                                           zookeeper_tls=self.config.zookeeper_tls_settings())
            self.controller = Controller(self.registry.client, self.config.broker_id,
                                         lambda: self.config.unclean_leader_election)
            self.metrics.controller = self.controller.stats
            self.registry.on_connected += [self.replication.start,
                                           lambda _client: self.controller.start()]
            if self.security is not None:
                self.security.use_client(self.registry.client)
                self.registry.on_connected.insert(0, lambda _client: self.security.start())
            self.registry.on_registration.append(self.replication.registration_changed)
            if self.config.zookeeper_auth_file:
                # /consumers with its own ACL before any group makes it its own
                self.registry.on_connected.append(lambda client: client.ensure_path(
                    paths.CONSUMERS, acl=acl_for(client, paths.CONSUMERS)))
            self._topics_changed()
            self.registry.start()
        self._tasks.append(self._loop.create_task(self._periodic(
            self.config.retention_check_ms, self._run_retention)))
        self._tasks.append(self._loop.create_task(self._periodic(
            self.config.checkpoint_interval_ms, self._write_checkpoints)))
        self._tasks.append(self._loop.create_task(self._periodic(
            min(10_000, max(100, self.config.connections_max_idle_ms // 4)),
            self._close_idle_connections)))
        log.info("broker %d listening on %s:%d%s (metrics port %s), data in %s, %d topics, "
                 "started in %.2fs", self.config.broker_id, self.config.host, self.port,
                 f" and TLS {self.tls_port}" if self.tls_port is not None else "",
                 self.metrics_port, self.config.data_dir, len(self.logs.topics),
                 time.monotonic() - started,
                 extra={"event": "started", "port": self.port, "metrics_port": self.metrics_port,
                        "tls_port": self.tls_port})

    def _start_security(self) -> None:
        """The users' credentials and the ACLs (a ZooKeeper cache, started
        once the broker's ZooKeeper client connects), when asked for."""
        c = self.config
        if "scram" not in (c.authentication, c.tls_authentication) and not c.authorization:
            return
        from broker.security.store import SecurityCache
        self.security = SecurityCache(None, c.super_users, c.allow_if_no_acl)
        if "scram" in (c.authentication, c.tls_authentication):
            self.authenticator = Authenticator(
                self.security.credential, self.security.ready.is_set,
                lambda: self.security.secret, self.metrics, self._loop,
                c.authentication_timeout_ms / 1000, c.max_request_bytes,
                c.max_unauthenticated_connections, self.handle_frames,
                c.max_unauthenticated_connections_per_address)
        if c.authorization:
            self.request_authorizer = RequestAuthorizer(self.security, c.super_users,
                                                        self.metrics)
            self.produce_path.refused = self._produce_refused
        log.info("security: plaintext port authentication %s, TLS port %s, authorization %s",
                 c.authentication, c.tls_authentication if c.tls_port >= 0 else "-",
                 "on" if c.authorization else "off")

    def install_signal_handlers(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGINT):
            self._loop.add_signal_handler(sig, lambda s=sig: self._loop.create_task(
                self.shutdown(f"signal {signal.Signals(s).name}")))

    async def wait_stopped(self) -> None:
        await self._stopped.wait()

    async def shutdown(self, reason: str = "requested") -> None:
        """Refuse writes, hand the partitions this broker leads to their
        followers (replicated topics), stop accepting, answer parked fetches,
        flush (waiting up to 10 s for the flushes and the replies still to
        send), checkpoint, close."""
        if self._stopping:
            return
        self._stopping = True
        self.produce_path.stopping = self.fetch_long_poll.stopping = True
        log.info("shutting down (%s)", reason, extra={"event": "shutdown"})
        if self.replication is not None:
            # hand the partitions this broker leads to their followers first;
            # the listener stays open meanwhile: a follower that has not
            # connected yet (or lost its connection) must reach this broker
            # to catch up. Clients that connect now are refused writes
            # (BROKER_SHUTTING_DOWN, NOT_LEADER_FOR_PARTITION).
            await self.replication.hand_over_leadership(
                self.config.controlled_shutdown_timeout_ms / 1000)
        self._listening = False
        self._server.close()
        if self._tls_server is not None:
            self._tls_server.close()
        if self.replication is not None:
            await self._loop.run_in_executor(None, self.controller.close)
        if self.security is not None:
            self.security.stop()
        if self.registry is not None:
            # leave the cluster first, so producers and consumers move away now
            await self._loop.run_in_executor(None, self.registry.close)
        if self.replication is not None:
            self.replication.close()
        for task in self._tasks:
            task.cancel()
        for conn in list(self.connections):
            conn.pause_reading("stopping")
        self.fetch_long_poll.answer_all()      # with what they have
        # flush everything; "flushed" acks complete as the flushes land
        self.produce_path.flush_all()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and (
                any(lg.flush_in_progress or lg.end_offset > lg.flushed_end
                    for lg in self.logs.all_logs())
                or any(c.outbox for c in self.connections)):
            await asyncio.sleep(0.01)
        self.produce_path.close()
        self.logs.close(clean=True)
        for conn in list(self.connections):
            conn.close()
        if self._metrics_server is not None:
            # stop() waits out the HTTP server's 0.5 s poll: do not hold up the exit
            threading.Thread(target=self._metrics_server.stop, daemon=True).start()
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
            if lg.checkpoint_due:
                try:
                    lg.write_checkpoint()
                except OSError as exc:
                    log.error("cannot write the recovery checkpoint of %s: %s", lg.name, exc)

    def _close_idle_connections(self) -> None:
        """Kafka's connections.max.idle.ms: close the connections that wait
        for no reply and whose ``last_active`` (bytes read, or replies written
        other than by sendfile) is older than that."""
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
            # replicated topics are found through /replication, not per broker
            self.registry.set_topics({name: len(t.logs) for name, t in self.logs.topics.items()
                                      if not t.replicated})

    def _partition_snapshot(self):
        for name, topic in list(self.logs.topics.items()):
            for p, lg in enumerate(list(topic.logs)):
                yield name, p, lg

    def connection_opened(self, conn: Connection) -> None:
        self.connections.add(conn)
        self.metrics.connections = len(self.connections)
        if not self._listening:
            conn.close()
            return
        mode = self.config.tls_authentication if conn.tls else self.config.authentication
        if mode == "scram":
            conn.principal = None
            self.authenticator.begin(conn)
        elif conn.principal is None:
            # "certificate" requires one (tls_client_auth = required): the
            # TLS handshake refused a client without
            conn.principal = ANONYMOUS

    def connection_closed(self, conn: Connection) -> None:
        """Drop the closed connection's pending work at once: its parked
        fetches (their timers and wake-ups) and requests held for validation."""
        self.connections.discard(conn)
        self.metrics.connections = len(self.connections)
        self._held_frames.pop(conn, None)
        if self.authenticator is not None:
            self.authenticator.connection_closed(conn)
        if self.replication is not None:      # first: both kinds share parked_fetches
            self.replication.drop_connection(conn)
        self.fetch_long_poll.drop_connection(conn)

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
        if conn.closed:                 # (refused at once: too many authenticating)
            return
        if conn.sasl is not None:       # not authenticated yet: the exchange only
            frames = self.authenticator.handle(conn, frames)
            if not frames:
                conn.pump()
                return
        authorizing = self.request_authorizer is not None
        metrics = self.metrics
        produce_path = self.produce_path
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
        taken_until = 0
        for i, payload in enumerate(frames):
            if i < taken_until:         # appended by the short cut below
                continue
            raw = None
            if no_ack_logs:
                taken_until, raw = produce_path.append_no_ack_run(
                    conn, frames, i, no_ack_logs, now, c_frame, max_message_bytes)
                if taken_until > i:     # the first frame not taken is parsed again
                    continue
            # a frame the short cut parsed but could not take is not parsed again
            produce = (api.produce_of_c_frame(payload, raw) if raw is not None
                       else fast_produce(payload, max_message_bytes))
            if produce is not None:
                metrics.requests["produce"] += 1
                if authorizing and self._produce_refused(conn, produce):
                    if conn.close_after_flush:
                        break
                    continue
                entries = produce[3]
                # the C fast path validated every entry (info set); the
                # Python fallback validates none (info None): check the first
                if entries and entries[0][3] is None and \
                        not produce_path.validate_on_loop(entries):
                    self._validate_off_loop(conn, produce, frames[i + 1:])
                    break
                produce_path.produce(conn, produce[0], produce[1], produce[2], entries, now,
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
            if authorizing and header.api_key != ApiKey.PRODUCE:
                refused = self.request_authorizer.check(
                    conn, permissions_of(header.api_key, request))
                if refused is not None:
                    code, message = refused
                    metrics.errors[(API_NAMES[header.api_key], code.name)] += 1
                    conn.add_reply(Reply(api.encode_error_response(header.correlation_id,
                                                                   code, message)))
                    continue
            try:
                if header.api_key == ApiKey.PRODUCE:
                    produce = (header.correlation_id, request.acks, request.timeout_ms,
                               [(t, p, ms, None) for t, p, ms in request.entries])
                    if authorizing and self._produce_refused(conn, produce):
                        if conn.close_after_flush:
                            break
                        continue
                    if not produce_path.validate_on_loop(produce[3]):
                        self._validate_off_loop(conn, produce, frames[i + 1:])
                        break
                    produce_path.produce(conn, *produce, now)
                else:
                    self._handlers[header.api_key](conn, header, request)
            except Exception as exc:   # a bug: answer, log, keep serving others
                log.exception("error handling %s from %s", API_NAMES[header.api_key], conn.peer)
                metrics.errors[(API_NAMES[header.api_key], "UNKNOWN")] += 1
                conn.add_reply(Reply(api.encode_error_response(
                    header.correlation_id, ErrorCode.UNKNOWN, f"internal error: {exc}")))
        produce_path.write_dirty_logs(conn)
        conn.pump()

    def _produce_refused(self, conn: Connection, produce: tuple) -> bool:
        """Refuse ``produce`` (correlation id, acks, timeout, entries) when
        the principal may not write to one of its topics (or create one the
        produce would auto-create): nothing of it is appended. An acks=none
        produce has no reply to carry the error: its connection is closed
        once its earlier replies are out, as for any acks=none failure."""
        authorizer = self.request_authorizer
        for topic in {entry[0] for entry in produce[3]}:
            needed = [(Operation.WRITE, ResourceType.TOPIC, topic)]
            if self.config.auto_create_topics and self.logs.get(topic) is None and not (
                    self.replication is not None and topic in self.replication.known_topics):
                needed.append((Operation.CREATE, ResourceType.TOPIC, topic))
            refused = authorizer.check(conn, needed)
            if refused is None:
                continue
            code, message = refused
            self.metrics.errors[("produce", code.name)] += 1
            if produce[1] == Acks.NONE:
                conn.close_after_flush = True
                conn.pause_reading("closing")
            else:
                conn.add_reply(Reply(api.encode_error_response(produce[0], code, message)))
            return True
        return False

    def _handle_sasl_out_of_place(self, conn: Connection, header, req) -> None:
        mode = self.config.tls_authentication if conn.tls else self.config.authentication
        why = ("this connection is authenticated already" if mode == "scram"
               else f"this listener does not take SASL (its authentication is {mode})")
        self.metrics.errors[(API_NAMES[header.api_key], "ILLEGAL_SASL_STATE")] += 1
        conn.add_reply(Reply(api.encode_error_response(
            header.correlation_id, ErrorCode.ILLEGAL_SASL_STATE, why)))

    def _validate_off_loop(self, conn: Connection, produce: tuple, rest: list) -> None:
        """Have ``produce`` validated off the loop (by the produce path); hold
        the connection's later requests (``rest`` and whatever it sends
        meanwhile), its reading paused, until it is produced; then handle them."""
        self._held_frames[conn] = list(rest)
        conn.pause_reading("validating")

        def produced() -> None:
            held = self._held_frames.pop(conn, [])
            if conn.closed:
                return
            self.handle_frames(conn, held)
            if conn not in self._held_frames:
                conn.resume_reading("validating")

        self.produce_path.validate_off_loop(conn, produce, produced)

    # ------------------------------------------------------------ offsets, metadata, admin

    def _handle_offsets(self, conn: Connection, header, req: api.OffsetsRequest) -> None:
        topic = self.logs.get(req.topic)
        if topic is None or not 0 <= req.partition < len(topic.logs):
            resp = api.OffsetsResponse(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                       f"unknown topic or partition {quote_name(req.topic)}/"
                                       f"{req.partition}", ())
        else:
            lg = topic.logs[req.partition]
            refusal = (self.replication.read_refusal(lg) if topic.replicated
                       and self.replication is not None else None)
            if refusal is not None:
                resp = api.OffsetsResponse(refusal[0], refusal[1], ())
            else:
                if req.time == api.LATEST:
                    offsets = [lg.visible_end]
                elif req.time == api.EARLIEST:
                    offsets = [lg.earliest_offset]
                else:
                    offsets = lg.offsets_before(req.time, req.max_offsets)
                resp = api.OffsetsResponse(0, "", tuple(offsets[:req.max_offsets]))
        conn.add_reply(Reply(api.encode_response(header.correlation_id, resp)))

    def _handle_metadata(self, conn: Connection, header, req: api.MetadataRequest) -> None:
        names = req.topics or sorted(self.logs.topics)
        if not req.topics and self.request_authorizer is not None:
            # all topics: only those the principal may describe (once the
            # ACLs are read: before, "retry", as for every other request)
            refused = self.request_authorizer.not_ready(conn)
            if refused is not None:
                conn.add_reply(Reply(api.encode_error_response(header.correlation_id,
                                                               *refused)))
                return
            names = [n for n in names if self.request_authorizer.allowed(
                conn, (Operation.DESCRIBE, ResourceType.TOPIC, n), count=False)]
        topics = []
        for name in names:
            topic = self.logs.get(name)
            if topic is None:
                topics.append(api.TopicInfo(name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                            f"unknown topic {quote_name(name)}"))
                continue
            parts = tuple(api.PartitionInfo(p, lg.earliest_offset, lg.visible_end,
                                            lg.size_bytes, len(lg.segments))
                          for p, lg in enumerate(topic.logs))
            topics.append(api.TopicInfo(name, 0, "", tuple(sorted(topic.overrides.items())),
                                        parts))
        # the listener the client came in by: a TLS client is told the TLS port
        port = self.tls_port if conn.tls and self.tls_port is not None else self.port
        resp = api.MetadataResponse(self.config.broker_id, self.config.public_host, port,
                                    tuple(topics), self.config.max_message_bytes)
        conn.add_reply(Reply(api.encode_response(header.correlation_id, resp)))

    def _handle_create_topic(self, conn: Connection, header, req: api.CreateTopicRequest) -> None:
        if self.replication is not None and (
                self.config.replication_factor or
                any(k == "replication.factor" for k, _v in req.config)):
            self._create_replicated_topic(conn, header, req)
            return
        replicated = False if self.replication is None else \
            self.replication.replicated_in_zookeeper(req.name)
        if replicated:
            # a replicated topic of that name, this broker's watch not yet told
            conn.add_reply(Reply(api.encode_error_response(
                header.correlation_id, ErrorCode.TOPIC_ALREADY_EXISTS,
                f"topic {req.name!r} already exists (replicated)")))
            return
        if replicated is None:
            # it may be: an unreplicated twin of a replicated topic is never made
            conn.add_reply(Reply(api.encode_error_response(
                header.correlation_id, ErrorCode.REQUEST_TIMED_OUT,
                f"cannot create topic {req.name!r} now: this broker cannot tell yet whether "
                f"a replicated topic of that name exists (ZooKeeper has not answered since "
                f"it started); retry")))
            return
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

    def _create_replicated_topic(self, conn: Connection, header,
                                 req: api.CreateTopicRequest) -> None:
        """In ZooKeeper, off the loop; answered once written (the replicas
        are created by each broker's watch, the leaders serve soon after)."""
        self._answer_off_loop(conn, header, self.replication.create_topic, req.name,
                              req.partitions, dict(req.config),
                              self.config.replication_factor or 1)

    def _answer_off_loop(self, conn: Connection, header, work, *args) -> None:
        """Run ``work(*args)`` -> (error code, message) on the executor (it
        blocks on ZooKeeper) and answer the request with an empty response
        or that error; later replies on the connection wait their turn."""
        reply = Reply()
        conn.add_reply(reply)
        future = self._loop.run_in_executor(None, work, *args)

        def done(f) -> None:
            try:
                code, message = f.result()
            except Exception as exc:   # a bug: answer it, keep serving
                log.exception("%s failed", API_NAMES[header.api_key])
                code, message = ErrorCode.UNKNOWN, f"internal error: {exc}"
            reply.set([api.encode_error_response(header.correlation_id, code, message)
                       if code else api.encode_response(header.correlation_id,
                                                        api.EmptyResponse())])
            conn.pump()

        future.add_done_callback(lambda f: self._loop.call_soon_threadsafe(done, f))

    def _handle_not_served(self, conn: Connection, header, req) -> None:
        """An API the codec knows but this broker does not serve (replication's
        on a broker without ZooKeeper): answered as an unknown API key is
        (UNSUPPORTED_VERSION), the connection kept."""
        name = API_NAMES[header.api_key]
        self.metrics.errors[(name, ErrorCode.UNSUPPORTED_VERSION.name)] += 1
        conn.add_reply(Reply(api.encode_error_response(
            header.correlation_id, ErrorCode.UNSUPPORTED_VERSION,
            f"this broker does not serve {name} requests (api_key {header.api_key})")))

    def _handle_delete_topic(self, conn: Connection, header, req: api.DeleteTopicRequest) -> None:
        topic = self.logs.get(req.name)
        if self.replication is not None and (
                (topic is not None and topic.replicated)
                or (topic is None and req.name in self.replication.known_topics)):
            # cluster-wide, in ZooKeeper: each broker's watch deletes its replicas
            self._answer_off_loop(conn, header, self.replication.delete_topic, req.name)
            return
        if topic is None:
            data = api.encode_error_response(header.correlation_id,
                                             ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                             f"unknown topic {req.name!r}")
        else:
            self.produce_path.forget_logs(topic.logs)
            waiting_fetches = self.fetch_long_poll.take_parked(topic.logs)
            try:
                self.logs.delete_topic(req.name)
                self._topics_changed()
                data = api.encode_response(header.correlation_id, api.EmptyResponse())
            except (UnknownTopicError, OSError) as exc:
                data = api.encode_error_response(header.correlation_id, ErrorCode.STORAGE_ERROR,
                                                 f"cannot delete topic: {exc}")
            # Answered after the delete: they see UNKNOWN_TOPIC_OR_PARTITION,
            # not an empty result with the deleted log's watermarks.
            self.fetch_long_poll.answer(waiting_fetches)
        conn.add_reply(Reply(data))
