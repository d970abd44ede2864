"""SASL/SCRAM-SHA-512 on the wire (issue 30, points 2 and 7) with real broker
processes and a real ZooKeeper holding the users: a client with the right
password authenticates and produces; the ways in that must fail (no
credentials, a wrong password, an unknown user, a replayed exchange, a
request before the handshake, an oversized frame, a connection that never
authenticates) fail with "authentication failed" and nothing more, are
counted, and leave the log unchanged; a flood of malformed handshakes leaves
the broker serving others with its memory bounded."""
from __future__ import annotations

import json
import os
import random
import socket
import struct
import time

import pytest

from broker.client.authentication import SaslLogin, authenticate
from broker.client.connection import BrokerConnection, BrokerConnectionError, parse_address
from broker.client.consumer import Consumer
from broker.client.producer import Producer
from broker.protocol import api
from broker.protocol.api import Acks, ApiKey
from broker.protocol.errors import ErrorCode, SamsaError
from broker.protocol.scram import MECHANISM, ScramClient, ScramCredential
from broker.coordination import paths
from broker.security import store
from cluster_helpers import chroot_client
from broker_helpers import (scram_connection, closed_by_peer, log_text, message_set, metric, raw_socket,
                            read_frame, request_frame, rss_mb, scrape_metrics, wait_until)

PASSWORD = "correct horse battery staple"


@pytest.fixture
def secured(broker_factory, zookeeper, zk_client, zk_chroot):
    """A broker whose plaintext port asks for SCRAM, its users in ZooKeeper:
    ``alice`` (PASSWORD); returns (broker, zk client)."""
    store.set_user(zk_client, "alice", ScramCredential.from_password(PASSWORD))
    broker = broker_factory({"zookeeper": zookeeper.connect_string() + zk_chroot,
                             "authentication": "scram", "authentication_timeout_ms": 1500},
                            metrics_port=0)
    return broker, zk_client


def login_connection(broker, user="alice", password=PASSWORD) -> BrokerConnection:
    return scram_connection(broker.address, user, password)


def plain_connection(broker) -> BrokerConnection:
    host, port = parse_address(broker.address)
    conn = BrokerConnection(host, port, "tests", request_timeout=10)
    conn.connect()
    return conn


def failures(broker) -> float:
    return metric(scrape_metrics(broker.metrics_port), "samsa_authentications_total",
                  mechanism=MECHANISM, result="failed") or 0


def test_a_user_with_the_right_password_produces_and_consumes(secured, topic):
    broker, _zk = secured
    login = {"sasl_username": "alice", "sasl_password": PASSWORD}
    with Producer(bootstrap=broker.address, acks="flushed", batch_size=20, **login) as p:
        for i in range(200):
            p.send(topic, b"secret-%d" % i, partition=0)
        p.flush(timeout=30)
        assert p.failed_batches == 0
    with Consumer(bootstrap=broker.address, **login) as consumer:
        consumer.assign([(topic, 0)], start="earliest")
        got = []
        deadline = time.monotonic() + 30
        while len(got) < 200 and time.monotonic() < deadline:
            got += [m.value for m in consumer.poll(500)]
    assert got == [b"secret-%d" % i for i in range(200)]
    samples = scrape_metrics(broker.metrics_port)
    assert metric(samples, "samsa_authentications_total", mechanism=MECHANISM,
                  result="ok") >= 2      # the producer, the consumer
    assert "authenticated as User:alice" in log_text(broker.log_path)


