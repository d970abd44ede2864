"""HAProxy in front of a datacenter's brokers: its configuration, rendered
from the topology, its syntax check, the command that runs it, and its stats.

Producers of a datacenter connect to the load balancer, never to a broker;
the paper's producers send to "any partition" of whichever broker they
reach, so a plain TCP proxy is enough. The rendered configuration:

* TCP mode; ``balance leastconn`` (a producer holds its connection for long,
  so count connections, not requests) or ``roundrobin``;
* a TCP health check of every broker every ``health_check_ms`` (500 ms):
  ``fall`` failures in a row mark it DOWN, ``rise`` successes UP again.
  ``on-marked-down shutdown-sessions`` cuts the connections still open to a
  broker marked DOWN, so its clients reconnect (to a live one) at once;
* ``retries`` connection attempts with ``option redispatch 1``: a connection
  refused by a dead broker that the check has not caught yet is retried on
  another one, so a client does not see it;
* client and server timeouts above the brokers' longest long-poll fetch;
* a stats socket (``show stat``, relative to HAProxy's working directory, so
  a long state directory never exceeds the 108-byte socket path limit) and,
  optionally, the HTTP stats page: read-only (no ``stats admin``); in a
  secured lab (``StatsSecurity``) on HTTPS alone, asking for a user (HTTP
  basic authentication). Its users' passwords are then in the rendered
  file, which the lab writes for its owner alone (0600).

It is run in the foreground (``haproxy -db -f cfg``), so the lab holds its
pid and stops it with a signal; this module never daemonises it and never
writes outside the directory it is given.
"""
from __future__ import annotations

import csv
import os
import shutil
import socket
import subprocess
from dataclasses import dataclass

from infra.topology import Topology

#: Where Debian's package puts it (not on a non-root PATH).
DEBIAN_HAPROXY = "/usr/sbin/haproxy"
#: The stats socket's file name, relative to HAProxy's working directory.
STATS_SOCKET = "haproxy.sock"


class HAProxyError(RuntimeError):
    """HAProxy is missing, refused its configuration, or did not answer."""


@dataclass(frozen=True)
class StatsSecurity:
    """The stats page on HTTPS with users: ``pem_file`` holds the
    certificate, its chain and its key (HAProxy's ``crt``); ``users`` are
    (name, password) pairs that may read the page."""
    pem_file: str
    users: tuple[tuple[str, str], ...]

    def __post_init__(self) -> None:
        if any(c.isspace() for c in self.pem_file):
            raise ValueError(f"HAProxy's crt path may hold no space: {self.pem_file!r}")
        if not self.users:
            raise ValueError("a secured stats page needs at least one user")
        for name, password in self.users:
            if not name or not password or any(c in name + password for c in ": \t#\"'\\"):
                raise ValueError(f"HAProxy stats user {name!r}: a name and password without "
                                 f"spaces, quotes, '#', '\\' or ':'")


def find_haproxy() -> str:
    """The haproxy executable, or HAProxyError saying what to install."""
    path = shutil.which("haproxy") or (DEBIAN_HAPROXY if os.access(DEBIAN_HAPROXY, os.X_OK)
                                       else None)
    if path is None:
        raise HAProxyError("haproxy was not found: install it (`apt-get install haproxy`, "
                           "which `make setup` does as root)")
    return path


def backend_name(cluster: str) -> str:
    return f"{cluster}-brokers"


def server_name(index: int) -> str:
    """The name of broker ``index`` in the backend (and in ``show stat``)."""
    return f"broker-{index}"


