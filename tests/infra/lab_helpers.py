"""Helpers of the lab tests: small topologies, and what the processes of a
lab look like from outside (/proc), for checking that none is left."""
from __future__ import annotations

import os

from infra.local.lab import proc_stat
from infra.topology import ClusterSpec, LoadBalancerSpec, MirrorSpec, Topology

# Brokers that flush often (acks=flushed answers quickly) and whose ZooKeeper
# registration outlives a crash by 2 s only (a restarted broker registers anew
# without waiting out the default 6 s).
FAST_BROKERS = ("log.flush_ms=10", "zookeeper_session_timeout_ms=2000")


def small_topology(dc_brokers: int = 2, analysis_brokers: int = 1,
                   mirror: bool = False) -> Topology:
    """One datacenter "dc-a" behind its load balancer, an "analysis" cluster
    (none when ``analysis_brokers`` is 0) and, with ``mirror``, one mirror
    process copying dc-a into analysis. Ports: move it with free_topology()."""
    analysis = (ClusterSpec("analysis", brokers=analysis_brokers, broker_settings=FAST_BROKERS)
                if analysis_brokers else None)
    mirrors = ((MirrorSpec("to-analysis", sources=("dc-a",), target="analysis", processes=1,
                           settings=("commit_interval_ms=200", "linger_ms=5")),)
               if mirror else ())
    return Topology(
        name="test-lab",
        datacenters=(ClusterSpec("dc-a", brokers=dc_brokers, broker_settings=FAST_BROKERS,
                                 load_balancer=LoadBalancerSpec()),),
        analysis=analysis,
        mirrors=mirrors)


def processes_mentioning(text: str) -> list[tuple[int, str]]:
    """Live processes (not zombies) whose command line contains ``text`` (a
    lab's state directory appears in the command of each of its processes)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline and running(int(entry)):
            found.append((int(entry), cmdline))
    return found


def running(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie is not)."""
    stat = proc_stat(pid)
    return stat is not None and stat[0] not in "ZX"
