"""The producers' side across a real load balancer (issue 29, point 4): in
the netns runtime, a producer process in ``dc-a.client`` that knows only
dc-a's HAProxy address (and whose host is cut off from the brokers' hosts,
so nothing it sends can go another way) keeps sending numbered messages
with acks=flushed while one broker host is cut off from the load balancer
at the network (the lab's ``block``: packets dropped, nothing refused, the
broker process untouched). HAProxy's health check times out and takes that
broker out of rotation, closing the producer's session through it; the
producer carries on through the other broker; unblocked, the broker is UP
again and takes new connections. Every acknowledged message is on a broker
afterwards (duplicates allowed, counted). Needs root: skipped, with the
reason, where namespaces cannot be made (CI runs as root)."""
from __future__ import annotations

import collections
import dataclasses
import os
import subprocess
import sys
import time

import pytest

from broker_helpers import wait_until
from infra.local.lab import Lab
from infra.local.network import control
from infra.local.network.runner import missing_requirements
from infra.topology import NetworkSpec
from lab_helpers import processes_mentioning, small_topology, topic_values

# the network lab's probes and its producer process
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "network"))
from netns_helpers import NumberedProducer, connect_ms  # noqa: E402

MISSING = missing_requirements()
pytestmark = pytest.mark.skipif(bool(MISSING), reason="the netns runtime needs "
                                + ", ".join(MISSING))

TOPIC = "through-lb"
ROUND = 20              # the producer's round: sent once the previous one is answered
CLUSTER = "dc-a"
SLACK_S = 1.5           # on top of the health check's own timing: a loaded 2-core machine
CLIENT, LB_HOST = f"{CLUSTER}.client", f"{CLUSTER}.haproxy"


def backends(lab: Lab) -> dict[int, dict]:
    """HAProxy's view of each broker (stats socket): index -> its row."""
    return {int(b["server"].split("-")[1]): b for b in lab.lb_backends(CLUSTER)}


def holding_sessions(lab: Lab) -> list[int]:
    """The one broker holding a session through the load balancer (the
    producer's), as [index]; [] while not exactly one does (a metadata ask,
    on a connection of its own, may be open for a moment)."""
    holding = [i for i, b in backends(lab).items() if b["sessions"] > 0]
    return holding if len(holding) == 1 else []


def in_state(lab: Lab, index: int, status: str) -> dict | None:
    row = backends(lab)[index]
    return row if row["status"] == status else None


