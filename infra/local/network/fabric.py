"""Building the network lab's wiring with the kernel's own tools (``ip``,
``sysctl`` files, ``iptables``), run by the keeper from inside the router's
network namespace.

Nothing is ever created in the machine's own (root) network namespace but
the management cable's far end, which the kernel removes with the router:

* the router is the keeper's own namespace (keeper.py unshares it);
* every host is a namespace held by a ``sleep`` process that dies with the
  keeper (``setpriv --pdeathsig KILL``), made with ``unshare --net``; its
  cable (a veth pair) is created from the router with its far end put
  straight into the host's namespace;
* iptables rules live in the namespace they filter.

So a namespace goes when its last process goes: after ``down`` (every
service stopped, then the keeper), or after a ``kill -9`` of the keeper and
the lab's services, the kernel has nothing of the lab left. No namespace is
mounted under /var/run/netns; ``python -m infra.local.network exec HOST --
CMD`` runs a command in a host's namespace instead of ``ip netns exec``.

Routing in the router: each datacenter's bridge ``br<c>`` carries its /24
and the router's address .1; traffic between hosts of one datacenter is
bridged and never routed (no delay, as on a LAN). A packet from a
datacenter's bridge to another datacenter is sent by a policy rule (``iif
br<c> lookup 100``) to the TUN device ``wan0``, where the delayer holds it
for its link's delay and writes it back; coming in on ``wan0`` it is routed
by the main table to its datacenter's bridge. Reverse-path filtering is off
in the router (a packet comes back on ``wan0`` with a source behind a
bridge).
"""
from __future__ import annotations

import ctypes
import fcntl
import ipaddress
import json
import os
import struct
import subprocess
import time

from infra.local.network.plan import NetworkPlan

CLONE_NEWNET = 0x40000000
TUNSETIFF = 0x400454CA
IFF_TUN = 0x0001
IFF_NO_PI = 0x1000
IFF_VNET_HDR = 0x4000
TUNSETOFFLOAD = 0x400454D0
TUN_F_CSUM, TUN_F_TSO4, TUN_F_TSO6 = 0x01, 0x02, 0x04
VNET_HDR = 10               # struct virtio_net_hdr before each packet with IFF_VNET_HDR
WAN_TABLE = 100
TUN_NAME = "wan0"
HOLDER = ["setpriv", "--pdeathsig", "KILL", "--", "unshare", "--net", "--", "sleep", "infinity"]
ANCHOR = ["setpriv", "--pdeathsig", "KILL", "--", "sleep", "infinity"]


class FabricError(RuntimeError):
    pass


def run(args: list[str], *, stdin: str | None = None) -> str:
    """Run a command; FabricError with its stderr when it fails."""
    proc = subprocess.run(args, input=stdin, capture_output=True, text=True)
    if proc.returncode != 0:
        raise FabricError(f"{' '.join(args)} failed (exit {proc.returncode}): "
                          f"{(proc.stderr or proc.stdout).strip()}")
    return proc.stdout


def in_namespace(pid: int, args: list[str], *, stdin: str | None = None) -> str:
    """Run ``args`` in the network namespace of process ``pid``."""
    return run(["nsenter", "--target", str(pid), "--net", "--", *args], stdin=stdin)


def ip_batch(pid: int | None, commands: list[str]) -> None:
    """Several ``ip`` commands in one process (in ``pid``'s namespace, or here)."""
    args = ["ip", "-batch", "-"]
    text = "\n".join(commands) + "\n"
    if pid is None:
        run(args, stdin=text)
    else:
        in_namespace(pid, args, stdin=text)


def unshare_network() -> None:
    """Move this process into a new, empty network namespace (it must have
    one thread)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise FabricError(f"unshare(CLONE_NEWNET) failed: {os.strerror(err)} (the network "
                          f"lab needs root)")


def network_namespace(pid: int | str = "self") -> str:
    return os.readlink(f"/proc/{pid}/ns/net")


def spawn_sleeper(args: list[str]) -> subprocess.Popen:
    return subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, close_fds=True)


def wait_in_own_namespace(proc: subprocess.Popen, timeout: float = 10.0) -> None:
    """Wait until ``proc`` (a holder) has unshared and runs ``sleep``."""
    mine = network_namespace()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise FabricError(f"a namespace holder exited with {proc.returncode} (is "
                              f"util-linux's unshare and setpriv installed?)")
        try:
            with open(f"/proc/{proc.pid}/comm") as f:
                comm = f.read().strip()
            if comm == "sleep" and network_namespace(proc.pid) != mine:
                return
        except OSError:
            pass
        time.sleep(0.002)
    raise FabricError("a namespace holder did not start in time")


def overlapping_routes(subnet: ipaddress.IPv4Network) -> list[str]:
    """Routes of this (the root) namespace that overlap ``subnet``: the lab
    refuses to start over them (two labs, or a real network, on the range)."""
    routes = json.loads(run(["ip", "-j", "-4", "route", "show", "table", "all"]) or "[]")
    found = []
    for route in routes:
        dst = route.get("dst", "")
        if dst in ("default", "") or route.get("type") in ("broadcast", "local"):
            continue
        try:
            net = ipaddress.IPv4Network(dst if "/" in dst else f"{dst}/32", strict=False)
        except ValueError:
            continue
        if net.overlaps(subnet) and not net.is_loopback:
            found.append(f"{dst} dev {route.get('dev', '?')}")
    return found


def write_sysctl(name: str, value: str) -> None:
    path = "/proc/sys/" + name.replace(".", "/")
    with open(path, "w") as f:
        f.write(value)


def open_tun(name: str = TUN_NAME, offload: bool = True) -> int:
    """The TUN device ``name``; with ``offload``, it takes TCP segmentation
    offload (IFF_VNET_HDR, TUNSETOFFLOAD): the kernel hands the delayer a
    host's TSO super-packet (up to 64 KiB, many MTU-sized segments on the
    wire) as one read, preceded by a virtio_net_hdr, and segments it again
    when the delayer writes it back: far fewer packets for Python to move."""
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
    flags = IFF_TUN | IFF_NO_PI | (IFF_VNET_HDR if offload else 0)
    try:
        fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), flags))
        if offload:
            fcntl.ioctl(fd, TUNSETOFFLOAD, TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6)
    except OSError as exc:
        os.close(fd)
        raise FabricError(f"cannot create the TUN device {name}: {exc}") from None
    return fd


def host_commands(plan: NetworkPlan, host) -> list[str]:
    """``ip`` commands run inside a host's namespace once its cable is in."""
    dc = plan.datacenter(host.datacenter)
    return ["link set lo up",
            f"link set eth0 mtu {plan.mtu}",
            f"addr add {host.address}/{dc.subnet.prefixlen} dev eth0",
            "link set eth0 up",
            f"route add default via {dc.gateway}"]