def render(topology: Topology, cluster: str, stats_security: StatsSecurity | None = None) -> str:
    """The HAProxy configuration of ``cluster``'s load balancer; its stats
    page on HTTPS with users when ``stats_security`` says so."""
    spec = topology.cluster(cluster)
    lb = spec.load_balancer
    if lb is None:
        raise ValueError(f"cluster {cluster!r} has no load balancer")
    host = topology.address_of(f"{cluster}.haproxy")
    lines = [
        f"# HAProxy for the Samsa cluster {cluster!r} of topology {topology.name!r}.",
        "# Rendered by infra/local/haproxy.py from the topology: edit the topology, not this.",
        "global",
        f"    maxconn {lb.max_connections}",
        f"    stats socket unix@{STATS_SOCKET} mode 600 level admin",
        "    log stderr format iso local0 info",
        "",
        "defaults",
        "    mode tcp",
        "    log global",
        "    option tcplog",
        "    option dontlognull",
        # every retry of a failed connection may go to another broker
        "    option redispatch 1",
        f"    retries {lb.retries}",
        f"    timeout connect {lb.connect_timeout_ms}ms",
        # above the brokers' longest long-poll, or an idle fetch would be cut
        f"    timeout client {lb.client_timeout_ms}ms",
        f"    timeout server {lb.server_timeout_ms}ms",
        f"    timeout check {max(lb.health_check_ms, 100)}ms",
        "",
        f"frontend {cluster}",
        f"    bind {host}:{topology.lb_port(cluster)}",
        f"    maxconn {lb.max_connections}",
        f"    default_backend {backend_name(cluster)}",
        "",
        f"backend {backend_name(cluster)}",
        f"    balance {lb.balance}",
        f"    default-server check inter {lb.health_check_ms}ms fall {lb.fall} rise {lb.rise}"
        " on-marked-down shutdown-sessions",
    ]
    for i, port in enumerate(topology.broker_ports(cluster)):
        broker = topology.address_of(f"{cluster}.broker-{i}")
        lines.append(f"    server {server_name(i)} {broker}:{port}")
    stats_port = topology.lb_stats_port(cluster)
    if stats_port is not None:
        tls = f" ssl crt {stats_security.pem_file}" if stats_security else ""
        lines += [
            "",
            "listen stats",
            f"    bind {host}:{stats_port}{tls}",
            "    mode http",
            "    option dontlog-normal",
            "    stats enable",
            "    stats uri /",
            "    stats refresh 2s",
            "    timeout client 10s",
            "    timeout server 10s",
        ]
        if stats_security:
            lines.append("    stats realm samsa-lab")
            lines += [f"    stats auth {name}:{password}"
                      for name, password in stats_security.users]
    return "\n".join(lines) + "\n"


def check_config(path: str, haproxy: str | None = None) -> None:
    """``haproxy -c -f path``: HAProxyError with its complaints if it refuses."""
    try:
        done = subprocess.run([haproxy or find_haproxy(), "-c", "-f", path],
                              capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise HAProxyError(f"cannot run haproxy -c: {exc}") from None
    if done.returncode != 0:
        raise HAProxyError(f"haproxy refuses {path}:\n{(done.stdout + done.stderr).strip()}")


def command(config_path: str, haproxy: str | None = None) -> list[str]:
    """Run in the foreground (-db): no daemon, no master process; SIGTERM stops it."""
    return [haproxy or find_haproxy(), "-db", "-f", config_path]


def show_stat(directory: str, timeout: float = 2.0) -> list[dict[str, str]]:
    """``show stat`` on the stats socket of the HAProxy running in
    ``directory``: one dict per proxy line (pxname, svname, status, scur, ...).
    OSError when it does not answer."""
    path = os.path.join(directory, STATS_SOCKET)
    dir_fd = None
    if len(path.encode()) >= 100:
        # the socket path limit is 108 bytes: reach it through a short /proc path
        dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        path = f"/proc/self/fd/{dir_fd}/{STATS_SOCKET}"
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.connect(path)
            sock.sendall(b"show stat\n")
            chunks = []
            while True:          # HAProxy closes the connection after its answer
                chunk = sock.recv(65536)
                if not chunk:
                    break
                chunks.append(chunk)
    finally:
        if dir_fd is not None:
            os.close(dir_fd)
    text = b"".join(chunks).decode(errors="replace").lstrip("# ")
    return [row for row in csv.DictReader(line for line in text.splitlines() if line)]


def backend_servers(directory: str, cluster: str) -> list[dict[str, str]]:
    """The state of each broker in ``cluster``'s backend, as read from the
    running HAProxy's stats socket (see ``servers_in_stats``)."""
    return servers_in_stats(show_stat(directory), cluster)


def servers_in_stats(rows: list[dict[str, str]], cluster: str) -> list[dict]:
    """Each broker of ``cluster``'s backend in ``show stat`` rows: {"server",
    "address", "status" ("UP", "DOWN", "UP 1/2" while rising...), "check" (the
    last finished check's result: "L4OK", "L4TOUT", "L4CON"...), "checking"
    (a check is under way: HAProxy then prefixes check_status with "* "),
    "sessions" (current connections), "total" (connections so far)}."""
    out = []
    for row in rows:
        if row.get("pxname") == backend_name(cluster) and row.get("svname") != "BACKEND":
            check = row.get("check_status", "")
            checking = check.startswith("* ")
            out.append({"server": row["svname"], "address": row.get("addr", ""),
                        "status": row.get("status", ""),
                        "check": check[2:] if checking else check, "checking": checking,
                        "sessions": int(row.get("scur") or 0),
                        "total": int(row.get("stot") or 0)})
    return out
