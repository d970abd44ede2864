"""The keeper's control socket never holds up the lab's packets: its
connections are served by the delayer's loop without waiting on a client
(keeper.ControlServer). A client stuck halfway through its request delays
neither the packets of a shaped link nor other requests, and is answered an
error at the deadline; an endless request is cut at the cap. Needs root:
skipped, with the reason, where namespaces cannot be made."""
from __future__ import annotations

import os
import socket
import time

import pytest

from infra.local.network import control
from infra.local.network.keeper import CONTROL_DEADLINE, MAX_CONNECTIONS
from infra.local.network.runner import NetworkLab, missing_requirements
from netns_helpers import ConnectStream, address, lab_topology, listen

MISSING = missing_requirements()
pytestmark = pytest.mark.skipif(bool(MISSING), reason="the network lab needs "
                                + ", ".join(MISSING))
PORT = 7100
RTT_MS = 40                 # dc-a <-> analysis in lab_topology
#: what a connect may take beyond the link's round trip on a busy machine;
#: far below the seconds a stalled loop adds
SLACK_MS = 150


@pytest.fixture(scope="module")
def network(tmp_path_factory):
    state_dir = str(tmp_path_factory.mktemp("netlab"))
    lab = NetworkLab(state_dir)
    lab.up(lab_topology("10.83.0.0/16"), seed=5)
    server = listen(state_dir, "analysis.client", PORT)
    yield state_dir
    server.kill()
    server.wait()
    lab.down()


def control_connection(state_dir: str) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(CONTROL_DEADLINE + 10)
    sock.connect(os.path.join(control.network_dir(state_dir), "control.sock"))
    return sock


def timed_status(state_dir: str) -> float:
    """Seconds a status request took to be answered."""
    start = time.monotonic()
    assert control.request(state_dir, "status", timeout=CONTROL_DEADLINE + 10)["ok"]
    return time.monotonic() - start


def read_to_end(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def test_a_stuck_control_client_delays_no_packet_nor_other_request(network):
    stream = ConnectStream(network, "dc-a.client", address(network, "analysis.client"), PORT)
    try:
        start, end = stream.next()
        assert end is not None and (end - start) * 1000 < RTT_MS + SLACK_MS
        with control_connection(network) as stuck:
            stuck.sendall(b'{"op": "sta')            # half a request, and nothing more
            held_from = time.monotonic()
            # answered while the stuck one is open (and, the keeper accepting
            # in order, once it has taken the stuck one)
            answered = [timed_status(network)]
            # the connects that ended while it is held, the one under way included
            during = []
            while len(during) < 10:
                start, end = stream.next()
                if end is None or end > held_from:
                    during.append(None if end is None else (end - start) * 1000)
            answered.append(timed_status(network))
            assert time.monotonic() - held_from < CONTROL_DEADLINE, "measured too slowly"
            # the stuck client is answered an error at the deadline, and closed
            waited = time.monotonic()
            refusal = read_to_end(stuck)
            waited = time.monotonic() - waited
    finally:
        stream.stop()
    assert max(answered) < 0.5, answered
    assert None not in during and max(during) < RTT_MS + SLACK_MS, during
    assert control.decode(refusal) == {
        "ok": False, "error": f"no whole request within {CONTROL_DEADLINE:.0f} s"}
    assert waited < CONTROL_DEADLINE + 2, waited


def test_a_request_over_the_cap_is_refused_and_the_keeper_goes_on(network):
    with control_connection(network) as sock:
        sock.sendall(b"x" * (control.MAX_REQUEST_BYTES + 1))
        answer = control.decode(sock.recv(65536))
    assert answer == {"ok": False, "error": f"the request is too long: a line is at most "
                                            f"{control.MAX_REQUEST_BYTES} bytes"}
    # a request of exactly the cap is read whole (and refused for what it says)
    with control_connection(network) as sock:
        sock.sendall(b" " * (control.MAX_REQUEST_BYTES - 2) + b"[]\n")
        assert "a control message is a JSON object" in control.decode(
            read_to_end(sock))["error"]
    assert timed_status(network) < 0.5


def test_a_request_without_its_newline_is_answered_when_the_client_stops_sending(network):
    with control_connection(network) as sock:
        sock.sendall(b'{"op": "status"}')
        sock.shutdown(socket.SHUT_WR)
        answer = control.decode(read_to_end(sock))
    assert answer["ok"] and answer["links"]


def test_connections_beyond_the_cap_are_closed_unanswered_and_the_keeper_recovers(network):
    stuck = []
    try:
        for _ in range(MAX_CONNECTIONS):
            sock = control_connection(network)
            sock.sendall(b'{"op": "sta')          # each holds a place, half a request
            stuck.append(sock)
        with control_connection(network) as extra:
            assert read_to_end(extra) == b""     # closed at once, no answer
    finally:
        for sock in stuck:
            sock.close()
    # the stuck ones gone (each answered an error on its end of stream), the
    # keeper takes requests again, long before their deadline
    start = time.monotonic()
    answered = None
    while answered is None and time.monotonic() - start < 2.0:
        try:
            answered = control.request(network, "status")
        except control.NetworkLabError:
            time.sleep(0.05)                  # polled: the keeper's closing has no event here
    assert answered and answered["ok"], "status not answered within 2 s of the close"
