"""A follower joining the in-sync set holds the high watermark back from the
moment the leader sends the set's write to ZooKeeper, not from when it
hears the answer (Kafka's "maximal ISR"); and the leader never writes back
in sync a follower that the assignment dropped meanwhile.

The defect: the leader counted the joining follower only once its write's
answer came back. In between, ZooKeeper already named the follower in sync
(the controller may elect it) while the leader acknowledged acks=all
writes the follower did not have: under load, a reassignment elected the
new replica and 13 acknowledged messages were truncated away
(test_reassign.py's drain, on a busy machine).

Here the window is held open on purpose: the leader reaches ZooKeeper
through a gate that holds what it sends (ZooKeeper's answers pass), so its
expansion write waits in the gate while the follower is paused. A write
produced then must not be acknowledged (the defect acknowledged it at
once: the leader counted itself alone); the gate opens (ZooKeeper now
names the follower in sync), the leader is killed -9, the follower
resumes and leads: every acknowledged message is there.
"""
from __future__ import annotations

import os
import signal
import socket
import threading

from broker.client.producer import Producer
from broker.coordination import paths
from broker.coordination.replica_state import TopicAssignment
from broker_helpers import log_text, wait_until
from cluster_helpers import REPLICATED, partition_state
from test_failover_history import partition_values

from replication_helpers import create_replicated, wait_in_sync, wait_serving


