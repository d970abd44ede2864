"""Connecting to ZooKeeper: connect strings with a chroot, and a kazoo client
that keeps retrying (with a clear log line) while the ensemble is unreachable,
over TLS to ZooKeeper's secure client port where the settings say so."""
from __future__ import annotations

import atexit
import logging
import threading
import weakref

from kazoo.client import KazooClient
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.retry import KazooRetry

from .zk_acls import Identity
from .zk_tls import ZooKeeperTls
from .zk_tls_handler import TlsHandler

log = logging.getLogger(__name__)


class ZooKeeperUnavailable(ConnectionError):
    """ZooKeeper could not be reached within the time allowed."""


def split_connect_string(connect: str) -> tuple[str, str]:
    """'h1:2181,h2:2181/cluster-a' -> ('h1:2181,h2:2181', '/cluster-a')."""
    connect = connect.strip()
    hosts, sep, chroot = connect.partition("/")
    if not hosts:
        raise ValueError(f"bad ZooKeeper connect string {connect!r}: no hosts")
    for host in hosts.split(","):
        name, colon, port = host.rpartition(":")
        if not colon or not name or not port.isdigit():
            raise ValueError(f"bad ZooKeeper connect string {connect!r}: "
                             f"{host!r} is not host:port")
    return hosts, ("/" + chroot.strip("/")) if sep and chroot.strip("/") else ""


def _tls_options_of(client: KazooClient) -> dict:
    """The TLS options ``client`` was made with, for another client of the
    same ensemble (kazoo keeps them as public attributes)."""
    if not client.use_ssl:
        return {}
    if isinstance(client.handler, TlsHandler):
        return client.handler.tls.kazoo_options()
    return {"use_ssl": True, "ca": client.ca, "certfile": client.certfile,
            "keyfile": client.keyfile, "verify_certs": client.verify_certs,
            "check_hostname": client.check_hostname}


def make_client(connect: str, session_timeout_ms: int = 6000,
                identity: Identity | None = None,
                tls: ZooKeeperTls | None = None) -> KazooClient:
    """A kazoo client for ``connect`` (chroot included), not started: start
    it with ``start_client``, which creates the chroot if missing. With an
    ``identity`` (zk_acls.py) it authenticates as it and creates nodes with
    the ACLs of zk_acls's policy: its own by default (``acl_for`` for the
    paths the policy treats apart). With ``tls`` (enabled) it connects over
    TLS, checking the server's certificate."""
    hosts, chroot = split_connect_string(connect)
    identity = identity or Identity()
    return KazooClient(hosts=hosts + chroot, timeout=session_timeout_ms / 1000,
                       auth_data=identity.auth_data(), default_acl=identity.default_acl(),
                       connection_retry=KazooRetry(max_tries=-1, delay=0.1, max_delay=2),
                       command_retry=KazooRetry(max_tries=3, delay=0.05, max_delay=1),
                       **(tls or ZooKeeperTls()).kazoo_options())


def start_client(client: KazooClient, connect: str, timeout: float = 15.0,
                 what: str = "client") -> None:
    """Start ``client``, waiting up to ``timeout`` s; ensure the chroot exists.
    Raises ZooKeeperUnavailable with the address on failure."""
    hosts, chroot = split_connect_string(connect)
    try:
        if chroot:
            # the chroot itself is made through a client without it, first
            root = KazooClient(hosts=hosts, timeout=timeout, **_tls_options_of(client))
            try:
                root.start(timeout=timeout)
                root.ensure_path(chroot)
            finally:
                root.stop()
                root.close()
        client.start(timeout=timeout)
    except KazooTimeoutError:
        client.stop()
        raise ZooKeeperUnavailable(f"{what}: cannot reach ZooKeeper at {connect} within "
                                   f"{timeout:.0f}s") from None
    stop_at_exit(client)


def stop_at_exit(client: KazooClient) -> None:
    """Stop ``client`` when the interpreter exits, if its owner did not.

    kazoo joins its worker threads at exit (an atexit hook each client's
    handler registers when it starts); a watch callback waiting for an
    answer while ZooKeeper is unreachable never returns, since the
    connection retries for ever, and the process would hang at exit for
    ever. Stopping the client first fails that wait. So, called after
    ``client.start()``, this takes kazoo's hook of that client away and has
    this module's one hook stop the client instead (which stops its
    handler). Clients are held weakly: a closed and dropped client is not
    kept alive by this, and however many clients a process makes it holds
    one hook. (A client started again later gets kazoo's hook back: call
    this again then.)"""
    global _exit_hook_registered
    _clients_to_stop.add(client)
    atexit.unregister(client.handler.stop)
    if not _exit_hook_registered:
        atexit.register(_stop_clients)
        _exit_hook_registered = True


# the started clients stop_at_exit stops at exit (weakly held; process-wide
# as atexit itself is)
_clients_to_stop: "weakref.WeakSet[KazooClient]" = weakref.WeakSet()
_exit_hook_registered = False


def _stop_clients() -> None:
    for client in list(_clients_to_stop):
        try:          # (stopping a stopped client does nothing)
            client.stop()
        except Exception:   # noqa: BLE001 - exiting: nothing more to do about it
            pass


def start_in_background(client: KazooClient, connect: str, what: str,
                        on_started, stop_event: threading.Event,
                        first_timeout: float = 5.0) -> threading.Thread:
    """On a thread of its own, keep trying to start ``client`` until it
    connects or ``stop_event`` is set, logging each failed attempt (the
    attempt's timeout doubles from ``first_timeout`` up to 30 s); then call
    ``on_started()``. For a broker, which must serve even while ZooKeeper is
    down."""
    def run() -> None:
        delay = first_timeout
        while not stop_event.is_set():
            try:
                start_client(client, connect, timeout=delay, what=what)
            except ZooKeeperUnavailable as exc:
                log.error("%s; retrying", exc)
                delay = min(delay * 2, 30.0)
                continue
            except Exception as exc:   # noqa: BLE001 - keep trying whatever it was
                log.error("%s: ZooKeeper start failed: %s; retrying", what, exc)
                stop_event.wait(1.0)
                continue
            on_started()
            return
    thread = threading.Thread(target=run, name=f"zk-start-{what}", daemon=True)
    thread.start()
    return thread
