"""Free ports for servers that tests, the lab and the local environments start.

Every port handed out lies outside the kernel's ephemeral range
(``/proc/sys/net/ipv4/ip_local_port_range``): below it when there is room
(at least ``MIN_CHOICES`` choices from ``FIRST_PORT`` up), else above it.
In that range the kernel gives every outgoing connection its source port,
so between a check here and a server's bind a client (a kazoo client, a
quorum peer, a mirror) could take the port and the server would die with
"Address already in use"; outside it a port is only ever taken by a
deliberate bind.

Ports are picked at random (``random.SystemRandom``, never the test-seeded
global random), so that two runs at once rarely race for the same ones. A
port is free when a socket can bind it as the servers do (SO_REUSEADDR: a
port in TIME_WAIT is free, a listening one is not). Free means free now:
nothing is reserved once these functions return.
"""
from __future__ import annotations

import random
import socket
from typing import Callable, Iterable

#: The lowest port handed out (below: well-known and commonly configured ones).
FIRST_PORT = 10_000
#: The fewest choices a pool below the ephemeral range must offer to be used.
MIN_CHOICES = 1000
LAST_PORT = 65_535


class NoFreePorts(RuntimeError):
    """No free ports were found; the message says where they were looked for."""


def ephemeral_port_range() -> tuple[int, int]:
    """The kernel's ephemeral port range (low, high), both included; Linux's
    default when it cannot be read."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low, high = (int(part) for part in f.read().split())
        return low, high
    except (OSError, ValueError):
        return 32768, 60999


def base_ports(span: int = 1) -> range:
    """The ports ``base`` for which ``base .. base + span - 1`` all lie
    outside the ephemeral range: below it when that leaves at least
    MIN_CHOICES bases, else above it when that does. When the ephemeral
    range leaves room on neither side (a host that made it 1024-65535), the
    whole of FIRST_PORT..LAST_PORT: a bind may then race an outgoing
    connection, which is the host's choice."""
    low, high = ephemeral_port_range()
    below = range(FIRST_PORT, low - span + 1)
    if len(below) >= MIN_CHOICES:
        return below
    above = range(high + 1, LAST_PORT - span + 2)
    if len(above) >= MIN_CHOICES:
        return above
    return range(FIRST_PORT, LAST_PORT - span + 2)


def busy_among(ports: Iterable[tuple[int, str]], host: str = "127.0.0.1") -> list[tuple[int, str]]:
    """The (port, what) of ``ports`` that something holds on ``host`` now."""
    busy = []
    for port, what in ports:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((host, port))
            except OSError:
                busy.append((port, what))
    return busy


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` distinct ports free on ``host`` now, outside the ephemeral
    range (bound without SO_REUSEADDR: a port in TIME_WAIT is not taken)."""
    pool = base_ports()
    chooser = random.SystemRandom()
    sockets: list[socket.socket] = []
    try:
        for _ in range(50 * count):
            if len(sockets) == count:
                break
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                sock.bind((host, chooser.choice(pool)))   # held until all are found: distinct
            except OSError:
                sock.close()
                continue
            sockets.append(sock)
        if len(sockets) < count:
            raise NoFreePorts(f"found only {len(sockets)} of {count} free ports on {host} "
                              f"in {pool.start}-{pool.stop - 1}")
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def free_base_port(ports_at: Callable[[int], list[tuple[int, str]]], host: str = "127.0.0.1",
                   attempts: int = 200) -> int:
    """A base port ``b``, chosen at random, where every port of
    ``ports_at(b)`` (a layout: (port, what), each port at a fixed offset
    from ``b`` and none below it) is free on ``host`` now and outside the
    ephemeral range."""
    span = max(port for port, _ in ports_at(FIRST_PORT)) - FIRST_PORT + 1
    bases = base_ports(span)
    chooser = random.SystemRandom()
    for _ in range(attempts):
        base = chooser.choice(bases)
        if not busy_among(ports_at(base), host):
            return base
    raise NoFreePorts(f"found no base port in {bases.start}-{bases.stop - 1} with all "
                      f"{len(ports_at(FIRST_PORT))} ports of the layout free on {host} "
                      f"after {attempts} attempts")


__all__ = ["FIRST_PORT", "NoFreePorts", "base_ports", "busy_among", "ephemeral_port_range",
           "free_base_port", "free_ports"]
