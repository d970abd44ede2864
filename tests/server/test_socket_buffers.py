"""Socket buffers across long round trips (issue 29, point 3): the broker's
send buffer and a client's receive buffer are the kernel's autotuned ones
unless set, since a fixed buffer caps a connection at that many bytes per
round trip (1 MiB each way held today's mirror to ~10 MB/s at 100 ms)."""
from __future__ import annotations

import re
import socket
import subprocess

import pytest

from broker.client.connection import BrokerConnection, parse_address
from broker.config import BrokerConfig
from broker.protocol import api
from broker.service_kit.settings import ConfigError
from broker_helpers import wait_until
from mirror.config import MirrorConfig


def send_buffer_of_accepted(port: int) -> int:
    """The send buffer (ss's skmem "tb") of the broker's side of a connection
    to ``port``."""
    out = subprocess.run(["ss", "-tmnH", "state", "established", f"( sport = :{port} )"],
                         capture_output=True, text=True, check=True).stdout
    found = re.search(r"\btb(\d+)", out)
    assert found, out
    return int(found.group(1))


@pytest.mark.parametrize("setting, expected", [(None, "autotuned"), (65536, 2 * 65536)])
def test_the_brokers_send_buffer_is_autotuned_unless_set(broker_factory, setting, expected):
    broker = broker_factory({} if setting is None else {"socket_send_buffer_bytes": setting})
    host, port = parse_address(broker.address)
    conn = BrokerConnection(host, port)
    conn.connect()
    try:
        # answered: the broker has accepted the connection and set its
        # buffer (the kernel accepts before the broker does; reading ss
        # before then saw the kernel's size on a busy machine)
        conn.request(api.MetadataRequest(()))
        size = wait_until(lambda: send_buffer_of_accepted(port), 5)
        if expected == "autotuned":
            # the kernel's starting size (net.ipv4.tcp_wmem's default), free to grow
            with open("/proc/sys/net/ipv4/tcp_wmem") as f:
                assert size != 2 * (1 << 20)
                assert size >= int(f.read().split()[1])
        else:
            assert size == expected          # the kernel doubles what is asked
    finally:
        conn.close()


def test_a_client_connection_takes_its_receive_buffer_or_the_kernels(broker_factory):
    broker = broker_factory()
    host, port = parse_address(broker.address)
    fixed = BrokerConnection(host, port, receive_buffer_bytes=1 << 18)
    tuned = BrokerConnection(host, port, receive_buffer_bytes=-1)
    try:
        fixed.connect()
        tuned.connect()
        assert fixed._sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) == 2 << 18
        with open("/proc/sys/net/ipv4/tcp_rmem") as f:
            default = int(f.read().split()[1])
        assert tuned._sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) == default
    finally:
        fixed.close()
        tuned.close()


def test_bad_buffer_settings_are_refused():
    with pytest.raises(ConfigError, match="socket_send_buffer_bytes"):
        BrokerConfig(socket_send_buffer_bytes=0)
    from broker.coordination.named_cluster import NamedCluster
    with pytest.raises(ValueError, match="socket_receive_buffer_bytes"):
        MirrorConfig(sources=(NamedCluster("a", "127.0.0.1:1/a"),),
                     target=NamedCluster("b", "127.0.0.1:1/b"), socket_receive_buffer_bytes=-5)
