"""A broker's registration in ZooKeeper (the paper's broker registry).

The broker makes, in its cluster's chroot::

    /brokers/ids/<id>                  ephemeral "host:port"
    /brokers/topics/<topic>/<id>       ephemeral "<partition count>", one per topic
    /brokers/racks/<id>                ephemeral "<rack>", when the broker declares one
    /brokers/tls/<id>                  ephemeral "host:port" of its TLS listener, when it has one

States of the registration (kazoo's session states drive them)::

    STARTING --connected--> REGISTERED --SUSPENDED--> SUSPENDED --CONNECTED--> REGISTERED
        ^                         |                        |
        |                         +---------LOST-----------+--> LOST --CONNECTED--> REGISTERED
        +-- ZooKeeper unreachable at start: keep retrying in the background, log each failure

SUSPENDED keeps the nodes (the session may survive); LOST means ZooKeeper
deleted them with the session, so the next CONNECTED re-creates them all.
The broker keeps serving produce and fetch in every state: ZooKeeper is only
for discovery and coordination.

Every change of the wanted state (topics created or deleted) and every
(re)connection wakes one worker thread that *reconciles* ZooKeeper to the
wanted state; kazoo's listener only sets an event (listeners must not block).

The registration's creation (its node's czxid, ``registration``) names this
run of the broker: replication trusts a partition state naming this broker
only if the state was written after it (docs/replication.md), so a broker
that restarted, or whose session expired, does not act on what ZooKeeper
said of its previous run. ``on_registration`` callbacks hear of each change
(None when the session is lost).

The hard race: after a broker restart, the previous process's ephemeral
node may survive until its session times out. Creating ours then fails with
NodeExists although the node is stale; we do not delete a node of another
session (it might be a live broker misconfigured with our id): we log it
and retry until that session is gone.
"""
from __future__ import annotations

import logging
import threading

from kazoo.client import KazooState
from kazoo.exceptions import KazooException, NodeExistsError, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError

from . import paths
from .zk import make_client, start_in_background
from .zk_tls import ZooKeeperTls
from .zk_acls import Identity

log = logging.getLogger(__name__)


