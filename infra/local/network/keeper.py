"""The network lab's keeper: one process that makes the router's namespace
(its own), every host's namespace and the cables between them (fabric.py),
then runs the delayer (delayer.py) and answers the control socket until
SIGTERM. Its death takes the lab's network with it: the hosts' namespace
holders are killed with it (pdeathsig), and each namespace goes once the
services run in it have stopped.

    python -m infra.local.network.keeper --state-dir DIR

reads ``DIR/topology.toml`` and keeps in ``DIR/network/``:

    hosts.json     the keeper's pid and, per host: its namespace holder's
                   pid, address, datacenter and role (written once built)
    control.sock   the control socket: one JSON request per connection,
                   one JSON answer (control.py sends them); a request is at
                   most 64 KiB and must arrive whole within 5 s of
                   connecting, else it is answered an error (ControlServer)

Control requests (``{"op": ...}``), each answered ``{"ok": true, ...}`` or
``{"ok": false, "error": "..."}``:

    status                          links (shape, counters), blocks, hosts
    shape   from, to, [both], rtt_ms/jitter_ms/loss/rate_mbit (any of them)
    cut     from, to, [both]        every packet of the link dropped
    heal    [from, to]              the link (every link) carries again,
                                    every host's blocks lifted when none named
    reset                           every link back to the topology's shape,
                                    uncut; every block lifted
    isolate datacenter              cut every link to and from it
    block   host, peers: [host...]  drop all between the host and the peers
                                    (a broker cut from ZooKeeper only)
    unblock host
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import socket
import sys
from functools import partial

from infra.local.network import fabric
from infra.local.network.control import (MAX_REQUEST_BYTES, LineReader, LineTooLongError,
                                          decode, encode)
from infra.local.network.delayer import Delayer
from infra.local.network.plan import NetworkPlan, plan_network
from infra.topology import load_topology

log = logging.getLogger("infra.local.network.keeper")

SHAPE_KEYS = ("rtt_ms", "jitter_ms", "loss", "rate_mbit")
#: seconds a control connection has to send its whole request and take its
#: answer (a local client does both at once)
CONTROL_DEADLINE = 5.0
#: control connections open at once; more are closed unanswered
MAX_CONNECTIONS = 32


class ControlError(Exception):
    pass


class Network:
    """The built lab network and the operations on it."""

    def __init__(self, plan: NetworkPlan, delayer: Delayer, holders: dict[str, int]) -> None:
        self.plan = plan
        self.delayer = delayer
        self.holders = holders
        self.blocks: dict[str, list[str]] = {}

    def _pairs(self, request: dict) -> list[tuple[str, str]]:
        a, b = request.get("from"), request.get("to")
        if not a or not b:
            raise ControlError("name the link: from and to (datacenters)")
        for name in (a, b):
            try:
                self.plan.datacenter(name)
            except KeyError as exc:
                raise ControlError(exc.args[0]) from None
        if a == b:
            raise ControlError("a link joins two different datacenters")
        return [(a, b), (b, a)] if request.get("both", True) else [(a, b)]

    def handle(self, request: dict) -> dict:
        op = request.get("op")
        if op == "status":
            return self.status()
        if op == "shape":
            changes = {k: request[k] for k in SHAPE_KEYS if k in request}
            if not changes:
                raise ControlError(f"shape needs one of {', '.join(SHAPE_KEYS)}")
            for pair in self._pairs(request):
                shaper = self.delayer.link(*pair)
                try:
                    shaper.reshape(shaper.shape.with_changes(**changes))
                except (ValueError, TypeError) as exc:
                    raise ControlError(str(exc)) from None
        elif op == "cut":
            for pair in self._pairs(request):
                shaper = self.delayer.link(*pair)
                shaper.reshape(shaper.shape.with_changes(cut=True))
        elif op == "heal":
            pairs = self._pairs(request) if request.get("from") else list(self.delayer.shapers)
            for pair in pairs:
                shaper = self.delayer.link(*pair)
                shaper.reshape(shaper.shape.with_changes(cut=False))
            if not request.get("from"):
                self._unblock_all()
        elif op == "reset":
            for pair, shaper in self.delayer.shapers.items():
                shaper.reshape(self.delayer.planned[pair])
            self._unblock_all()
        elif op == "isolate":
            name = request.get("datacenter", "")
            try:
                self.plan.datacenter(name)
            except KeyError as exc:
                raise ControlError(exc.args[0]) from None
            for (a, b), shaper in self.delayer.shapers.items():
                if name in (a, b):
                    shaper.reshape(shaper.shape.with_changes(cut=True))
        elif op == "block":
            host = self._host(request.get("host", ""))
            peers = [self._host(p).address for p in request.get("peers", [])]
            if not peers:
                raise ControlError("block needs peers: the hosts to cut it from")
            addresses = sorted({*self.blocks.get(host.name, []), *map(str, peers)})
            fabric.set_blocked_peers(self.holders[host.name], addresses)
            self.blocks[host.name] = addresses
        elif op == "unblock":
            host = self._host(request.get("host", ""))
            fabric.set_blocked_peers(self.holders[host.name], [])
            self.blocks.pop(host.name, None)
        else:
            raise ControlError(f"unknown op {op!r} (status, shape, cut, heal, reset, isolate, "
                               f"block, unblock)")
        return self.status()

    def _host(self, name: str):
        try:
            return self.plan.host(name)
        except KeyError as exc:
            raise ControlError(exc.args[0]) from None

    def _unblock_all(self) -> None:
        for name in list(self.blocks):
            fabric.set_blocked_peers(self.holders[name], [])
            del self.blocks[name]

    def status(self) -> dict:
        links = []
        for (a, b), shaper in self.delayer.shapers.items():
            shape = shaper.shape
            links.append({"from": a, "to": b, "cut": shape.cut, "rtt_ms": shape.rtt_ms,
                          "jitter_ms": shape.jitter_ms, "loss": shape.loss,
                          "rate_mbit": shape.rate_mbit, "describe": shape.describe(),
                          "counters": shaper.counters.as_dict()})
        return {"ok": True, "links": links, "blocks": dict(self.blocks),
                "queued": self.delayer.queued(), "stray": self.delayer.stray,
                "write_errors": self.delayer.write_errors}


def hosts_document(plan: NetworkPlan, holders: dict[str, int]) -> dict:
    return {"keeper": os.getpid(), "lab_id": plan.lab_id, "subnet": str(plan.subnet),
            "root_address": str(plan.root_address), "root_cable": plan.root_cable,
            "datacenters": {dc.name: {"subnet": str(dc.subnet), "gateway": str(dc.gateway)}
                            for dc in plan.datacenters},
            "hosts": {h.name: {"pid": holders[h.name], "address": str(h.address),
                               "datacenter": h.datacenter, "role": h.role}
                      for h in plan.hosts}}


class _Connection:
    """One control connection: reading its request while ``answer`` is None,
    then writing what is left of ``answer``; ``closed`` at the end."""

    __slots__ = ("sock", "fd", "reader", "answer", "closed")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.fd = sock.fileno()
        self.reader = LineReader(MAX_REQUEST_BYTES)
        self.answer: bytes | None = None
        self.closed = False


class ControlServer:
    """The control socket, served by the delayer's loop (delayer.py).

    Every packet of the lab waits while the loop runs a handler, so nothing
    here waits on a client: the sockets are non-blocking, a request is read
    into its connection's LineReader as it comes, and an answer that does not
    fit the socket's buffer is written as the client takes it. A connection:

        reading --its line (or end of stream)--> answered: writing --sent--> closed
        reading --over MAX_REQUEST_BYTES-------> writing an error --sent--> closed
        reading --CONTROL_DEADLINE after accept--> an error tried once, closed
        writing --CONTROL_DEADLINE after accept--> closed
        (any) --the peer gone (an OSError)-----> closed

    and a connection beyond MAX_CONNECTIONS open is closed at once. What an
    operation itself takes (``block`` runs iptables-restore) still holds
    the loop: requests are the lab's own commands, one at a time.

    Not thread-safe: the delayer's loop thread only.
    """

    def __init__(self, sock: socket.socket, network: Network, delayer: Delayer,
                 deadline: float = CONTROL_DEADLINE) -> None:
        self.sock = sock
        self.network = network
        self.delayer = delayer
        self.deadline = deadline
        self.connections: dict[int, _Connection] = {}
        sock.setblocking(False)
        delayer.watch(sock.fileno(), self._accept)

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self.sock.accept()
            except BlockingIOError:
                return
            except OSError as exc:           # out of file descriptors: the next wake-up
                log.warning("control socket: accept failed: %s", exc)
                return
            if len(self.connections) >= MAX_CONNECTIONS:
                log.warning("control socket: %d connections open already: one closed",
                            len(self.connections))
                sock.close()
                continue
            sock.setblocking(False)
            conn = _Connection(sock)
            self.connections[conn.fd] = conn
            self.delayer.watch(conn.fd, partial(self._readable, conn))
            self.delayer.call_at(self.delayer.clock() + self.deadline,
                                 partial(self._expire, conn))

    def _readable(self, conn: _Connection) -> None:
        try:
            line = None
            while line is None:
                line = conn.reader.feed(conn.sock.recv(65536))
        except BlockingIOError:
            return
        except LineTooLongError as exc:
            answer = {"ok": False, "error": f"the request is too long: {exc}"}
        except OSError as exc:
            log.warning("control connection failed: %s", exc)
            self._close(conn)
            return
        else:
            answer = self.respond(line)
        conn.answer = encode(answer)
        self._write(conn)

    def respond(self, line: bytes) -> dict:
        """The answer to one request's line."""
        try:
            return self.network.handle(decode(line))
        except (ValueError, ControlError) as exc:
            return {"ok": False, "error": str(exc)}
        except fabric.FabricError as exc:
            log.error("control request %s failed: %s", line[:200], exc)
            return {"ok": False, "error": str(exc)}
        except Exception as exc:    # noqa: BLE001 - a bad request must not end the lab
            log.exception("control request %s failed", line[:200])
            return {"ok": False, "error": f"the request failed: {exc!r}"}

    def _write(self, conn: _Connection) -> None:
        try:
            while conn.answer:
                conn.answer = conn.answer[conn.sock.send(conn.answer):]
        except BlockingIOError:
            self.delayer.watch(conn.fd, partial(self._write, conn), writable=True)
            return
        except OSError as exc:
            log.warning("control connection failed: %s", exc)
        self._close(conn)

    def _expire(self, conn: _Connection) -> None:
        if conn.closed:
            return
        if conn.answer is None:
            log.warning("a control connection sent no whole request in %.0f s (%d bytes): "
                        "closed", self.deadline, conn.reader.buffered)
            try:
                conn.sock.send(encode({"ok": False, "error": f"no whole request within "
                                                             f"{self.deadline:.0f} s"}))
            except OSError:
                pass
        else:
            log.warning("a control connection did not take its answer in %.0f s: closed",
                        self.deadline)
        self._close(conn)

    def _close(self, conn: _Connection) -> None:
        if conn.closed:
            return
        self.delayer.unwatch(conn.fd)
        del self.connections[conn.fd]
        conn.sock.close()
        conn.closed = True


