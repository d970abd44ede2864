"""A follower's fetcher: one per leader broker, pulling every partition this
broker follows from that leader over one connection (docs/replication.md).

Per partition, two steps each time it starts following (or the leader's
answer shows the logs disagree):
  1. truncate: ask the leader where this replica's latest leader epoch ends
     on its side (LEADER_EPOCH_END) and cut the log there, or where this
     replica's own log says that epoch ends, whichever is lower (KIP-101 and
     KIP-279): the logs then agree byte for byte up to the cut. A log with no
     epoch recorded (an unreadable epoch file) is cut to its high watermark.
  2. fetch: REPLICA_FETCH from the log end, append exactly the whole
     messages received (through the produce path, so the flush rules hold),
     record the epochs the leader says they belong to, and take the leader's
     high watermark as this replica's own (capped at its log end).
A replica whose log end is below the leader's earliest offset (a wiped disk,
or one that fell behind retention) starts again empty at that offset.

The loop runs as a task on the broker's event loop (the logs are the loop's);
it reconnects with backoff when the leader cannot be reached.
"""
from __future__ import annotations

import asyncio
import logging
import struct

from broker.protocol import api, scram
from broker.protocol.errors import ErrorCode, ProtocolError
from broker.protocol.message import scan_valid_prefix
from broker.storage.errors import StorageError

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")