def test_what_must_not_authenticate_does_not(secured, topic, tmp_path):
    broker, zk = secured
    with login_connection(broker) as conn:          # the topic, with one message
        conn.request(api.ProduceRequest(Acks.FLUSHED, 10_000, (
            api.ProduceEntry(topic, 0, message_set([b"before"])),)))
        size_before = conn.request(api.MetadataRequest((topic,))).topics[0].partitions[0] \
            .size_bytes
    failed_before = failures(broker)

    # 1. no credentials: the first request is not the handshake
    conn = plain_connection(broker)
    with pytest.raises(SamsaError) as info:
        conn.request(api.ProduceRequest(Acks.WRITTEN, 10_000, (
            api.ProduceEntry(topic, 0, message_set([b"anonymous"])),)))
    assert info.value.code == ErrorCode.ILLEGAL_SASL_STATE
    with pytest.raises(BrokerConnectionError):      # and the connection is closed
        conn.request(api.MetadataRequest(()))
    # 2. a wrong password, 3. an unknown user: the same words, nothing more
    for user, password in (("alice", "wrong"), ("mallory", PASSWORD)):
        with pytest.raises(SamsaError) as info:
            login_connection(broker, user, password)
        assert info.value.code == ErrorCode.SASL_AUTHENTICATION_FAILED
        assert info.value.message == "authentication failed"
    # 4. a replayed exchange: client-final of a successful exchange, sent on
    # a new connection after its own client-first, fails (fresh server nonce)
    recorded = record_exchange(broker)
    conn = plain_connection(broker)
    conn.request(api.SaslHandshakeRequest(MECHANISM))
    conn.request(api.SaslAuthenticateRequest(recorded["client_first"]))
    with pytest.raises(SamsaError) as info:
        conn.request(api.SaslAuthenticateRequest(recorded["client_final"]))
    assert (info.value.code, info.value.message) == \
        (ErrorCode.SASL_AUTHENTICATION_FAILED, "authentication failed")
    # 5. another mechanism: refused, the ones taken named
    conn = plain_connection(broker)
    with pytest.raises(SamsaError) as info:
        conn.request(api.SaslHandshakeRequest("PLAIN"))
    assert info.value.code == ErrorCode.UNSUPPORTED_SASL_MECHANISM
    assert MECHANISM in info.value.message
    conn.close()

    assert failures(broker) >= failed_before + 4
    text = log_text(broker.log_path)
    assert "wrong password" in text and "'mallory' is unknown" in text
    assert "a replayed message?" in text
    with login_connection(broker) as conn:          # nothing of theirs was appended
        assert conn.request(api.MetadataRequest((topic,))).topics[0].partitions[0] \
            .size_bytes == size_before


def record_exchange(broker) -> dict:
    """A successful exchange's messages, as a listener on the wire sees them."""
    conn = plain_connection(broker)
    try:
        conn.request(api.SaslHandshakeRequest(MECHANISM))
        client = ScramClient("alice", PASSWORD)
        first = client.first()
        server_first = conn.request(api.SaslAuthenticateRequest(first)).auth_bytes
        final = client.final(server_first)
        client.verify(conn.request(api.SaslAuthenticateRequest(final)).auth_bytes)
        return {"client_first": first, "client_final": final}
    finally:
        conn.close()


def test_before_authentication_frames_are_small_and_time_is_short(secured, topic):
    broker, _zk = secured
    # a size prefix over the cap closes the connection before its bytes are read
    sock = raw_socket(broker.address)
    sock.sendall(struct.pack(">i", 64 << 10) + b"\x00" * 100)
    assert closed_by_peer(sock)
    sock.close()
    # a connection that never authenticates is closed after the time limit
    # (authentication_timeout_ms = 1500 here)
    sock = raw_socket(broker.address)
    opened = time.monotonic()
    assert closed_by_peer(sock, timeout=10)
    assert 1.0 < time.monotonic() - opened < 8
    sock.close()
    # a handshake begun and not finished: closed all the same
    sock = raw_socket(broker.address)
    sock.sendall(request_frame(ApiKey.SASL_HANDSHAKE, 1, api.enc_string(MECHANISM)))
    read_frame(sock)
    assert closed_by_peer(sock, timeout=10)
    sock.close()
    samples = scrape_metrics(broker.metrics_port)
    assert metric(samples, "samsa_authentications_total", mechanism=MECHANISM,
                  result="timeout") >= 2
    # requests pipelined right behind the last authentication message are served
    host, port = parse_address(broker.address)
    sock = socket.create_connection((host, port), timeout=10)
    client = ScramClient("alice", PASSWORD)
    sock.sendall(api.encode_request(api.SaslHandshakeRequest(MECHANISM), 1, "raw")
                 + api.encode_request(api.SaslAuthenticateRequest(client.first()), 2, "raw"))
    read_frame(sock)
    _cid, server_first = api.decode_response(ApiKey.SASL_AUTHENTICATE, read_frame(sock))
    sock.sendall(api.encode_request(api.SaslAuthenticateRequest(
        client.final(server_first.auth_bytes)), 3, "raw")
        + api.encode_request(api.MetadataRequest(()), 4, "raw"))
    _cid, server_final = api.decode_response(ApiKey.SASL_AUTHENTICATE, read_frame(sock))
    client.verify(server_final.auth_bytes)
    cid, metadata = api.decode_response(ApiKey.METADATA, read_frame(sock))
    assert cid == 4 and isinstance(metadata, api.MetadataResponse)
    # a second handshake on an authenticated connection: refused, still open
    sock.sendall(api.encode_request(api.SaslHandshakeRequest(MECHANISM), 5, "raw"))
    _cid, again = api.decode_response(ApiKey.SASL_HANDSHAKE, read_frame(sock))
    assert again.error == ErrorCode.ILLEGAL_SASL_STATE
    sock.close()


