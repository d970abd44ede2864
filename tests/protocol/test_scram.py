"""SCRAM-SHA-512 (broker/protocol/scram.py), sans IO: the exchange between
our client and server, against an independent implementation (scramp) both
ways, and the ways in that must fail: a wrong password, an unknown user
(answered like a known one until the end), a replayed client-final, a server
that does not hold the credential, a downgrade of the iterations, and any
malformed message (only ScramError, whatever the bytes)."""
from __future__ import annotations

import base64

import pytest
import scramp
from hypothesis import given, settings, strategies as st

from broker.protocol.scram import (MIN_ITERATIONS, AuthenticationFailed, ScramClient,
                                   ScramCredential, ScramError, ScramServer)

SECRET = b"the server's own secret"
ITERATIONS = MIN_ITERATIONS          # the least: these tests run many exchanges


def credentials(**users: str) -> dict[str, ScramCredential]:
    return {user: ScramCredential.from_password(password, iterations=ITERATIONS)
            for user, password in users.items()}


def exchange(client: ScramClient, server: ScramServer) -> None:
    server_first = server.first(client.first())
    server_final = server.final(client.final(server_first))
    client.verify(server_final)


def test_a_client_with_the_password_is_authenticated_and_the_server_proves_itself():
    users = credentials(mirror="s3cret")
    server = ScramServer(users.get, SECRET)
    client = ScramClient("mirror", "s3cret")
    exchange(client, server)
    assert server.user == "mirror"


def test_a_wrong_password_fails_and_says_so_only_in_the_servers_words():
    server = ScramServer(credentials(mirror="s3cret").get, SECRET)
    client = ScramClient("mirror", "guess")
    server_first = server.first(client.first())
    with pytest.raises(AuthenticationFailed, match="wrong password"):
        server.final(client.final(server_first))
    assert server.user is None


def test_an_unknown_user_is_answered_like_a_known_one_until_the_end():
    users = credentials(mirror="s3cret")

    def first_of(user: str) -> dict[str, str]:
        server = ScramServer(users.get, SECRET, nonce="S" * 32)
        text = server.first(ScramClient(user, "x", nonce="C" * 32).first()).decode()
        return dict(part.split("=", 1) for part in text.split(","))
    known, unknown, again = first_of("mirror"), first_of("nobody"), first_of("nobody")
    assert unknown["i"] == str(ScramServer(users.get, SECRET)._fake_iterations)
    assert len(base64.b64decode(unknown["s"])) == len(base64.b64decode(known["s"]))
    assert unknown["s"] == again["s"]          # as stable as a stored salt
    server = ScramServer(users.get, SECRET)
    client = ScramClient("nobody", "x")
    with pytest.raises(AuthenticationFailed, match="unknown"):
        server.final(client.final(server.first(client.first())))


def test_a_replayed_client_final_fails_in_another_exchange():
    users = credentials(mirror="s3cret")
    client = ScramClient("mirror", "s3cret")
    first = client.first()
    recorded = client.final(ScramServer(users.get, SECRET).first(first))
    # an eavesdropper sends the same first message, then the recorded final
    replay = ScramServer(users.get, SECRET)
    replay.first(first)
    with pytest.raises(AuthenticationFailed, match="nonce"):
        replay.final(recorded)
    assert replay.user is None


def test_a_server_without_the_credential_cannot_fool_the_client():
    real = credentials(mirror="s3cret")
    impostor = {"mirror": ScramCredential(real["mirror"].salt, ITERATIONS,
                                          real["mirror"].stored_key, b"\0" * 64)}
    client = ScramClient("mirror", "s3cret")
    server = ScramServer(impostor.get, SECRET)
    server_final = server.final(client.final(server.first(client.first())))
    with pytest.raises(ScramError, match="signature"):
        client.verify(server_final)


@pytest.mark.parametrize("server_first, refusal", [
    ("r=abcdef,s={salt},i=1", "iterations"),          # a downgrade of the iterations
    ("r=xyz,s={salt},i=4096", "nonce"),               # not this client's nonce
])
def test_the_client_refuses_a_server_first_it_should_not_trust(server_first, refusal):
    client = ScramClient("mirror", "s3cret", nonce="abc")
    client.first()
    salt = base64.b64encode(b"s" * 32).decode()
    with pytest.raises(ScramError, match=refusal):
        client.final(server_first.format(salt=salt).encode())


@pytest.mark.parametrize("client_first", [
    b"n,,n=alice\n,r=abc",          # a user name ending in a newline
    b"n,,n=alice,r=abc\n",          # a nonce ending in one
    b"n,,n=,r=abc",                  # no user name
])
def test_names_and_nonces_with_control_characters_are_refused(client_first):
    server = ScramServer(credentials(alice="pw").get, SECRET)
    with pytest.raises(ScramError):
        server.first(client_first)


def test_messages_out_of_order_are_refused():
    server = ScramServer(credentials(a="b").get, SECRET)
    with pytest.raises(ScramError):
        server.final(b"c=biws,r=x,p=AAAA")
    client = ScramClient("a", "b")
    with pytest.raises(ScramError):
        client.verify(b"v=AAAA")


@given(st.text(min_size=1, max_size=40).filter(
    lambda s: all(ord(c) >= 0x20 and ord(c) != 0x7f for c in s)))
@settings(max_examples=25, deadline=None)
def test_any_printable_user_name_survives_the_escaping(user):
    users = {user: ScramCredential.from_password("pw", iterations=ITERATIONS)}
    server = ScramServer(users.get, SECRET)
    exchange(ScramClient(user, "pw"), server)
    assert server.user == user


@given(st.binary(min_size=16, max_size=128), st.integers(MIN_ITERATIONS, 1 << 20),
       st.binary(min_size=64, max_size=64), st.binary(min_size=64, max_size=64))
def test_a_credential_survives_its_text_form(salt, iterations, stored, server_key):
    credential = ScramCredential(salt, iterations, stored, server_key)
    assert ScramCredential.from_text(credential.to_text()) == credential


@given(st.binary(max_size=1200), st.binary(max_size=1200))
@settings(max_examples=300)
def test_malformed_messages_raise_scram_errors_only(first, final):
    server = ScramServer(credentials(a="b").get, SECRET)
    try:
        server.first(first)
        server.final(final)
    except ScramError:
        pass
    assert server.user is None


def test_an_independent_client_authenticates_to_our_server():
    users = credentials(loader="p@ss,word=")
    server = ScramServer(users.get, SECRET)
    client = scramp.ScramClient(["SCRAM-SHA-512"], "loader", "p@ss,word=")
    client.set_server_first(server.first(client.get_client_first().encode()).decode())
    server_final = server.final(client.get_client_final().encode())
    client.set_server_final(server_final.decode())        # raises if the signature is wrong
    assert server.user == "loader"


def test_our_client_authenticates_to_an_independent_server():
    mechanism = scramp.ScramMechanism("SCRAM-SHA-512")
    salt, stored_key, server_key, iterations = mechanism.make_auth_info(
        "p@ss,word=", iteration_count=ITERATIONS)
    server = mechanism.make_server(lambda _user: (salt, stored_key, server_key, iterations))
    client = ScramClient("loader", "p@ss,word=")
    server.set_client_first(client.first().decode())
    server.set_client_final(client.final(server.get_server_first().encode()).decode())
    client.verify(server.get_server_final().encode())
    # and the credential scramp stores is the one we compute from the password
    ours = ScramCredential.from_password("p@ss,word=", salt=salt, iterations=iterations)
    assert (ours.stored_key, ours.server_key) == (stored_key, server_key)