def produce_through_lb(lab: Lab, values: list[str]) -> None:
    """Send ``values`` from the client host with the console producer
    (`python -m broker.tools produce`), the load balancer's address only."""
    command = control.enter_command(lab.state_dir, CLIENT, [
        sys.executable, "-m", "broker.tools", "produce", "-b", lab.lb_address(CLUSTER),
        "-t", TOPIC, "--acks", "flushed", "--quiet"])
    done = subprocess.run(command, input="\n".join(values) + "\n", capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def tail(path: str, lines: int = 40) -> str:
    try:
        with open(path, errors="replace") as f:
            return "\n".join(f.read().splitlines()[-lines:])
    except OSError as exc:
        return f"(unreadable: {exc})"


@pytest.fixture
def lb_lab(tmp_path, request):
    """dc-a: two unreplicated brokers behind HAProxy (the topology's default
    health check: every 500 ms, fall 2, rise 2), no analysis cluster, in
    10.89.0.0/16. Taken down whatever happens, and checked to leave nothing."""
    topology = dataclasses.replace(small_topology(dc_brokers=2, analysis_brokers=0),
                                   network=NetworkSpec(subnet="10.89.0.0/16"))
    state_dir = str(tmp_path / "lab")
    lab = Lab(topology, state_dir, runtime="netns")
    lab.up(timeout=60, monitoring=False)
    holders = [h["pid"] for h in control.hosts(state_dir)["hosts"].values()]
    started: list[NumberedProducer] = []
    try:
        yield lab, started
    finally:
        for producer in started:
            producer.kill()
        if any(getattr(getattr(request.node, f"rep_{when}", None), "failed", False)
               for when in ("setup", "call")):
            for name in (f"{CLUSTER}.haproxy", f"{CLUSTER}.broker-0", f"{CLUSTER}.broker-1"):
                print(f"\n----- {lab.log_path(name)} -----\n{tail(lab.log_path(name))}")
            for producer in started:
                print(f"\n----- {producer.log_path} -----\n{tail(producer.log_path)}")
        lab.down(timeout=20)
        assert not [pid for pid in holders if os.path.exists(f"/proc/{pid}")], \
            "a host's namespace holder outlived the lab"
        assert processes_mentioning(state_dir) == []


def test_a_broker_cut_off_from_the_load_balancer_leaves_rotation_and_nothing_acked_is_lost(
        lb_lab, tmp_path):
    lab, started = lb_lab
    lb = lab.lb_address(CLUSTER)
    lb_address, lb_port = lb.split(":")
    brokers = [lab.broker_address(CLUSTER, i) for i in (0, 1)]
    assert lb_address == control.hosts(lab.state_dir)["hosts"][LB_HOST]["address"]

    # The client host reaches the brokers only through the load balancer:
    # cut it off from the brokers' hosts (the lab's network does not, by
    # itself: one datacenter is one bridge).
    control.request(lab.state_dir, "block", host=CLIENT,
                    peers=[f"{CLUSTER}.broker-0", f"{CLUSTER}.broker-1"])
    for broker in brokers:
        host, port = broker.split(":")
        assert connect_ms(lab.state_dir, CLIENT, host, int(port), times=1, timeout=0.5) \
            == [None], f"{CLIENT} still reaches {broker} directly"
    assert None not in connect_ms(lab.state_dir, CLIENT, lb_address, int(lb_port), times=2)

    producer = NumberedProducer(lab.state_dir, CLIENT, lb, TOPIC,
                                str(tmp_path / "producer.log"), round_=ROUND)
    started.append(producer)
    assert producer.command[-3:] == [lb, TOPIC, str(ROUND)]
    assert not any(b in " ".join(producer.command) for b in brokers)
    wait_until(lambda: producer.acked_count() >= 300 or producer.proc.poll() is not None,
               30, what="300 messages acknowledged through the load balancer")
    assert producer.proc.poll() is None, producer.log()[-3000:]
    (victim,) = wait_until(lambda: holding_sessions(lab), 10, what=lambda: (
        f"one broker holding the producer's session: {backends(lab)}"))
    survivor = 1 - victim

    # Cut the producer's broker off from the load balancer, at the network.
    blocked_at = time.monotonic()
    control.request(lab.state_dir, "block", host=f"{CLUSTER}.broker-{victim}", peers=[LB_HOST])
    down = wait_until(lambda: in_state(lab, victim, "DOWN"), 15, what=lambda: (
        f"HAProxy's health check to mark the blocked broker-{victim} DOWN: {backends(lab)}"))
    left_rotation_s = time.monotonic() - blocked_at
    # each check of a silent broker waits min(connect timeout, interval) for
    # the connection; the next starts an interval later; ``fall`` of them
    spec = lab.topology.cluster(CLUSTER).load_balancer
    check_ms = min(spec.connect_timeout_ms, spec.health_check_ms)
    assert left_rotation_s < spec.fall * (spec.health_check_ms + check_ms) / 1000 + SLACK_S, \
        left_rotation_s
    # a timed-out check (the packets vanish), not a refused connection
    assert down["check"] == "L4TOUT", down
    # on-marked-down shutdown-sessions: the producer's session through it is
    # closed now, not left to wait for an answer that cannot come
    wait_until(lambda: backends(lab)[victim]["sessions"] == 0, 1.0, what=lambda: (
        f"HAProxy to close the sessions of the DOWN broker-{victim}: {backends(lab)}"))
    acked_at_down = producer.acked_count()
    last_at_down = producer.last_acked()

    # The producer carries on through the other broker.
    wait_until(lambda: producer.acked_count() >= acked_at_down + 300
               or producer.proc.poll() is not None, 30,
               what="300 more messages acknowledged through the remaining broker")
    assert producer.proc.poll() is None, producer.log()[-3000:]
    now = backends(lab)
    assert now[victim]["status"] == "DOWN" and now[victim]["sessions"] == 0, now
    assert now[survivor]["status"] == "UP" and now[survivor]["sessions"] >= 1, now
    assert not producer.failed, producer.failed[:5]
    times = producer.ack_times()
    stall_s = max(b - a for a, b in zip(times, times[1:]))
    # the producer was not left on a half-open session until its request
    # timeout (30 s): HAProxy closed it once the broker went DOWN
    assert stall_s < left_rotation_s + 5, (stall_s, left_rotation_s)
    log = producer.log()
    assert "producer lost its connection" in log and "no response from broker" not in log, \
        log[-3000:]

    # Unblocked, the broker comes back into rotation and takes new connections.
    last_while_blocked = producer.last_acked()
    unblocked_at = time.monotonic()
    control.request(lab.state_dir, "unblock", host=f"{CLUSTER}.broker-{victim}")
    up = wait_until(lambda: in_state(lab, victim, "UP"), 15, what=lambda: (
        f"HAProxy's health check to mark broker-{victim} UP again: {backends(lab)}"))
    back_in_rotation_s = time.monotonic() - unblocked_at
    assert back_in_rotation_s < spec.rise * spec.health_check_ms / 1000 + SLACK_S, \
        back_in_rotation_s
    assert up["check"] == "L4OK", up
    total_before = up["total"]
    # leastconn: the producer holds its session on the survivor, so the
    # console producer's first connection (its metadata ask) goes to the
    # returned broker; its second may go either way (a tie while the first
    # is open)
    after = [f"after-{i}" for i in range(50)]
    produce_through_lb(lab, after)
    assert backends(lab)[victim]["total"] > total_before, backends(lab)

    summary = producer.stop()
    assert summary["failed_batches"] == 0 and summary["dropped"] == 0, summary
    assert not producer.failed, producer.failed[:5]
    acked = {b"m-%07d" % n for n in producer.acked}
    assert len(acked) >= acked_at_down + 300

    # Read every partition of both brokers back, from the root namespace
    # (the lab's management route).
    on = {i: collections.Counter(topic_values(lab, CLUSTER, TOPIC, [i])) for i in (0, 1)}
    stored = on[0] + on[1]
    missing = sorted(acked - set(stored))
    assert not missing, f"{len(missing)} acknowledged messages are on no broker: {missing[:10]}"
    duplicates = sum(stored[v] - 1 for v in acked if stored[v] > 1)
    # at most the one round whose answer the block ate, sent again
    assert duplicates <= ROUND, duplicates
    # what was first sent after the broker left rotation went to the other one
    # (ROUND-sized rounds: allow for the round or two in flight when DOWN was seen)
    first_after = last_at_down + 1 + 2 * ROUND
    later = {b"m-%07d" % n for n in range(first_after, last_while_blocked + 1)}
    assert later and not later & set(on[victim]), sorted(later & set(on[victim]))[:10]
    assert {v.encode() for v in after} <= set(stored), "the console producer's messages"
    print(f"\nbroker-{victim} left rotation {left_rotation_s:.2f} s after the block, came back "
          f"{back_in_rotation_s:.2f} s after the unblock; the producer's longest wait for an "
          f"acknowledgement {stall_s:.2f} s; {len(acked)} messages acknowledged, "
          f"{duplicates} duplicates stored, 0 lost")