def fuzz_frames(rng: random.Random):
    """Malformed and oversized things a stranger sends before authenticating."""
    client_first = ScramClient("alice", PASSWORD).first()
    choices = [
        lambda: struct.pack(">i", rng.randrange(4097, 1 << 30)) + rng.randbytes(64),
        lambda: struct.pack(">i", rng.randrange(-1 << 31, 0)),
        lambda: rng.randbytes(rng.randrange(1, 600)),
        lambda: request_frame(ApiKey.SASL_AUTHENTICATE, 1, api.enc_bytes(rng.randbytes(300))),
        lambda: request_frame(ApiKey.SASL_HANDSHAKE, 1, api.enc_string(MECHANISM))
        + request_frame(ApiKey.SASL_AUTHENTICATE, 2, api.enc_bytes(rng.randbytes(
            rng.randrange(0, 2000)))),
        lambda: request_frame(ApiKey.SASL_HANDSHAKE, 1, api.enc_string(MECHANISM))
        + request_frame(ApiKey.SASL_AUTHENTICATE, 2, api.enc_bytes(client_first))
        + request_frame(ApiKey.SASL_AUTHENTICATE, 3, api.enc_bytes(
            b"c=biws,r=" + rng.randbytes(40) + b",p=" + rng.randbytes(88))),
        lambda: request_frame(ApiKey.PRODUCE, 1, rng.randbytes(200)),
        lambda: request_frame(ApiKey.SASL_HANDSHAKE, 1, rng.randbytes(rng.randrange(0, 50))),
        lambda: request_frame(rng.randrange(-5, 40), rng.randrange(1 << 30),
                              rng.randbytes(rng.randrange(0, 3000))),
    ]
    return lambda: rng.choice(choices)()


def test_a_flood_of_malformed_handshakes(secured, topic):
    """Point 7's fuzz: 3,000 connections of malformed or oversized frames
    before authentication; an authenticated client is served throughout,
    the broker's memory stays within 40 MB of where it began."""
    broker, _zk = secured
    with login_connection(broker) as conn:          # warm up
        conn.request(api.MetadataRequest(()))
    rss_before = rss_mb(broker.proc.pid)
    rng = random.Random(30)
    next_frame = fuzz_frames(rng)
    good = login_connection(broker)
    produced = 0
    host, port = parse_address(broker.address)
    for i in range(3000):
        try:
            sock = socket.create_connection((host, port), timeout=5)
            sock.sendall(next_frame())
            sock.close()
        except OSError:
            pass                                    # the broker closed it first: fine
        if i % 100 == 0:
            result = good.request(api.ProduceRequest(Acks.WRITTEN, 10_000, (
                api.ProduceEntry(topic, 0, message_set([b"good-%d" % i])),))).results[0]
            assert result.error == 0, result.message
            produced += 1
    good.close()
    assert produced == 30
    rss_after = rss_mb(broker.proc.pid)
    assert rss_after - rss_before < 40, (rss_before, rss_after)
    # and still takes new clients, once it has seen the flood's connections
    # close (until then, 100 from this address may still count as
    # authenticating: max_unauthenticated_connections_per_address refuses more)
    def new_client_served() -> bool:
        try:
            with login_connection(broker) as conn:
                return conn.request(api.MetadataRequest((topic,))).topics[0].error == 0
        except BrokerConnectionError:
            return False
    wait_until(new_client_served, 20, interval=0.2, what="a new client to be served")
    assert failures(broker) > 100