class LeaderRefused(ProtocolError):
    """The leader answered a request with an error in its header."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"the leader refused: {message}")
        self.code = code


class ReplicaFetcher:
    def __init__(self, manager, leader: int) -> None:
        self.manager = manager
        self.leader = leader
        self.partitions: dict[tuple[str, int], object] = {}    # -> PartitionReplica
        self._changed = asyncio.Event()
        self._stopped = False
        self._correlation = 0
        self._max_bytes = max(manager.config.replica_fetch_max_bytes,
                              manager.config.max_message_bytes + 64)
        self._task = asyncio.get_running_loop().create_task(self._run())

    def add(self, rep) -> None:
        self.partitions[(rep.topic, rep.partition)] = rep
        self._changed.set()

    def remove(self, rep) -> None:
        if self.partitions.get((rep.topic, rep.partition)) is rep:
            del self.partitions[(rep.topic, rep.partition)]

    def stop(self) -> None:
        self._stopped = True
        self._task.cancel()

    # ------------------------------------------------------------ the loop

    async def _run(self) -> None:
        backoff = 0.05
        while not self._stopped:
            if not self.partitions:
                self._changed.clear()
                await self._changed.wait()
                continue
            address = self.manager.addresses.get(self.leader)
            if address is None:
                await asyncio.sleep(0.1)      # not registered (yet): the watch will tell
                continue
            writer = None
            try:
                tls = self.manager.tls_client
                reader, writer = await asyncio.wait_for(asyncio.open_connection(
                    *address, **({"ssl": tls.current(), "server_hostname": address[0]}
                                 if tls is not None else {})), 5)
                if self.manager.sasl_login is not None:
                    await self._authenticate(reader, writer, *self.manager.sasl_login)
                backoff = 0.05
                while not self._stopped and self.partitions:
                    if self.manager.addresses.get(self.leader) != address:
                        break                  # the leader moved: connect anew
                    await self._truncate(reader, writer)
                    await self._fetch(reader, writer)
            except asyncio.CancelledError:
                raise
            except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, ProtocolError,
                    ConnectionError) as exc:
                if self.partitions:
                    log.warning("replication: fetching from broker %d at %s:%d failed (%s); "
                                "retrying", self.leader, *address, exc or type(exc).__name__)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 2.0)
            except Exception:   # a bug: log it, keep replicating
                log.exception("replication: fetcher of broker %d failed", self.leader)
                await asyncio.sleep(1.0)
            finally:
                if writer is not None:
                    writer.close()

    async def _request(self, reader, writer, request, timeout: float):
        self._correlation = (self._correlation + 1) & 0x7FFFFFFF
        cid = self._correlation
        writer.write(api.encode_request(request, cid, f"replica-{self.manager.broker_id}"))
        await writer.drain()
        head = await asyncio.wait_for(reader.readexactly(4), timeout)
        (size,) = _SIZE.unpack(head)
        if not 0 < size <= self._max_bytes * max(1, len(self.partitions)) + (1 << 20):
            raise ProtocolError(f"response of {size} bytes")
        payload = await asyncio.wait_for(reader.readexactly(size), timeout)
        got, response = api.decode_response(request.API, payload)
        if got != cid:
            raise ProtocolError(f"correlation id {got}, expected {cid}")
        if isinstance(response, api.ErrorResponse):
            raise LeaderRefused(response.error, response.message)
        return response

    async def _authenticate(self, reader, writer, user: str, password: str) -> None:
        """SCRAM-SHA-512 with the leader, for a listener that asks for it (the
        broker's settings sasl_username and sasl_password_file)."""
        try:
            await self._request(reader, writer, api.SaslHandshakeRequest(scram.MECHANISM), 10)
        except LeaderRefused as exc:
            if exc.code == ErrorCode.ILLEGAL_SASL_STATE:
                return          # the leader's listener takes no SASL (a migration): go on
            raise
        client = scram.ScramClient(user, password)
        first = await self._request(reader, writer, api.SaslAuthenticateRequest(client.first()),
                                    10)
        try:
            # PBKDF2 of the leader's iteration count: off the event loop
            final = await asyncio.get_running_loop().run_in_executor(
                None, client.final, first.auth_bytes)
            answer = await self._request(reader, writer, api.SaslAuthenticateRequest(final), 10)
            client.verify(answer.auth_bytes)
        except scram.ScramError as exc:
            raise ProtocolError(f"authentication with the leader failed: {exc}") from None

    # ------------------------------------------------------------ 1. truncate

    async def _truncate(self, reader, writer) -> None:
        asking = []
        for rep in list(self.partitions.values()):
            if not rep.needs_truncation:
                continue
            lg = rep.log
            lg.write_pending()
            if lg.epochs.latest_epoch < 0:
                if lg.end_offset > lg.earliest_offset:
                    to = max(lg.earliest_offset, min(lg.high_watermark, lg.end_offset))
                    self._cut(rep, to, "no leader epoch recorded: cut to the high watermark")
                rep.needs_truncation = False
                continue
            asking.append(rep)
        if not asking:
            return
        request = api.LeaderEpochEndRequest(
            self.manager.broker_id,
            tuple(api.LeaderEpochEndEntry(rep.topic, rep.partition, rep.leader_epoch,
                                          rep.log.epochs.latest_epoch) for rep in asking))
        response = await self._request(reader, writer, request, 10)
        for result in response.results:
            rep = self.partitions.get((result.topic, result.partition))
            if rep is None or rep not in asking:
                continue
            if result.error:
                self._refused(rep, result.error, result.message)
                continue
            lg = rep.log
            if result.epoch < 0:
                to = min(result.end_offset, lg.end_offset)
            else:
                _mine, my_end = lg.epochs.end_offset_for(result.epoch, lg.end_offset)
                to = min(result.end_offset, my_end)
            if to < lg.end_offset:
                self._cut(rep, to, f"the leader's epoch {result.epoch} ends at "
                                   f"{result.end_offset}")
            rep.needs_truncation = False

    def _cut(self, rep, offset: int, why: str) -> None:
        lg = rep.log
        if offset < lg.earliest_offset:
            log.warning("replication: %s: starting again empty at %d (%s)", rep.name, offset, why)
            lg.reset_to(offset)
        else:
            log.warning("replication: %s: truncating from %d to %d (%d bytes; %s)", rep.name,
                        lg.end_offset, offset, lg.end_offset - offset, why,
                        extra={"event": "truncated"})
            lg.truncate_to(offset)
        self.manager.metrics.truncations += 1

    def _refused(self, rep, error: int, message: str) -> None:
        if error in (ErrorCode.NOT_LEADER_FOR_PARTITION, ErrorCode.FENCED_LEADER_EPOCH,
                     ErrorCode.UNKNOWN_LEADER_EPOCH):
            # one of us is behind ZooKeeper's view: the watch brings the news
            log.info("replication: %s: broker %d answered %s (%s); waiting for the state to "
                     "settle", rep.name, self.leader, ErrorCode(error).name, message)
        else:
            log.warning("replication: %s: broker %d answered %s: %s", rep.name, self.leader,
                        ErrorCode(error).name if error in ErrorCode._value2member_map_ else error,
                        message)

    # ------------------------------------------------------------ 2. fetch

    async def _fetch(self, reader, writer) -> None:
        reps = [rep for rep in self.partitions.values() if not rep.needs_truncation]
        if not reps:
            await asyncio.sleep(0.05)
            return
        config = self.manager.config
        asked = {(rep.topic, rep.partition): (rep, rep.leader_epoch, rep.log.end_offset)
                 for rep in reps}
        request = api.ReplicaFetchRequest(
            self.manager.broker_id, config.replica_fetch_wait_ms, 1,
            tuple(api.ReplicaFetchEntry(rep.topic, rep.partition, rep.leader_epoch,
                                        rep.log.end_offset, self._max_bytes) for rep in reps))
        response = await self._request(reader, writer, request,
                                       config.replica_fetch_wait_ms / 1000 + 10)
        refused = False
        for result in response.results:
            rep, epoch, offset = asked.get((result.topic, result.partition), (None, 0, 0))
            if rep is None or self.partitions.get((rep.topic, rep.partition)) is not rep \
                    or rep.leader_epoch != epoch or rep.log.end_offset != offset:
                continue                       # moved on meanwhile
            if result.error:
                refused = True
                self._fetch_failed(rep, result)
            else:
                self._append(rep, result)
        if refused:
            await asyncio.sleep(0.1)

    def _fetch_failed(self, rep, result) -> None:
        lg = rep.log
        if result.error == ErrorCode.OFFSET_OUT_OF_RANGE:
            if lg.end_offset < result.earliest:
                self._cut(rep, result.earliest, f"the leader's log starts at {result.earliest}")
            else:
                rep.needs_truncation = True    # the leader has less than we do: agree again
            return
        self._refused(rep, result.error, result.message)

    def _append(self, rep, result) -> None:
        lg = rep.log
        data = result.message_set
        valid, count, first_ts, max_ts = scan_valid_prefix(data) if len(data) else (0, 0, -1, -1)
        if valid:
            start = lg.end_offset
            for epoch, epoch_start in result.epochs:
                if epoch > lg.epochs.latest_epoch and epoch_start < start + valid:
                    lg.epochs.assign(epoch, max(epoch_start, start))
            try:
                self.manager.produce_path.append_replica(lg, data[:valid], count, first_ts,
                                                         max_ts)
            except StorageError as exc:
                log.error("replication: %s: cannot append what the leader sent: %s", rep.name,
                          exc)
                return
            self.manager.metrics.replication_bytes_in += valid
        elif len(data) and len(data) >= self._max_bytes:
            log.error("replication: %s: no whole message in %d bytes at %d", rep.name, len(data),
                      lg.end_offset)
        hw = min(result.high_watermark, lg.end_offset)
        if hw > lg.high_watermark:
            lg.set_high_watermark(hw)