def router_commands(plan: NetworkPlan) -> list[str]:
    """``ip`` commands of the router (bridges, policy routing to wan0)."""
    out = ["link set lo up", f"link set {TUN_NAME} mtu {plan.mtu} up"]
    for dc in plan.datacenters:
        out += [f"link add {dc.bridge} type bridge",
                f"link set {dc.bridge} mtu {plan.mtu}",
                f"addr add {dc.gateway}/{dc.subnet.prefixlen} dev {dc.bridge}",
                f"link set {dc.bridge} up",
                f"route add {dc.subnet} dev {TUN_NAME} table {WAN_TABLE}",
                f"rule add iif {dc.bridge} lookup {WAN_TABLE} pref {WAN_TABLE}"]
    return out


def build_router() -> None:
    """Sysctls of the router's namespace (after unshare_network)."""
    write_sysctl("net.ipv4.ip_forward", "1")
    for scope in ("all", "default"):
        write_sysctl(f"net.ipv4.conf.{scope}.rp_filter", "0")
        write_sysctl(f"net.ipv6.conf.{scope}.disable_ipv6", "1")


def attach_host(plan: NetworkPlan, host, holder_pid: int) -> None:
    """The host's cable: created here (the router), its far end ``eth0`` in
    the holder's namespace, enslaved to the datacenter's bridge."""
    dc = plan.datacenter(host.datacenter)
    ip_batch(None, [f"link add {host.cable} type veth peer name eth0 netns {holder_pid}",
                    f"link set {host.cable} mtu {plan.mtu} master {dc.bridge} up"])
    sysctls = ["echo 1 > /proc/sys/net/ipv6/conf/all/disable_ipv6",
               "echo 1 > /proc/sys/net/ipv6/conf/default/disable_ipv6"]
    if plan.tcp_buffer_max:
        # a WAN-tuned host: TCP's autotuning may grow a window this far
        sysctls += [f"echo '4096 131072 {plan.tcp_buffer_max}' > /proc/sys/net/ipv4/tcp_rmem",
                    f"echo '4096 16384 {plan.tcp_buffer_max}' > /proc/sys/net/ipv4/tcp_wmem"]
    in_namespace(holder_pid, ["sh", "-c", "; ".join(sysctls)])
    ip_batch(holder_pid, host_commands(plan, host))


def attach_management(plan: NetworkPlan, anchor_pid: int) -> None:
    """The cable to the root namespace (``anchor_pid`` lives there): the lab's
    own command reaches every host through the router, undelayed."""
    prefix = plan.management.prefixlen
    ip_batch(None, [f"link add mgmt0 type veth peer name {plan.root_cable} netns {anchor_pid}",
                    f"link set mgmt0 mtu {plan.mtu}",
                    f"addr add {plan.router_address}/{prefix} dev mgmt0",
                    "link set mgmt0 up"])
    ip_batch(anchor_pid, [f"link set {plan.root_cable} mtu {plan.mtu}",
                          f"addr add {plan.root_address}/{prefix} dev {plan.root_cable}",
                          f"link set {plan.root_cable} up",
                          f"route add {plan.subnet} via {plan.router_address} "
                          f"dev {plan.root_cable}"])


# ---------------------------------------------------------------- host filters

CHAIN = "SAMSA-LAB"


def set_blocked_peers(holder_pid: int, peers: list[str]) -> None:
    """Drop every packet between the host and ``peers`` (addresses), both
    ways, in the host's namespace; an empty list lifts every block."""
    rules = ["*filter", f":{CHAIN} - [0:0]", ":INPUT ACCEPT [0:0]", ":OUTPUT ACCEPT [0:0]",
             f"-A INPUT -j {CHAIN}", f"-A OUTPUT -j {CHAIN}"]
    for peer in peers:
        rules += [f"-A {CHAIN} -s {peer}/32 -j DROP", f"-A {CHAIN} -d {peer}/32 -j DROP"]
    rules.append("COMMIT")
    in_namespace(holder_pid, ["iptables-restore"], stdin="\n".join(rules) + "\n")