def test_the_cluster_producer_and_a_group_consumer_authenticate(secured, zookeeper, zk_chroot,
                                                               topic, tmp_path):
    """Clients that find the brokers in ZooKeeper (the registered plaintext
    port) authenticate there too, the password from a file."""
    from broker.client.cluster_producer import ClusterProducer
    from broker.client.group_consumer import GroupConsumer, GroupConsumerConfig
    broker, zk = secured
    password_file = tmp_path / "alice.pw"
    password_file.write_text(PASSWORD + "\n")
    connect = zookeeper.connect_string() + zk_chroot
    # the cluster producer finds brokers in ZooKeeper: once this one is there
    wait_until(lambda: zk.exists(paths.broker_id_path(0)), 20,
               what="the broker to register in ZooKeeper")
    login = {"sasl_username": "alice", "sasl_password_file": str(password_file)}
    with ClusterProducer(connect, acks="flushed", **login) as producer:
        for i in range(50):
            producer.send(topic, b"grouped-%d" % i)
        producer.flush(timeout=30)
    with GroupConsumer(GroupConsumerConfig(connect, "secured-group", topics=(topic,),
                                           **login)) as consumer:
        got = []
        deadline = time.monotonic() + 30
        while len(got) < 50 and time.monotonic() < deadline:
            got += [m.value for m in consumer.poll(500)]
    assert sorted(got) == sorted(b"grouped-%d" % i for i in range(50))
    # without the password, the group consumer's fetchers are refused
    wrong = tmp_path / "wrong.pw"
    wrong.write_text("not it\n")
    failed_before = failures(broker)
    with GroupConsumer(GroupConsumerConfig(connect, "stranger-group", topics=(topic,),
                                           sasl_username="alice",
                                           sasl_password_file=str(wrong))) as consumer:
        with pytest.raises(SamsaError) as info:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                assert not consumer.poll(500), "a stranger read messages"
        assert info.value.code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert failures(broker) > failed_before


def server_first_of(broker, user: str) -> dict:
    """The salt and iteration count a broker answers ``user``'s client-first with."""
    conn = plain_connection(broker)
    try:
        conn.request(api.SaslHandshakeRequest(MECHANISM))
        answer = conn.request(api.SaslAuthenticateRequest(
            ScramClient(user, "whatever").first())).auth_bytes.decode()
    finally:
        conn.close()
    fields = dict(part.split("=", 1) for part in answer.split(","))
    return {"s": fields["s"], "i": fields["i"]}


def test_the_answers_do_not_tell_which_users_exist(secured, broker_factory, zookeeper,
                                                   zk_chroot):
    """An unknown user's salt is the same on every broker of the cluster and
    after a restart (derived from the cluster's secret), as a real one's
    is; the iteration count is the default for both."""
    broker, _zk = secured
    other = broker_factory({"zookeeper": zookeeper.connect_string() + zk_chroot,
                            "authentication": "scram"}, broker_id=1)
    for user in ("alice", "mallory"):
        answers = [server_first_of(b, user) for b in (broker, other, broker)]
        assert answers[0] == answers[1] == answers[2], (user, answers)
        assert answers[0]["i"] == "8192"
    assert server_first_of(broker, "mallory")["s"] != server_first_of(broker, "bob")["s"]


