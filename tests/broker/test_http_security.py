"""The HTTP services' gate (broker/service_kit/http_security.py) without a
server: the users file's text, passwords, roles, the memo's bound and the
file read again when it changes."""
from __future__ import annotations

import base64
import os

import pytest
from hypothesis import given, settings, strategies as st

from broker.service_kit import http_security as hs

FAST = 10_000


def basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def users_file(tmp_path):
    path = tmp_path / "users"
    hs.write_users_file(str(path), [
        hs.HttpUser("reader", "read", hs.hash_password("r-pw", FAST)),
        hs.HttpUser("admin", "admin", hs.hash_password("a-pw", FAST)),
        hs.HttpUser("CN=prometheus,O=samsa", "read", hs.CERTIFICATE)])
    return path


@settings(max_examples=10, deadline=None)
@given(st.text(min_size=1, max_size=40), st.text(min_size=1, max_size=40))
def test_a_password_matches_its_own_secret_only(password, other):
    secret = hs.hash_password(password, FAST)
    assert hs.password_matches(password, secret)
    assert hs.password_matches(other, secret) == (other == password)


@pytest.mark.parametrize("text, error", [
    ("alice read", "line 1: want NAME ROLE SECRET"),
    ("alice root certificate", "role 'root' is not one of read, admin"),
    ("alice read plaintext", "the secret is neither"),
    ("al:ice read " + hs.hash_password("x", FAST), "a password user's name has no ':'"),
    ("a read certificate\na admin certificate", "line 2: a is there twice"),
])
def test_a_malformed_users_file_says_which_line(text, error):
    with pytest.raises(ValueError, match=error.replace("(", r"\(")):
        hs.parse_users("# a comment\n\n" * 0 + text)


def test_names_with_spaces_are_certificate_subjects():
    users = hs.parse_users("CN=Samsa Prometheus,O=samsa read certificate\n# note\n")
    assert users["CN=Samsa Prometheus,O=samsa"].role == "read"


def test_the_file_is_private_and_what_it_writes_it_reads(users_file):
    assert os.stat(users_file).st_mode & 0o777 == 0o600
    assert set(hs.read_users_file(str(users_file))) == {"reader", "admin",
                                                        "CN=prometheus,O=samsa"}


def test_roles_decide_the_methods(users_file):
    gate = hs.HttpGate(hs.HttpSecurity(users_file=str(users_file)), "test")
    assert gate.decide("GET", "/x", basic("reader", "r-pw"), None, "a").status == 200
    assert gate.decide("GET", "/x", basic("reader", "r-pw"), None, "a").user == "reader"
    refused = gate.decide("POST", "/x", basic("reader", "r-pw"), None, "a")
    assert (refused.status, refused.message) == (403, "the role read may not POST here")
    assert gate.decide("DELETE", "/x", basic("admin", "a-pw"), None, "a").status == 200
    assert gate.decide("GET", "/x", basic("reader", "a-pw"), None, "a").status == 401
    assert gate.decide("GET", "/x", basic("nobody", "r-pw"), None, "a").message == \
        "authentication failed"
    assert gate.decide("GET", "/x", {}, None, "a").message == "authentication required"
    assert gate.decide("GET", "/x", {"Authorization": "Bearer abc"}, None, "a").status == 401
    assert gate.decide("GET", "/x", {"Authorization": "Basic ###"}, None, "a").status == 401
    # a certificate user has no password to give
    assert gate.decide("GET", "/x", basic("CN=prometheus,O=samsa", ""), None, "a").status == 401
    certificate = {"subject": ((("organizationName", "samsa"),), (("commonName", "prometheus"),))}
    assert gate.decide("GET", "/x", {}, certificate, "a").user == "CN=prometheus,O=samsa"
    assert gate.decide("GET", "/healthz", {}, None, "a").status == 200
    assert gate.counts == {"ok": 4, "failed": 4, "missing": 2, "forbidden": 1, "busy": 0}


def test_the_memo_of_good_passwords_is_bounded(users_file, monkeypatch):
    gate = hs.HttpGate(hs.HttpSecurity(users_file=str(users_file)), "test")
    checks = []
    real = hs.password_matches
    monkeypatch.setattr(hs, "password_matches", lambda p, s: checks.append(p) or real(p, s))
    for _ in range(3):
        assert gate.decide("GET", "/", basic("reader", "r-pw"), None, "a").status == 200
    assert checks == ["r-pw"]                     # hashed once, remembered
    monkeypatch.setattr(hs, "MEMO_SIZE", 2)
    for user, password in (("admin", "a-pw"), ("reader", "r-pw"), ("admin", "a-pw")):
        gate.decide("GET", "/", basic(user, password), None, "a")
    assert len(gate._memo) <= 2


