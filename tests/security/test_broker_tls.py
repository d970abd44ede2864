"""The broker's TLS listener (issue 30, point 1) with real broker processes:
beside the plaintext port (a migration runs both), the same data produced and
consumed through either, fetches on TLS encrypted in user space (counted
apart from sendfile's bytes); the ways in that must fail (plaintext to the
TLS port, an untrusted certificate, an expired one, a wrong host name, no
client certificate where one is required); a certificate renewed in place
taken by the next connection; a client that never finishes its handshake
closed after the limit."""
from __future__ import annotations

import datetime as dt
import os
import socket
import time

import pytest
from cryptography import x509

from broker.client.connection import BrokerConnection, BrokerConnectionError, parse_address
from broker.client.consumer import Consumer
from broker.client.producer import Producer
from broker.protocol import api
from broker.protocol.api import Acks
from broker.security.ca import CertificateAuthority
from broker.security.tls import TlsSettings, client_context
from broker_helpers import (closed_by_peer, fetch, message_set, metric, produce,
                            read_partition, rss_mb, scrape_metrics)


@pytest.fixture
def pki(tmp_path):
    ca = CertificateAuthority.create(str(tmp_path / "ca"))
    cert, key = ca.issue("broker-0", ["localhost", "127.0.0.1"], str(tmp_path / "certs"))
    return ca, cert, key, tmp_path


def tls_broker(broker_factory, cert, key, **settings):
    return broker_factory({"tls_port": 0, "tls_cert_file": cert, "tls_key_file": key,
                           **settings}, metrics_port=0)


def serial_of(conn: BrokerConnection) -> int:
    return x509.load_der_x509_certificate(conn._sock.getpeercert(binary_form=True)).serial_number


def test_plaintext_and_tls_side_by_side_serve_the_same_data(pki, broker_factory, topic):
    ca, cert, key, _ = pki
    broker = tls_broker(broker_factory, cert, key)
    tls = {"tls": True, "tls_ca_file": ca.cert_path}
    with Producer(bootstrap=broker.tls_address, acks="flushed", batch_size=50, **tls) as p:
        for i in range(500):
            p.send(topic, b"over-tls-%d" % i, partition=0)
        p.flush(timeout=30)
        assert p.failed_batches == 0
    with Producer(bootstrap=broker.address, acks="flushed") as p:
        for i in range(500):
            p.send(topic, b"in-clear-%d" % i, partition=0)
        p.flush(timeout=30)
    expected = [b"over-tls-%d" % i for i in range(500)] + [b"in-clear-%d" % i for i in range(500)]
    before = scrape_metrics(broker.metrics_port)
    for bootstrap, extra in ((broker.tls_address, tls), (broker.address, {})):
        with Consumer(bootstrap=bootstrap, **extra) as consumer:
            consumer.assign([(topic, 0)], start="earliest")
            got = []
            deadline = time.monotonic() + 30
            while len(got) < len(expected) and time.monotonic() < deadline:
                got += [m.value for m in consumer.poll(500)]
            assert got == expected, bootstrap
    after = scrape_metrics(broker.metrics_port)
    tls_bytes = metric(after, "samsa_tls_fetch_bytes_total") - \
        metric(before, "samsa_tls_fetch_bytes_total")
    sendfile_bytes = metric(after, "samsa_sendfile_bytes_total") - \
        metric(before, "samsa_sendfile_bytes_total")
    # each listener sent the log once: TLS through user space, plaintext by sendfile
    assert tls_bytes > 0 and sendfile_bytes > 0
    assert abs(tls_bytes - sendfile_bytes) <= 4096, (tls_bytes, sendfile_bytes)


def test_what_must_not_get_in_does_not(pki, broker_factory, topic, tmp_path):
    ca, cert, key, _ = pki
    broker = tls_broker(broker_factory, cert, key)
    trusting = client_context(TlsSettings(ca_file=ca.cert_path))
    _host, port = parse_address(broker.tls_address)
    # plaintext to the TLS port: no answer, the connection is closed
    with BrokerConnection("127.0.0.1", port, request_timeout=5) as plain:
        with pytest.raises(BrokerConnectionError):
            produce(plain, topic, 0, message_set([b"sneaked"]), Acks.WRITTEN)
    # a broker certificate of an authority the client does not trust
    stranger = CertificateAuthority.create(str(tmp_path / "stranger"), name="someone else")
    with pytest.raises(BrokerConnectionError, match="not trusted"):
        BrokerConnection("127.0.0.1", port, tls=client_context(
            TlsSettings(ca_file=stranger.cert_path))).connect()
    # the name asked for is checked: localhost is on the certificate...
    with BrokerConnection("localhost", port, tls=trusting) as by_name:
        by_name.connect()
    # ...127.0.0.1 is not on this one
    renamed, rkey = ca.issue("elsewhere", ["broker.example"], str(tmp_path / "other"))
    other = tls_broker(broker_factory, renamed, rkey)
    with pytest.raises(BrokerConnectionError, match="mismatch"):
        BrokerConnection(*parse_address(other.tls_address), tls=trusting).connect()
    # an expired certificate
    now = dt.datetime.now(dt.timezone.utc)
    old, okey = ca.issue("old", ["127.0.0.1"], str(tmp_path / "old"),
                         not_before=now - dt.timedelta(days=30),
                         not_after=now - dt.timedelta(days=1))
    expired = tls_broker(broker_factory, old, okey)
    with pytest.raises(BrokerConnectionError, match="expired"):
        BrokerConnection(*parse_address(expired.tls_address), tls=trusting).connect()
    # none of it reached the broker: the topic was never made
    with BrokerConnection(*parse_address(broker.address)) as conn:
        assert topic not in {t.name for t in conn.request(api.MetadataRequest(())).topics}