def test_a_produce_behind_a_failed_exchange_is_not_appended(secured, topic):
    broker, _zk = secured
    with login_connection(broker) as conn:
        conn.request(api.CreateTopicRequest(topic, 1))
    host, port = parse_address(broker.address)
    sock = socket.create_connection((host, port), timeout=10)
    client = ScramClient("alice", "not the password")
    sock.sendall(api.encode_request(api.SaslHandshakeRequest(MECHANISM), 1, "raw")
                 + api.encode_request(api.SaslAuthenticateRequest(client.first()), 2, "raw"))
    read_frame(sock)
    _cid, server_first = api.decode_response(ApiKey.SASL_AUTHENTICATE, read_frame(sock))
    produce_frame = api.encode_request(api.ProduceRequest(Acks.WRITTEN, 10_000, (
        api.ProduceEntry(topic, 0, message_set([b"smuggled"])),)), 4, "raw")
    sock.sendall(api.encode_request(api.SaslAuthenticateRequest(
        client.final(server_first.auth_bytes)), 3, "raw") + produce_frame)
    _cid, refused = api.decode_response(ApiKey.SASL_AUTHENTICATE, read_frame(sock))
    assert refused.error == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert closed_by_peer(sock)
    sock.close()
    with login_connection(broker) as conn:
        info = conn.request(api.MetadataRequest((topic,))).topics[0]
        assert [p.size_bytes for p in info.partitions] == [0]


def test_the_frame_cap_is_4096_bytes_and_strangers_are_counted(broker_factory, zookeeper,
                                                               zk_client, zk_chroot):
    store.set_user(zk_client, "alice", ScramCredential.from_password(PASSWORD))
    broker = broker_factory({"zookeeper": zookeeper.connect_string() + zk_chroot,
                             "authentication": "scram", "max_unauthenticated_connections": 5},
                            metrics_port=0)
    # exactly 4,096 bytes is read (and refused as not a handshake: ILLEGAL_SASL_STATE) ...
    sock = raw_socket(broker.address)
    body = b"\x00" * (4096 - 8 - 2 - 3)       # the header: 8 bytes + client_id "raw"
    frame = request_frame(ApiKey.METADATA, 9, body, client_id="raw")
    assert len(frame) == 4 + 4096
    sock.sendall(frame)
    cid, code = struct.unpack_from(">ih", read_frame(sock))
    assert (cid, code) == (9, ErrorCode.ILLEGAL_SASL_STATE)
    sock.close()
    # ... one byte more closes the connection unread
    sock = raw_socket(broker.address)
    sock.sendall(struct.pack(">i", 4097) + b"\x00" * 4097)
    assert closed_by_peer(sock)
    sock.close()
    # five strangers in the exchange hold their places; a sixth is closed at
    # once; once they are gone, a user gets in
    strangers = [raw_socket(broker.address) for _ in range(5)]
    wait_until(lambda: metric(scrape_metrics(broker.metrics_port), "samsa_connections") >= 5,
               what="the five strangers to be connected")
    sixth = raw_socket(broker.address)
    assert closed_by_peer(sixth, timeout=5)
    sixth.close()
    for sock in strangers:
        sock.close()
    wait_until(lambda: _logs_in(broker), what="a user to get in once the strangers left")
    samples = scrape_metrics(broker.metrics_port)
    assert metric(samples, "samsa_authentications_total", mechanism=MECHANISM,
                  result="too_many") >= 1


def _logs_in(broker) -> bool:
    try:
        login_connection(broker).close()
        return True
    except (SamsaError, BrokerConnectionError):
        return False


def test_a_producer_with_a_wrong_password_fails_its_batches_with_the_refusal(secured, topic):
    broker, _zk = secured
    with Producer(bootstrap=broker.address, acks="flushed", sasl_username="alice",
                  sasl_password="not it", partitioner="any") as producer:
        future = producer.send(topic, b"refused", partition=0)
        with pytest.raises(SamsaError) as info:
            future.result(timeout=30)
        assert info.value.code == ErrorCode.SASL_AUTHENTICATION_FAILED
        assert producer.failed_batches >= 1