def build(plan: NetworkPlan, offload: bool = True) -> tuple[int, dict[str, int], list]:
    """Everything of the fabric; returns the TUN's fd, the holders' pids and
    the processes to kill at the end."""
    overlaps = fabric.overlapping_routes(plan.subnet)
    if overlaps:
        raise fabric.FabricError(
            f"network.subnet {plan.subnet} overlaps routes of this machine ({'; '.join(overlaps)}): "
            f"another network lab runs, or a real network uses the range; set another "
            f"subnet (--set network.subnet=10.78.0.0/16)")
    anchor = fabric.spawn_sleeper(fabric.ANCHOR)        # stays in the root namespace
    processes = [anchor]
    fabric.unshare_network()
    fabric.build_router()
    tun = fabric.open_tun(offload=offload)
    fabric.ip_batch(None, fabric.router_commands(plan))
    spawned = {}
    for host in plan.hosts:
        spawned[host.name] = proc = fabric.spawn_sleeper(fabric.HOLDER)
        processes.append(proc)
    for host in plan.hosts:
        fabric.wait_in_own_namespace(spawned[host.name])
        fabric.attach_host(plan, host, spawned[host.name].pid)
    fabric.attach_management(plan, anchor.pid)
    return tun, {name: p.pid for name, p in spawned.items()}, processes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infra.local.network.keeper",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--state-dir", required=True)
    parser.add_argument("--seed", type=int, default=None,
                        help="seed of the links' loss and jitter (default: random)")
    parser.add_argument("--no-offload", action="store_true",
                        help="the router takes every MTU-sized packet (no TSO super-packets)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)-7s %(message)s")
    state_dir = os.path.abspath(args.state_dir)
    directory = os.path.join(state_dir, "network")
    os.makedirs(directory, exist_ok=True)
    hosts_path = os.path.join(directory, "hosts.json")
    sock_path = os.path.join(directory, "control.sock")
    for stale in (hosts_path, sock_path):
        if os.path.exists(stale):
            os.unlink(stale)
    plan = plan_network(load_topology(os.path.join(state_dir, "topology.toml")), state_dir)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    stopping = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda s, _f: stopping.append(s))
    processes = []
    try:
        tun, holders, processes = build(plan, offload=not args.no_offload)
        delayer = Delayer(plan, tun, seed=args.seed, offload=not args.no_offload)
        network = Network(plan, delayer, holders)
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(sock_path)
        server.listen(128)      # the connections beyond the cap are taken and closed
        ControlServer(server, network, delayer)

        def woken() -> None:
            os.read(wake_r, 64)
            if stopping:
                delayer.stop()
        delayer.watch(wake_r, woken)
        tmp = hosts_path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(hosts_document(plan, holders), f, indent=2)
        os.replace(tmp, hosts_path)
        log.info("network lab ready: %d datacenters, %d hosts, subnet %s; links: %s",
                 len(plan.datacenters), len(plan.hosts), plan.subnet,
                 "; ".join(f"{a}->{b} {s.describe()}" for a, b, s in plan.links) or "none shaped")
        if not stopping:
            delayer.run()
        log.info("stopping (signal %s)", stopping[0] if stopping else "?")
        return 0
    except fabric.FabricError as exc:
        log.error("%s", exc)
        return 1
    finally:
        for proc in processes:
            proc.kill()
        for proc in processes:
            proc.wait()
        for path in (hosts_path, sock_path):
            if os.path.exists(path):
                os.unlink(path)


if __name__ == "__main__":
    sys.exit(main())