def test_a_changed_file_is_read_again_and_a_broken_one_keeps_the_users(users_file):
    clock = Clock()
    gate = hs.HttpGate(hs.HttpSecurity(users_file=str(users_file)), "test", clock=clock)
    assert gate.decide("GET", "/", basic("reader", "r-pw"), None, "a").status == 200
    hs.write_users_file(str(users_file), [hs.HttpUser("admin", "admin",
                                                      hs.hash_password("new-pw", FAST))])
    # looked at once a second at most
    assert gate.decide("GET", "/", basic("reader", "r-pw"), None, "a").status == 200
    clock.now = 1.5
    assert gate.decide("GET", "/", basic("reader", "r-pw"), None, "a").status == 401
    assert gate.decide("GET", "/", basic("admin", "a-pw"), None, "a").status == 401
    assert gate.decide("GET", "/", basic("admin", "new-pw"), None, "a").status == 200
    users_file.write_text("admin admin nonsense\n")
    clock.now = 3.0
    assert gate.decide("GET", "/", basic("admin", "new-pw"), None, "a").status == 200


def test_settings_that_cannot_work_are_refused(tmp_path):
    with pytest.raises(ValueError, match="go together"):
        hs.HttpSecurity(tls_cert_file="a.crt")
    with pytest.raises(ValueError, match="needs TLS"):
        hs.HttpSecurity(tls_client_auth="required")
    with pytest.raises(ValueError, match="needs tls_ca_file"):
        hs.HttpSecurity(tls_cert_file="a", tls_key_file="b", tls_client_auth="optional")
    with pytest.raises(ValueError, match="No such file"):
        hs.HttpGate(hs.HttpSecurity(users_file=str(tmp_path / "none")), "test")
    with pytest.raises(ValueError, match="at least 10000"):
        hs.hash_password("x", 9_999)


def test_a_secret_must_be_whole_to_be_read():
    good = hs.hash_password("pw", FAST)
    name, iterations, salt, key = good.split(":")
    for bad in (f"{name}:9999:{salt}:{key}", f"{name}:x:{salt}:{key}",
                f"{name}:{iterations}:!!:{key}", f"{name}:{iterations}:{salt}:AAAA",
                f"pbkdf2-sha256:{iterations}:{salt}:{key}"):
        with pytest.raises(ValueError, match="line 1: the secret is neither"):
            hs.parse_users(f"alice read {bad}")
        assert not hs.password_matches("pw", bad)


def test_an_unknown_name_costs_what_the_files_users_cost(users_file, monkeypatch):
    gate = hs.HttpGate(hs.HttpSecurity(users_file=str(users_file)), "test")
    checked = []
    real = hs.password_matches
    monkeypatch.setattr(hs, "password_matches",
                        lambda p, s: checked.append(s.split(":")[1]) or real(p, s))
    assert gate.decide("GET", "/", basic("nobody", "x"), None, "a").status == 401
    assert checked == [str(FAST)]          # the file's users' count, not the default


def test_too_many_waiting_checks_are_answered_busy(users_file):
    gate = hs.HttpGate(hs.HttpSecurity(users_file=str(users_file)), "test")
    gate._waiting = __import__("threading").BoundedSemaphore(1)
    gate._waiting.acquire()                # one check waits already
    verdict = gate.decide("GET", "/", basic("reader", "r-pw"), None, "a")
    assert (verdict.status, verdict.message) == (503, "too many authentications in progress; "
                                                      "retry")
    assert gate.counts["busy"] == 1
    gate._waiting.release()
    assert gate.decide("GET", "/", basic("reader", "r-pw"), None, "a").status == 200


def test_the_file_keeps_its_owner_and_leaves_no_temporary_file(users_file):
    before = os.stat(users_file)
    hs.write_users_file(str(users_file), [])
    after = os.stat(users_file)
    assert (after.st_uid, after.st_gid, after.st_mode & 0o777) == \
        (before.st_uid, before.st_gid, 0o600)
    assert os.listdir(users_file.parent) == [users_file.name]
