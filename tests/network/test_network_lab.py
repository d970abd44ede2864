"""The network lab on this machine's kernel (issue 29, point 1 and the
network half of point 2): namespaces, the router's delayed links, cuts,
isolation, a host cut from its ZooKeeper, and nothing left behind after
``down`` or a ``kill -9`` of the keeper. Needs root: skipped, with the
reason, where namespaces cannot be made (CI runs as root)."""
from __future__ import annotations

import os
import signal
import statistics
import subprocess

import pytest

from broker.service_kit.process import wait_until
from infra.local.network import control
from infra.local.network.control import NetworkLabError
from infra.local.network.plan import lab_id
from infra.local.network.runner import NetworkLab, missing_requirements
from netns_helpers import address, connect_ms, echoed, lab_topology, listen

MISSING = missing_requirements()
pytestmark = pytest.mark.skipif(bool(MISSING), reason="the network lab needs "
                                + ", ".join(MISSING))
PORT = 7100


def lab_leftovers(state_dir: str, holders: list[int]) -> list[str]:
    """What of a lab is still on this machine: its cable, its route, its holders."""
    found = []
    cable = f"samsa{lab_id(os.path.abspath(state_dir))}"
    if os.path.exists(f"/sys/class/net/{cable}"):
        found.append(cable)
    found += [f"holder {pid}" for pid in holders if os.path.exists(f"/proc/{pid}")]
    return found


@pytest.fixture(scope="module")
def network(tmp_path_factory):
    state_dir = str(tmp_path_factory.mktemp("netlab"))
    lab = NetworkLab(state_dir)
    lab.up(lab_topology("10.81.0.0/16"), seed=3)
    servers = [listen(state_dir, host, PORT)
               for host in ("analysis.client", "dc-b.client", "dc-a.zookeeper-1",
                            "dc-a.broker-1")]
    yield state_dir
    for server in servers:
        server.kill()
        server.wait()
    lab.down()


@pytest.fixture(autouse=True)
def healed(request):
    yield
    if "network" in request.fixturenames:
        control.request(request.getfixturevalue("network"), "reset")


def test_a_link_adds_its_round_trip_and_a_datacenter_is_a_lan(network):
    analysis = address(network, "analysis.client")
    wan = [t for t in connect_ms(network, "dc-a.client", analysis, PORT, times=7)]
    assert None not in wan
    assert 40 <= statistics.median(wan) < 55, wan
    lan = connect_ms(network, "dc-a.client", address(network, "dc-a.broker-1"), PORT)
    unshaped = connect_ms(network, "dc-b.client", analysis, PORT)
    assert statistics.median(lan) < 5 and statistics.median(unshaped) < 5, (lan, unshaped)
    # the lab's own command reaches every host over the management network
    assert wait_until(lambda: os.system(f"python3 -c 'import socket; socket.create_connection("
                                        f"(\"{analysis}\", {PORT}), timeout=1)'") == 0, 5)


def test_every_host_is_tuned_for_a_wan(network):
    """TCP's autotuning may grow a window to network.tcp_buffer_max_bytes
    (64 MiB): 100 ms x 150 MB/s needs 15 MB in flight."""
    for host in ("dc-a.broker-0", "analysis.client"):
        out = subprocess.run(control.enter_command(network, host, [
            "cat", "/proc/sys/net/ipv4/tcp_rmem", "/proc/sys/net/ipv4/tcp_wmem"]),
            capture_output=True, text=True, check=True).stdout.split()
        assert out[2] == out[5] == str(64 << 20), out


def test_shape_changes_a_link_at_once(network):
    control.request(network, "shape", **{"from": "dc-b", "to": "analysis", "rtt_ms": 100})
    times = connect_ms(network, "dc-b.client", address(network, "analysis.client"), PORT)
    assert 100 <= statistics.median(times) < 120, times


def test_a_cut_link_carries_nothing_until_healed(network):
    target = address(network, "analysis.client")
    control.request(network, "cut", **{"from": "dc-b", "to": "analysis"})
    assert connect_ms(network, "dc-b.client", target, PORT, times=2, timeout=0.5) == [None] * 2
    control.request(network, "heal", **{"from": "dc-b", "to": "analysis"})
    assert None not in connect_ms(network, "dc-b.client", target, PORT, times=2)


def test_a_one_way_cut_drops_one_direction_only(network):
    control.request(network, "cut", **{"from": "dc-b", "to": "analysis", "both": False})
    assert echoed(network, "analysis.client", address(network, "dc-b.client"), PORT, 20,
                  wait=0.3) == 0
    links = {(link["from"], link["to"]): link
             for link in control.request(network, "status")["links"]}
    there, back = links[("analysis", "dc-b")], links[("dc-b", "analysis")]
    assert not there["cut"] and there["counters"]["sent"] >= 20
    assert back["cut"] and back["counters"]["cut"] >= 20


