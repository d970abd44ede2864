"""Faults for kazoo clients under test: drop a connection, expire a session.

What coordination code must survive, made to happen on demand against a real
server (as kazoo's own test harness does):

* ``drop_connection(client)``: the TCP connection breaks; the client goes
  SUSPENDED and reconnects with the *same* session (ephemeral nodes stay,
  watches fire again).
* ``expire_session(client)``: the server ends the session; the client goes
  LOST (its ephemeral nodes are gone), then connects with a *new* session.

Both wait on the client's state events with a deadline, never on a sleep,
and raise ``FaultTimeout`` if the client does not get there in time. They
are for tests only: they use kazoo internals (``client._call`` with the
connection-drop sentinel), and must never be imported by broker code.
"""
from __future__ import annotations

import threading

from kazoo.client import KazooClient
from kazoo.protocol.connection import _CONNECTION_DROP
from kazoo.protocol.states import KazooState


class FaultTimeout(AssertionError):
    """The client did not reach the expected state in time."""


class _StateWatch:
    """Records the client's state changes from now on, and lets a thread wait
    for a state to be reached after another one. The listener runs on kazoo's
    connection thread, so it only appends and notifies."""

    def __init__(self, client: KazooClient) -> None:
        self.client = client
        self.states: list[KazooState] = []
        self._changed = threading.Condition()
        client.add_listener(self._listen)

    def _listen(self, state: KazooState) -> None:
        with self._changed:
            self.states.append(state)
            self._changed.notify_all()

    def mark(self) -> int:
        """A position in the states seen, for wait_for(since=...)."""
        with self._changed:
            return len(self.states)

    def wait_for(self, *wanted: KazooState, after: KazooState | None = None,
                 since: int = 0, timeout: float = 15.0) -> KazooState | None:
        """Wait until one of ``wanted`` is seen (after position ``since`` and
        after ``after``, if given); return it, or None on timeout."""
        def reached() -> KazooState | None:
            states = self.states[since:]
            if after is not None:
                if after not in states:
                    return None
                states = states[states.index(after) + 1:]
            return next((state for state in states if state in wanted), None)
        with self._changed:
            return self._changed.wait_for(reached, timeout)

    def close(self) -> None:
        self.client.remove_listener(self._listen)


def _require_connected(client: KazooClient) -> None:
    if client.state != KazooState.CONNECTED:
        raise RuntimeError(f"the client must be CONNECTED, not {client.state}")


def _hosts(client: KazooClient) -> str:
    # without the client's chroot: the session is the server's, not the path's
    return ",".join(f"{host}:{port}" for host, port in client.hosts)


def drop_connection(client: KazooClient, timeout: float = 15.0) -> list[KazooState]:
    """Break ``client``'s TCP connection; return once it is SUSPENDED and then
    CONNECTED again (the same session, unless the server expired it
    meanwhile). Returns the states seen."""
    _require_connected(client)
    watch = _StateWatch(client)
    try:
        # the connection thread raises ConnectionDropped on this request, closes
        # the socket and reconnects, exactly as after a network failure
        client._call(_CONNECTION_DROP, None)
        if not watch.wait_for(KazooState.SUSPENDED, timeout=timeout):
            raise FaultTimeout(f"the client did not go SUSPENDED in {timeout} s "
                               f"(states seen: {watch.states})")
        if not watch.wait_for(KazooState.CONNECTED, after=KazooState.SUSPENDED,
                              timeout=timeout):
            raise FaultTimeout(f"the client did not reconnect in {timeout} s "
                               f"(states seen: {watch.states})")
        return list(watch.states)
    finally:
        watch.close()


def expire_session(client: KazooClient, timeout: float = 15.0, attempts: int = 5,
                   wait_reconnect: bool = True) -> list[KazooState]:
    """Make the server expire ``client``'s session; return once the client saw
    LOST (and, with ``wait_reconnect``, CONNECTED again on a new session).
    Returns the states seen.

    A second client connects with the same session id and password, which
    makes the server drop the first client's connection, then closes the
    session. If the first client reconnects before the close (it took the
    session back and the close went nowhere), try again.
    """
    _require_connected(client)
    session_id, password = client.client_id
    watch = _StateWatch(client)
    try:
        for _ in range(attempts):
            start = watch.mark()
            twin = KazooClient(hosts=_hosts(client), client_id=(session_id, password),
                               timeout=client._session_timeout / 1000.0)
            try:
                twin.start(timeout=timeout)
                twin.stop()       # sends closeSession: the server ends the session
            finally:
                twin.close()
            # The first client learns of it when it reconnects (SESSION_EXPIRED,
            # so LOST); if it got back in before the close, the session is its
            # own again (CONNECTED after SUSPENDED) and the close went nowhere.
            seen = watch.wait_for(KazooState.LOST, KazooState.CONNECTED,
                                  after=KazooState.SUSPENDED, since=start, timeout=timeout)
            if seen == KazooState.LOST:
                break
        else:
            raise FaultTimeout(f"the session did not expire after {attempts} attempts "
                               f"(states seen: {watch.states})")
        if wait_reconnect and not watch.wait_for(KazooState.CONNECTED, after=KazooState.LOST,
                                                 timeout=timeout):
            raise FaultTimeout(f"the client did not connect again after LOST in {timeout} s "
                               f"(states seen: {watch.states})")
        return list(watch.states)
    finally:
        watch.close()
