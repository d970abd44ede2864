"""An outside client, written from docs/protocol.md alone (sections 2-4, 6.1,
6.9 and 7), authenticates with SCRAM-SHA-512 and produces (issue 30's "done
when"): plain sockets, struct, hashlib and hmac; nothing of the project's
codec or SCRAM code. If the document and the broker ever part, this fails."""
from __future__ import annotations

import base64
import hashlib
import hmac
import os
import socket
import struct
import zlib

from broker.protocol.scram import ScramCredential
from broker.security import store

PASSWORD = "outside-secret"


def string(s: str) -> bytes:                       # section 3: int16 length + UTF-8
    raw = s.encode()
    return struct.pack(">h", len(raw)) + raw


def request(api_key: int, correlation_id: int, body: bytes) -> bytes:
    # section 4: api_key int16, api_version int16 (0), correlation_id int32, client_id
    payload = struct.pack(">hhi", api_key, 0, correlation_id) + string("outside") + body
    return struct.pack(">i", len(payload)) + payload  # section 2: int32 size prefix


def response(sock: socket.socket) -> tuple[int, int, str, bytes]:
    def exactly(n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = sock.recv(n - len(data))
            assert chunk, "the broker closed the connection"
            data += chunk
        return data
    (size,) = struct.unpack(">i", exactly(4))
    payload = exactly(size)
    correlation_id, error, message_length = struct.unpack_from(">ihh", payload)
    pos = 8
    message = ""
    if message_length >= 0:
        message = payload[pos:pos + message_length].decode()
        pos += message_length
    return correlation_id, error, message, payload[pos:]


def sasl_bytes(body: bytes) -> bytes:              # bytes: int32 length + data
    (n,) = struct.unpack_from(">i", body)
    return body[4:4 + n]


def hmac512(key: bytes, data: bytes) -> bytes:
    return hmac.new(key, data, hashlib.sha512).digest()


def test_a_client_written_from_the_docs_authenticates_and_produces(
        broker_factory, zookeeper, zk_client, zk_chroot):
    store.set_user(zk_client, "outsider", ScramCredential.from_password(PASSWORD))
    broker = broker_factory({"zookeeper": zookeeper.connect_string() + zk_chroot,
                             "authentication": "scram"})
    host, port = broker.address.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=10)

    # 1. SaslHandshake (api_key 8): mechanism:string
    sock.sendall(request(8, 1, string("SCRAM-SHA-512")))
    _cid, error, _msg, body = response(sock)
    assert error == 0
    (count,) = struct.unpack_from(">i", body)
    assert count >= 1 and b"SCRAM-SHA-512" in body

    # 2. SaslAuthenticate (api_key 9) with client-first: n,,n=<user>,r=<nonce>
    nonce = base64.b64encode(os.urandom(18)).decode()
    client_first_bare = f"n=outsider,r={nonce}"
    first = ("n,," + client_first_bare).encode()
    sock.sendall(request(9, 2, struct.pack(">i", len(first)) + first))
    _cid, error, _msg, body = response(sock)
    assert error == 0
    server_first = sasl_bytes(body).decode()
    fields = dict(part.split("=", 1) for part in server_first.split(","))
    assert fields["r"].startswith(nonce)
    salt, iterations = base64.b64decode(fields["s"]), int(fields["i"])

    # 3. client-final: c=biws,r=<combined>,p=<proof> (the formulas of 6.9)
    salted = hashlib.pbkdf2_hmac("sha512", PASSWORD.encode(), salt, iterations)
    client_key = hmac512(salted, b"Client Key")
    stored_key = hashlib.sha512(client_key).digest()
    without_proof = f"c=biws,r={fields['r']}"
    auth_message = f"{client_first_bare},{server_first},{without_proof}".encode()
    proof = bytes(a ^ b for a, b in zip(client_key, hmac512(stored_key, auth_message)))
    final = f"{without_proof},p={base64.b64encode(proof).decode()}".encode()
    sock.sendall(request(9, 3, struct.pack(">i", len(final)) + final))
    _cid, error, message, body = response(sock)
    assert error == 0, message
    server_final = sasl_bytes(body).decode()
    expected = hmac512(hmac512(salted, b"Server Key"), auth_message)
    assert server_final == "v=" + base64.b64encode(expected).decode()

    # 4. Produce (api_key 0), acks = 2 (flushed), one message (section 7.1):
    # length crc | magic attributes timestamp key_length(-1) value; the CRC
    # covers magic to the end of the value, length counts what follows it
    value = b"from outside"
    covered = struct.pack(">bbqi", 0, 0, 1_700_000_000_000, -1) + value
    message = struct.pack(">iI", 4 + len(covered), zlib.crc32(covered)) + covered
    body = struct.pack(">bii", 2, 10_000, 1) + string("outside-topic") \
        + struct.pack(">ii", 0, len(message)) + message
    sock.sendall(request(0, 4, body))
    _cid, error, message_text, body = response(sock)
    assert error == 0, message_text
    (results,) = struct.unpack_from(">i", body)
    assert results == 1
    sock.close()