class ZooKeeperGate:
    """A TCP forwarder from brokers to ZooKeeper. ``hold()`` keeps what the
    brokers send from then on (ZooKeeper's answers still pass) until
    ``release()``, which sends it on in order; ``held`` is every byte kept."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.held = bytearray()
        self._holding = False
        self._pending: list[tuple[socket.socket, bytes]] = []
        self._lock = threading.Condition()
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def hold(self) -> None:
        with self._lock:
            self._holding = True
            self.held.clear()

    def release(self) -> None:
        with self._lock:
            for destination, data in self._pending:
                try:
                    destination.sendall(data)
                except OSError:         # that connection closed meanwhile
                    pass
            self._pending.clear()
            self._holding = False

    def wait_held(self, marker: bytes, timeout: float) -> bool:
        """Wait until the held bytes contain ``marker``."""
        with self._lock:
            return self._lock.wait_for(lambda: marker in self.held, timeout)

    def close(self) -> None:
        self.release()
        for s in [self.listener, *self._sockets]:
            s.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.upstream)
            self._sockets += [client, server]
            threading.Thread(target=self._pump, args=(client, server, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, False), daemon=True).start()

    def _pump(self, source: socket.socket, destination: socket.socket, from_broker: bool) -> None:
        try:
            while data := source.recv(65536):
                with self._lock:
                    if from_broker and self._holding:
                        self.held += data
                        self._pending.append((destination, data))
                        self._lock.notify_all()
                    else:
                        destination.sendall(data)
        except OSError:
            pass
        finally:
            for s in (source, destination):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


def test_a_joining_follower_holds_the_high_watermark_back_while_its_write_is_unanswered(
        zookeeper, zk_chroot, clusters):
    gates = {b: ZooKeeperGate(("127.0.0.1", zookeeper.servers[0].client_port)) for b in (0, 1)}
    try:
        cluster = clusters("join", brokers=0)
        for broker_id, gate in gates.items():
            # each through a gate of its own; a session outlives the pauses
            # and the gate's hold
            cluster.add_broker(broker_id, {
                **REPLICATED, "zookeeper": f"127.0.0.1:{gate.port}{zk_chroot}-join",
                "zookeeper_session_timeout_ms": 10_000})
        create_replicated(cluster, "j", partitions=1, replication_factor=2)
        wait_in_sync(cluster, "j", 0, {0, 1})
        leader = wait_serving(cluster, "j", 0)
        follower = 1 - leader
        follower_proc = cluster.brokers[follower].proc
        gate = gates[leader]
        producer = Producer(bootstrap=cluster.brokers[leader].address, acks="all", linger_ms=0,
                            retries=0, request_timeout_ms=20_000)
        acknowledged: list[int] = []
        try:
            # the follower paused past replica_lag_time_max_ms: out of the set;
            # what the leader takes meanwhile is acknowledged by it alone
            follower_proc.send_signal(signal.SIGSTOP)
            wait_in_sync(cluster, "j", 0, {leader})
            for seq in range(10):
                producer.send("j", b"%d" % seq, partition=0).result(timeout=20)
                acknowledged.append(seq)

            # the follower resumes, catches up and the leader writes its return:
            # the gate keeps that write from ZooKeeper; the follower pauses again
            gate.hold()
            follower_proc.send_signal(signal.SIGCONT)
            state_path = paths.partition_state_path("j", 0).encode()
            assert gate.wait_held(state_path, 20), "the leader never wrote the follower back"
            follower_proc.send_signal(signal.SIGSTOP)
            during = producer.send("j", b"10", partition=0)
            # not acknowledged: the paused follower, joining, does not have it
            # (the defect acknowledged it at once, counting the leader alone)
            try:
                during.result(timeout=1.5)
                acknowledged.append(10)
            except TimeoutError:
                pass
        finally:
            gate.release()
        wait_in_sync(cluster, "j", 0, {0, 1})       # ZooKeeper names the follower in sync

        # the leader dies; the follower, in sync by ZooKeeper, takes over
        cluster.brokers[leader].kill()
        follower_proc.send_signal(signal.SIGCONT)
        wait_until(lambda: (partition_state(cluster, "j", 0) or None) and
                   partition_state(cluster, "j", 0).leader == follower, 30,
                   what="the follower to lead")
        del cluster.brokers[leader]
        read = partition_values(cluster, "j", 0)
        assert acknowledged == list(range(10)), \
            "acknowledged with acks=all while the joining follower did not have it"
        missing = [seq for seq in acknowledged if seq not in read]
        assert not missing, f"acknowledged and lost: {missing} (read {read})"
        producer.close(timeout=1)
    finally:
        for gate in gates.values():
            gate.close()


def test_a_leader_never_writes_back_in_sync_a_follower_the_assignment_dropped(
        zookeeper, zk_chroot, clusters):
    """The defect (CI of eb3228c, test_reassign's controller restart): the
    leader read the controller's last step of a reassignment (the in-sync set
    without the replica moved away) before the new assignment, and took the
    moved replica back in on its next fetch: ZooKeeper named in sync a broker
    that was no replica. Here the leader's expansion is held in a gate while
    the assignment drops the follower; once sent, it must be refused."""
    gate = ZooKeeperGate(("127.0.0.1", zookeeper.servers[0].client_port))
    try:
        cluster = clusters("dropped", brokers=0)
        for broker_id in (0, 1):
            cluster.add_broker(broker_id, {
                **REPLICATED, "zookeeper": f"127.0.0.1:{gate.port}{zk_chroot}-dropped",
                "zookeeper_session_timeout_ms": 10_000})
        create_replicated(cluster, "d", partitions=1, replication_factor=2)
        wait_in_sync(cluster, "d", 0, {0, 1})
        leader = wait_serving(cluster, "d", 0)
        follower = 1 - leader
        follower_proc = cluster.brokers[follower].proc
        state_path = paths.partition_state_path("d", 0)
        topic_path = paths.replicated_topic_path("d")
        # out of the set (paused past replica_lag_time_max_ms) ...
        follower_proc.send_signal(signal.SIGSTOP)
        wait_in_sync(cluster, "d", 0, {leader})
        log_start = os.path.getsize(cluster.brokers[leader].log_path)
        try:
            # ... back: the leader's expansion waits in the gate (both brokers
            # reach ZooKeeper through it, so neither hears of the new
            # assignment before the write goes)
            gate.hold()
            follower_proc.send_signal(signal.SIGCONT)
            assert gate.wait_held(state_path.encode(), 20), \
                "the leader never wrote the follower back"
            _, before = cluster.zk.get(state_path)
            data, stat = cluster.zk.get(topic_path)
            dropped = TopicAssignment.from_json(data).with_replicas(0, (leader,))
            cluster.zk.set(topic_path, dropped.to_json(), version=stat.version)
        finally:
            gate.release()

        def settled() -> bool:
            return "in-sync expand to" in log_text(cluster.brokers[leader].log_path,
                                                   log_start) or \
                cluster.zk.get(state_path)[1].version != before.version
        wait_until(settled, 20, what="the leader's expansion to be answered")
        data, after = cluster.zk.get(state_path)
        assert after.version == before.version, \
            f"the expansion was written after the assignment dropped broker {follower}: " \
            f"{data.decode()} (version {before.version} -> {after.version})"
        assert "refused: the assignment changed meanwhile" in \
            log_text(cluster.brokers[leader].log_path, log_start)
        assert partition_state(cluster, "d", 0).isr == (leader,)
    finally:
        gate.close()