def test_a_required_client_certificate(pki, broker_factory, topic, tmp_path):
    ca, cert, key, _ = pki
    broker = tls_broker(broker_factory, cert, key, tls_ca_file=ca.cert_path,
                        tls_client_auth="required")
    mine, mykey = ca.issue("mirror", [], str(tmp_path / "clients"), organization="samsa")
    with Producer(bootstrap=broker.tls_address, acks="flushed", tls=True,
                  tls_ca_file=ca.cert_path, tls_cert_file=mine, tls_key_file=mykey) as p:
        p.send(topic, b"with-a-certificate", partition=0)
        p.flush(timeout=30)
        assert p.failed_batches == 0
    conn = BrokerConnection(*parse_address(broker.tls_address), request_timeout=5,
                            tls=client_context(TlsSettings(ca_file=ca.cert_path)))
    with pytest.raises(BrokerConnectionError):
        conn.connect()
        # TLS 1.3: the server's refusal arrives with the first answer
        produce(conn, topic, 0, message_set([b"without"]), Acks.WRITTEN)
    conn.close()
    # a client certificate of an authority the broker does not trust
    stranger = CertificateAuthority.create(str(tmp_path / "stranger"), name="someone else")
    theirs, theirkey = stranger.issue("mirror", [], str(tmp_path / "stranger-certs"),
                                      organization="samsa")
    conn = BrokerConnection(*parse_address(broker.tls_address), request_timeout=5,
                            tls=client_context(TlsSettings(theirs, theirkey, ca.cert_path)))
    with pytest.raises(BrokerConnectionError):
        conn.connect()
        produce(conn, topic, 0, message_set([b"from a stranger"]), Acks.WRITTEN)
    conn.close()
    with BrokerConnection(*parse_address(broker.address)) as plain:
        assert [m.value for m in read_partition(plain, topic, 0)] == [b"with-a-certificate"]


def test_a_renewed_certificate_is_taken_without_a_restart(pki, broker_factory):
    ca, cert, key, tmp_path = pki
    broker = tls_broker(broker_factory, cert, key)
    pid = broker.proc.pid

    def serial() -> int:
        conn = BrokerConnection(*parse_address(broker.tls_address),
                                tls=client_context(TlsSettings(ca_file=ca.cert_path)))
        conn.connect()
        try:
            return serial_of(conn)
        finally:
            conn.close()
    first = serial()
    ca.issue("broker-0", ["localhost", "127.0.0.1"], str(tmp_path / "certs"))   # in place
    deadline = time.monotonic() + 10        # the broker looks at its files once a second
    while serial() == first and time.monotonic() < deadline:
        time.sleep(0.2)
    assert serial() != first and broker.proc.pid == pid


def test_a_client_that_never_finishes_its_handshake_is_closed(pki, broker_factory):
    ca, cert, key, _ = pki
    broker = tls_broker(broker_factory, cert, key)
    host, port = parse_address(broker.tls_address)
    with socket.create_connection((host, port), timeout=5) as sock:
        sock.sendall(b"\x16\x03\x01")           # the start of a ClientHello, and no more
        assert closed_by_peer(sock, timeout=20)


def test_a_client_that_reads_slowly_costs_the_broker_little(pki, broker_factory, topic):
    # A fetch of 64 MiB on the TLS port, not read: the broker reads and
    # encrypts 64 KiB at a time and stops at 1 MiB unsent, so its resident
    # size does not grow by the fetch's size; read at last, every byte is there.
    ca, cert, key, _ = pki
    broker = tls_broker(broker_factory, cert, key)
    value = os.urandom(1000)
    with BrokerConnection(*parse_address(broker.address)) as conn:
        for _ in range(48):
            assert produce(conn, topic, 0, message_set([value] * 1000), Acks.FLUSHED).error == 0
        end = fetch(conn, topic, 0, 0, max_bytes=0).high_watermark
    assert end > 40 << 20
    before = rss_mb(broker.proc.pid)
    conn = BrokerConnection(*parse_address(broker.tls_address), request_timeout=60,
                            receive_buffer_bytes=64 << 10,
                            tls=client_context(TlsSettings(ca_file=ca.cert_path)))
    conn.connect()
    try:
        conn.send(api.FetchRequest(0, 1, (api.FetchEntry(topic, 0, 0, 64 << 20),)))
        time.sleep(2)                       # the broker writes what the socket takes, then waits
        grown = rss_mb(broker.proc.pid) - before
        _cid, response = conn.receive()
    finally:
        conn.close()
    assert grown < 16, f"the broker grew by {grown:.0f} MB for one unread fetch"
    assert len(response.results[0].message_set) == end


def test_metadata_names_the_port_of_the_listener_asked(pki, broker_factory):
    """Guard: a client of the TLS listener was told the plaintext port in
    Metadata (a client following it would have left TLS)."""
    ca, cert, key, _ = pki
    broker = tls_broker(broker_factory, cert, key)
    host, tls_port = parse_address(broker.tls_address)
    context = client_context(TlsSettings(ca_file=ca.cert_path))
    with BrokerConnection(host, tls_port, "tests", request_timeout=10, tls=context) as conn:
        assert conn.request(api.MetadataRequest(())).port == tls_port
    host, port = parse_address(broker.address)
    with BrokerConnection(host, port, "tests", request_timeout=10) as conn:
        assert conn.request(api.MetadataRequest(())).port == port
