"""Helpers of the lab tests: small topologies, what the processes of a lab
look like from outside (/proc), for checking that none is left, and a
producer that keeps sending through a load balancer (``Sender``)."""
from __future__ import annotations

import threading

from broker.client.producer import Producer
from broker_helpers import topic_values  # noqa: F401 - the lab tests take it here
from broker.service_kit.process import command_lines, proc_stat
from infra.topology import ClusterSpec, LoadBalancerSpec, MirrorSpec, Topology

# Brokers that flush often (acks=flushed answers quickly) and whose ZooKeeper
# registration outlives a crash by 4 s (a restarted broker registers anew
# sooner than with the default 6 s), long enough not to expire by accident on
# a loaded 2-core machine.
FAST_BROKERS = ("log.flush_ms=10", "zookeeper_session_timeout_ms=4000")


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
    for pid, argv in command_lines():
        cmdline = b" ".join(argv).decode(errors="replace")
        if text in cmdline:
            found.append((pid, cmdline))
    return found


def running(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie is not)."""
    stat = proc_stat(pid)
    return stat is not None and stat.state not in "ZX"


# ------------------------------------------------------------------ producing through a load balancer

TOPIC = "failover"
ROUND = 20          # messages sent before waiting for the last one's acknowledgement


class Sender(threading.Thread):
    """Sends ROUND messages, waits for their acknowledgement, and again, until
    stopped; counts the messages acknowledged so far."""

    def __init__(self, producer: Producer) -> None:
        super().__init__(name="failover-sender", daemon=True)
        self.producer = producer
        self.batches = []               # (values, batch) of every send
        self.acknowledged = 0
        self.error: BaseException | None = None
        self.stop = threading.Event()

    def run(self) -> None:
        i = 0
        try:
            while not self.stop.is_set():
                values = [b"m-%07d" % (i + k) for k in range(ROUND)]
                batches = [self.producer.send(TOPIC, v) for v in values]
                i += ROUND
                self.batches += zip(values, batches)
                batches[-1].result(timeout=60)      # raises if that batch failed
                self.acknowledged = i
        except BaseException as exc:     # noqa: BLE001 - reported by the test
            self.error = exc


def connected_broker(lab, cluster: str) -> int:
    """The index of the one broker of ``cluster`` that holds a connection
    through its load balancer now (one producer is connected)."""
    (index,) = [int(b["server"].split("-")[1]) for b in lab.lb_backends(cluster)
                if b["sessions"] > 0]
    return index