def test_the_console_tools_take_a_client_config(secured, topic, tmp_path):
    """produce, consume, topics and offsets with --client-config (Kafka's
    --command-config): SCRAM settings from a TOML file, the password from
    its own file; without it, refused."""
    from broker_helpers import run_module
    broker, _zk = secured
    password = tmp_path / "alice.pw"
    password.write_text(PASSWORD + "\n")
    config = tmp_path / "client.toml"
    config.write_text(f'sasl_username = "alice"\nsasl_password_file = "{password}"\n')
    common = ("--bootstrap", broker.address, "--client-config", str(config))
    made = run_module("broker.tools", "topics", "--create", topic, "--partitions", "1", *common)
    assert made.returncode == 0, made.stderr
    produced = run_module("broker.tools", "produce", "--topic", topic, "--acks", "flushed",
                          *common, stdin=b"one\ntwo\n")
    assert produced.returncode == 0, produced.stderr
    consumed = run_module("broker.tools", "consume", "--topic", topic, "--from-beginning",
                          "--timeout-ms", "2000", *common)
    assert consumed.returncode == 0, consumed.stderr
    assert consumed.stdout.split() == [b"one", b"two"]
    offsets = run_module("broker.tools", "offsets", "--topic", topic, "--time", "latest",
                         *common)
    assert offsets.returncode == 0, offsets.stderr
    refused = run_module("broker.tools", "topics", "--describe", topic, "--bootstrap",
                         broker.address)
    assert refused.returncode == 1 and b"ILLEGAL_SASL_STATE" in refused.stderr
    bad = tmp_path / "bad.toml"
    bad.write_text('sasl_username = "alice"\nsasl_pasword_file = "x"\n')
    wrong = run_module("broker.tools", "offsets", "--topic", topic, "--bootstrap",
                       broker.address, "--client-config", str(bad))
    assert wrong.returncode == 2 and b"sasl_pasword_file" in wrong.stderr


def test_the_groups_tool_takes_a_client_config(secured, zookeeper, zk_chroot, topic,
                                               tmp_path):
    """groups --describe, --status and --reset-offsets ask the brokers (log
    ends, offsets): with --client-config they authenticate; without, the
    broker's refusal is the error."""
    from broker.client.group_consumer import GroupConsumer, GroupConsumerConfig
    from broker_helpers import run_module
    broker, _zk = secured
    connect = zookeeper.connect_string() + zk_chroot
    password = tmp_path / "alice.pw"
    password.write_text(PASSWORD + "\n")
    config = tmp_path / "client.toml"
    config.write_text(f'sasl_username = "alice"\nsasl_password_file = "{password}"\n')
    with Producer(bootstrap=broker.address, acks="flushed", sasl_username="alice",
                  sasl_password=PASSWORD) as producer:
        for i in range(10):
            producer.send(topic, b"m-%d" % i, partition=0)
        producer.flush(timeout=30)
    got = []
    with GroupConsumer(GroupConsumerConfig(connect, "readers", topics=(topic,),
                                           sasl_username="alice",
                                           sasl_password=PASSWORD)) as consumer:
        wait_until(lambda: got.extend(consumer.poll(500)) or len(got) >= 10, 30,
                   what="the group to read 10 messages")
        consumer.commit()
    common = ("--zookeeper", connect, "--client-config", str(config))
    described = run_module("broker.tools", "groups", "--describe", "readers", "--json",
                           *common)
    assert described.returncode == 0, described.stderr
    rows = json.loads(described.stdout)["partitions"]
    [row] = [r for r in rows if r["broker_partition"] == "0-0"]   # the one written
    assert row["committed"] == row["log_end"] > 0 and row["lag_bytes"] == 0
    status = run_module("broker.tools", "groups", "--status", "readers", *common)
    assert status.returncode == 0, status.stderr
    reset = run_module("broker.tools", "groups", "--reset-offsets", "readers",
                       "--to", "earliest", *common)
    assert reset.returncode == 0, reset.stderr
    assert reset.stdout and all(line.split()[-1] == b"0"
                                for line in reset.stdout.splitlines())
    refused = run_module("broker.tools", "groups", "--describe", "readers",
                         "--zookeeper", connect)
    assert refused.returncode != 0 and b"ILLEGAL_SASL_STATE" in refused.stderr