class BrokerRegistry:
    """Thread-safe: ``set_topics`` may be called from any thread."""

    def __init__(self, connect: str, broker_id: int, host: str, port: int,
                 session_timeout_ms: int = 6000, rack: str = "",
                 identity: Identity | None = None, tls_port: int | None = None,
                 zookeeper_tls: ZooKeeperTls | None = None) -> None:
        """``identity``: the cluster's ZooKeeper identity (zk_acls.py), for
        the broker's one client (registration, replication, controller);
        ``tls_port``: its TLS listener's, registered for TLS clients;
        ``zookeeper_tls``: how that client reaches ZooKeeper over TLS."""
        self.connect = connect
        self.broker_id = broker_id
        self.address = f"{host}:{port}"
        self.tls_address = f"{host}:{tls_port}" if tls_port is not None else None
        self.rack = rack
        # called (on a thread of kazoo's) once the client first connects:
        # the replication layer's watches and the controller start there
        self.on_connected: list = []
        self.registration: int | None = None     # czxid of our /brokers/ids node
        self.on_registration: list = []          # called with it (or None) on a change
        self.client = make_client(connect, session_timeout_ms, identity, zookeeper_tls)
        self.state = "STARTING"
        self.registered = threading.Event()     # set while our nodes are known to exist
        self._lock = threading.Lock()
        self._wanted_topics: dict[str, int] = {}
        self._dirty = threading.Event()
        self._stop = threading.Event()
        self._worker: threading.Thread | None = None

    # ------------------------------------------------------------ life cycle

    def start(self) -> None:
        """Connect in the background (the broker does not wait for ZooKeeper)."""
        self._worker = threading.Thread(target=self._reconcile_loop,
                                        name=f"zk-registry-{self.broker_id}", daemon=True)
        start_in_background(self.client, self.connect, f"broker {self.broker_id} registry",
                            self._on_started, self._stop)

    def _on_started(self) -> None:
        self.client.add_listener(self._on_state)
        self._worker.start()
        self._dirty.set()
        for callback in self.on_connected:
            try:
                callback(self.client)
            except Exception:   # noqa: BLE001 - it must not stop the registration
                log.exception("broker %d: a ZooKeeper start-up step failed", self.broker_id)

    def _on_state(self, state: str) -> None:
        # kazoo's thread: never block here
        if state == KazooState.SUSPENDED:
            self.state = "SUSPENDED"
            log.warning("broker %d: ZooKeeper connection suspended; still serving",
                        self.broker_id)
        elif state == KazooState.LOST:
            self.state = "LOST"
            self.registered.clear()
            self._set_registration(None)
            log.warning("broker %d: ZooKeeper session lost; will re-register",
                        self.broker_id)
        else:
            self._dirty.set()

    def set_topics(self, topics: dict[str, int]) -> None:
        """The topics this broker holds, with their partition counts."""
        with self._lock:
            self._wanted_topics = dict(topics)
        self._dirty.set()

    def close(self) -> None:
        """Remove our nodes now (a clean shutdown: consumers rebalance at once
        instead of waiting for the session to time out) and disconnect."""
        self._stop.set()
        self._dirty.set()
        if self._worker is not None and self._worker.is_alive():
            self._worker.join(timeout=10)
        try:
            if self.client.connected:
                for topic in list(self._wanted_topics):
                    self._delete_if_ours(paths.broker_topic_path(topic, self.broker_id))
                if self.rack:
                    self._delete_if_ours(paths.broker_rack_path(self.broker_id))
                self._delete_if_ours(paths.broker_id_path(self.broker_id))
        except (KazooException, KazooTimeoutError) as exc:
            log.warning("broker %d: could not remove its ZooKeeper nodes: %s",
                        self.broker_id, exc)
        finally:
            self.client.stop()
            self.client.close()

    # ------------------------------------------------------------ reconciling

    def _reconcile_loop(self) -> None:
        while not self._stop.is_set():
            self._dirty.wait()
            if self._stop.is_set():
                return
            self._dirty.clear()
            try:
                if self._reconcile():
                    continue
            except (KazooException, KazooTimeoutError) as exc:
                log.warning("broker %d: ZooKeeper registration failed (%s); retrying",
                            self.broker_id, exc)
            self._stop.wait(0.5)      # not done: try again shortly
            self._dirty.set()

    def _reconcile(self) -> bool:
        """Make ZooKeeper match the wanted state; False if it must be retried."""
        if not self.client.connected:
            return False
        zk = self.client
        session = zk.client_id[0] if zk.client_id else None
        zk.ensure_path(paths.BROKER_IDS)
        zk.ensure_path(paths.BROKER_TOPICS)
        if self.rack:
            # before the id: whoever sees the broker sees its rack
            zk.ensure_path(paths.BROKER_RACKS)
            if not self._ensure_ephemeral(paths.broker_rack_path(self.broker_id),
                                          self.rack.encode(), session):
                return False
        if self.tls_address:
            # before the id too: a TLS client that sees the broker finds its listener
            zk.ensure_path(paths.BROKER_TLS)
            if not self._ensure_ephemeral(paths.broker_tls_path(self.broker_id),
                                          self.tls_address.encode(), session):
                return False
        if not self._ensure_ephemeral(paths.broker_id_path(self.broker_id),
                                      self.address.encode(), session):
            return False
        _data, stat = zk.get(paths.broker_id_path(self.broker_id))
        if stat.ephemeralOwner == session:
            self._set_registration(stat.czxid)
        with self._lock:
            wanted = dict(self._wanted_topics)
        ok = True
        for topic, count in wanted.items():
            zk.ensure_path(paths.broker_topic_path(topic))
            ok &= self._ensure_ephemeral(paths.broker_topic_path(topic, self.broker_id),
                                         str(count).encode(), session)
        for topic in zk.get_children(paths.BROKER_TOPICS):
            if topic not in wanted:
                self._delete_if_ours(paths.broker_topic_path(topic, self.broker_id))
        if ok and not self.registered.is_set():
            self.state = "REGISTERED"
            self.registered.set()
            log.info("broker %d registered in ZooKeeper at %s (%d topics)", self.broker_id,
                     self.connect, len(wanted))
        return ok

    def _set_registration(self, czxid: int | None) -> None:
        if czxid == self.registration:
            return
        self.registration = czxid
        for callback in self.on_registration:
            try:
                callback(czxid)
            except Exception:   # noqa: BLE001 - it must not stop the registration
                log.exception("broker %d: a registration callback failed", self.broker_id)

    def _ensure_ephemeral(self, path: str, data: bytes, session) -> bool:
        zk = self.client
        try:
            current, stat = zk.get(path)
        except NoNodeError:
            try:
                zk.create(path, data, ephemeral=True)
                return True
            except NodeExistsError:
                return False         # raced with someone: look again next round
        if stat.ephemeralOwner != session:
            log.warning("broker %d: %s is held by another ZooKeeper session (a previous run "
                        "of this broker whose session has not expired yet, or another broker "
                        "with the same id); waiting", self.broker_id, path)
            return False
        if current != data:
            zk.set(path, data)
        return True

    def _delete_if_ours(self, path: str) -> None:
        # bounded waits: kazoo would wait for ever if the connection dropped now
        zk = self.client
        try:
            _data, stat = zk.get_async(path).get(timeout=5)
        except NoNodeError:
            return
        if zk.client_id and stat.ephemeralOwner == zk.client_id[0]:
            try:
                zk.delete_async(path).get(timeout=5)
            except NoNodeError:
                pass


def read_broker_address(client, broker_id: int, tls: bool = False) -> tuple[str, int]:
    """(host, port) of a registered broker's plaintext listener, or with
    ``tls`` of its TLS listener; NoNodeError when it has none (or is gone),
    ValueError when the record is not host:port."""
    path = paths.broker_tls_path(broker_id) if tls else paths.broker_id_path(broker_id)
    data, _ = client.get(path)
    host, _, port = data.decode().rpartition(":")
    if not host:
        raise ValueError(f"{path}: {data[:64]!r} is not host:port")
    return host, int(port)
