"""A process whose ZooKeeper went away exits when it is done, even if it
never closed its clients: kazoo joins its worker threads at exit, and a
watch callback waiting for an answer while ZooKeeper is unreachable waits
for ever (the connection retries for ever), so without the project's exit
hook (broker.coordination.zk.stop_at_exit) such a process never ends. The
suite met it: a failing test that left a group consumer open hung pytest
after its summary until CI's time ran out."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from broker_helpers import wait_until
from coordination_helpers import chroot_client

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# a watch callback that asks ZooKeeper something once the connection is
# lost; the main thread then ends without closing the client
CHILD = textwrap.dedent("""
    import sys, threading
    from kazoo.client import KazooState
    from kazoo.recipe.watchers import DataWatch
    from broker.coordination.zk import make_client, start_client

    connect = sys.argv[1]
    client = make_client(connect, session_timeout_ms=4000)
    start_client(client, connect)
    lost, asking = threading.Event(), threading.Event()
    client.add_listener(lambda state: lost.set() if state != KazooState.CONNECTED else None)

    def watch(data, _stat):
        if data == b"go":
            print("called", flush=True)
            lost.wait()
            asking.set()
            client.get("/w")         # waits: the connection retries for ever

    DataWatch(client, "/w", watch)
    print("ready", flush=True)
    asking.wait()
    print("exiting", flush=True)
""")


def test_a_process_exits_with_a_watch_waiting_on_a_lost_zookeeper(own_zookeeper):
    own_zookeeper.start()
    connect = own_zookeeper.connect_string("/exit")
    zk = chroot_client(connect)
    try:
        zk.create("/w", b"no")
        child = subprocess.Popen([sys.executable, "-c", CHILD, connect], cwd=ROOT,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert child.stdout.readline().strip() == "ready", child.stderr.read()
            zk.set("/w", b"go")
            assert child.stdout.readline().strip() == "called"
        except BaseException:
            child.kill()
            raise
    finally:
        zk.stop()
        zk.close()
    own_zookeeper.stop()
    try:
        assert child.stdout.readline().strip() == "exiting"
        # the main thread is done: the interpreter must end now, not wait
        # on the callback's question for ever
        wait_until(lambda: child.poll() is not None, 30, interval=0.1,
                   what="the process to exit (it hangs joining kazoo's threads)")
    finally:
        if child.poll() is None:
            child.kill()
        child.wait()
    assert child.returncode == 0, child.stderr.read()


def test_many_clients_hold_one_exit_hook(zookeeper):
    """stop_at_exit keeps one atexit entry however many clients a process
    makes (a long-lived process reconnecting for days must not grow); the
    exit hook kazoo registered for each of them is taken away (the one
    hook stops those clients first, whatever the order of registration)."""
    import atexit

    from broker.coordination.zk import make_client, start_client
    clients = []
    try:
        for _ in range(3):
            client = make_client(zookeeper.connect_string())
            start_client(client, zookeeper.connect_string())
            clients.append(client)
        hooks = atexit._ncallbacks()
        from broker.coordination.zk import stop_at_exit
        for _ in range(50):
            stop_at_exit(clients[0])
        assert atexit._ncallbacks() == hooks
    finally:
        for client in clients:
            client.stop()
            client.close()