def test_an_isolated_datacenter_reaches_no_other(network):
    control.request(network, "isolate", datacenter="dc-b")
    assert connect_ms(network, "dc-b.client", address(network, "analysis.client"), PORT,
                      times=1, timeout=0.5) == [None]
    assert connect_ms(network, "dc-a.client", address(network, "dc-b.client"), PORT,
                      times=1, timeout=0.5) == [None]
    # the others still talk; dc-b's hosts still talk among themselves
    assert None not in connect_ms(network, "dc-a.client", address(network, "analysis.client"),
                                  PORT, times=1)
    assert None not in connect_ms(network, "dc-b.broker-0", address(network, "dc-b.client"),
                                  PORT, times=1)


def test_a_host_cut_from_its_zookeeper_still_reaches_the_rest(network):
    control.request(network, "block", host="dc-a.broker-0", peers=["dc-a.zookeeper-1"])
    zookeeper = address(network, "dc-a.zookeeper-1")
    assert connect_ms(network, "dc-a.broker-0", zookeeper, PORT, times=1,
                      timeout=0.5) == [None]
    assert None not in connect_ms(network, "dc-a.broker-0", address(network, "dc-a.broker-1"),
                                  PORT, times=1)
    assert None not in connect_ms(network, "dc-a.client", zookeeper, PORT, times=1)
    control.request(network, "unblock", host="dc-a.broker-0")
    assert None not in connect_ms(network, "dc-a.broker-0", zookeeper, PORT, times=1)


def test_loss_drops_about_its_fraction(network):
    control.request(network, "shape", **{"from": "dc-b", "to": "analysis", "loss": 0.3,
                                         "both": False})
    back = echoed(network, "dc-b.client", address(network, "analysis.client"), PORT, 300)
    assert 150 <= back <= 270, back          # 70 % of 300 is 210
    status = control.request(network, "status")
    lost = next(link for link in status["links"]
                if (link["from"], link["to"]) == ("dc-b", "analysis"))["counters"]["lost"]
    assert lost == 300 - back


def test_bad_requests_get_the_reason(network):
    with pytest.raises(NetworkLabError, match="no datacenter named 'nowhere'"):
        control.request(network, "cut", **{"from": "dc-a", "to": "nowhere"})
    with pytest.raises(NetworkLabError, match="loss must be"):
        control.request(network, "shape", **{"from": "dc-a", "to": "dc-b", "loss": 3})
    with pytest.raises(NetworkLabError, match="unknown op"):
        control.request(network, "explode")
    with pytest.raises(NetworkLabError, match="no host named"):
        control.request(network, "block", host="nobody", peers=["dc-a.client"])
    # a request of the wrong shape (peers not a list) is refused, the lab goes on
    with pytest.raises(NetworkLabError, match="failed"):
        control.request(network, "block", host="dc-a.client", peers=5)
    assert control.request(network, "status")["ok"]


def test_a_malformed_control_request_gets_an_error_and_the_keeper_goes_on(network):
    import socket
    for garbage in (b"{not json\n", b"[1, 2]\n", b"\xff\xfe\n"):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(5)
            sock.connect(os.path.join(control.network_dir(network), "control.sock"))
            sock.sendall(garbage)
            answer = sock.recv(65536)
        assert b'"ok": false' in answer, answer
    assert control.request(network, "status")["ok"]


def test_a_second_lab_on_the_same_range_is_refused(network, tmp_path):
    with pytest.raises(NetworkLabError, match="overlaps routes"):
        NetworkLab(str(tmp_path)).up(lab_topology("10.81.0.0/16"))
    assert not NetworkLab(str(tmp_path)).running()


@pytest.mark.parametrize("how", ["down", "kill -9 of the keeper"])
def test_nothing_is_left_behind(tmp_path, how):
    lab = NetworkLab(str(tmp_path))
    document = lab.up(lab_topology("10.82.0.0/16"))
    holders = [h["pid"] for h in document["hosts"].values()]
    assert lab_leftovers(str(tmp_path), holders) != []
    if how == "down":
        lab.down()
    else:
        os.kill(document["keeper"], signal.SIGKILL)
        with pytest.raises(NetworkLabError, match="does not answer"):
            wait_until(lambda: control.request(str(tmp_path), "status", timeout=1) and False, 5)
    assert wait_until(lambda: not lab_leftovers(str(tmp_path), holders), 10), \
        lab_leftovers(str(tmp_path), holders)
    assert not any("10.82." in line for line in os.popen("ip -4 route show table all"))
    # and the range is free again: a new lab comes up on it, and goes
    lab.down()
    lab.up(lab_topology("10.82.0.0/16"))
    lab.down()