def test_one_address_cannot_take_every_place_in_the_exchange(broker_factory, zookeeper,
                                                             zk_client, zk_chroot):
    """max_unauthenticated_connections_per_address: three strangers from
    127.0.0.1 hold their places, a fourth from there is closed at once and
    counted; a newcomer from 127.0.0.2 still gets a place."""
    store.set_user(zk_client, "alice", ScramCredential.from_password(PASSWORD))
    broker = broker_factory({"zookeeper": zookeeper.connect_string() + zk_chroot,
                             "authentication": "scram", "max_unauthenticated_connections": 10,
                             "max_unauthenticated_connections_per_address": 3},
                            metrics_port=0)
    host, port = parse_address(broker.address)

    def stranger(source: str) -> socket.socket:
        return socket.create_connection((host, port), timeout=5, source_address=(source, 0))

    held = [stranger("127.0.0.1") for _ in range(3)]
    wait_until(lambda: metric(scrape_metrics(broker.metrics_port), "samsa_connections") >= 3,
               what="the three strangers to be connected")
    other = stranger("127.0.0.2")
    wait_until(lambda: metric(scrape_metrics(broker.metrics_port), "samsa_connections") >= 4,
               what="the newcomer from another address to be connected")
    fourth = stranger("127.0.0.1")
    assert closed_by_peer(fourth, timeout=5)
    assert not closed_by_peer(other, timeout=0.5), "another address lost its place"
    for sock in (*held, other, fourth):
        sock.close()
    samples = scrape_metrics(broker.metrics_port)
    assert metric(samples, "samsa_authentications_total", mechanism=MECHANISM,
                  result="too_many_from_address") == 1
    assert not metric(samples, "samsa_authentications_total", mechanism=MECHANISM,
                      result="too_many")
    wait_until(lambda: _logs_in(broker), what="a user to get in once the strangers left")


def test_frames_behind_a_handshake_that_waits_for_the_users_are_replayed_in_order(
        broker_factory, tmp_path):
    """A broker started while ZooKeeper is down cannot tell its users yet:
    the handshake's answer waits, and what the client pipelined behind it
    (its first SCRAM message) is held, then handled in order once the users
    are read: the exchange completes and the connection serves requests."""
    from broker.harness.zookeeper import ZooKeeperEnsemble
    ensemble = ZooKeeperEnsemble(1, str(tmp_path / "zookeeper"))
    ensemble.start()
    try:
        zk = chroot_client(ensemble.connect_string("/held"))
        store.set_user(zk, "alice", ScramCredential.from_password(PASSWORD))
        zk.stop()
        zk.close()
        ensemble.stop()                              # its data stay for the restart
        broker = broker_factory({"zookeeper": ensemble.connect_string("/held"),
                                 "authentication": "scram",
                                 "authentication_timeout_ms": 60_000})
        sock = raw_socket(broker.address, timeout=30)
        scram = ScramClient("alice", PASSWORD)
        sock.sendall(api.encode_request(api.SaslHandshakeRequest(MECHANISM), 1, "raw")
                     + api.encode_request(api.SaslAuthenticateRequest(scram.first()), 2,
                                          "raw"))
        sock.settimeout(1.0)
        with pytest.raises(socket.timeout):          # no answer while the users are unknown
            sock.recv(1)
        ensemble.start()
        sock.settimeout(30)
        cid, handshake = api.decode_response(ApiKey.SASL_HANDSHAKE, read_frame(sock))
        assert cid == 1 and MECHANISM in handshake.mechanisms
        cid, first = api.decode_response(ApiKey.SASL_AUTHENTICATE, read_frame(sock))
        assert cid == 2, first
        sock.sendall(api.encode_request(
            api.SaslAuthenticateRequest(scram.final(first.auth_bytes)), 3, "raw"))
        cid, final = api.decode_response(ApiKey.SASL_AUTHENTICATE, read_frame(sock))
        assert cid == 3
        scram.verify(final.auth_bytes)               # the broker holds alice's credential
        sock.sendall(api.encode_request(api.MetadataRequest(()), 4, "raw"))
        cid, metadata = api.decode_response(ApiKey.METADATA, read_frame(sock))
        assert cid == 4 and metadata.broker_id == 0
        sock.close()
    finally:
        ensemble.stop()
