"""The ``users`` and ``acls`` tools end to end, as a user runs them
(``python -m broker.tools ...`` in a subprocess) against the session's
ZooKeeper in a fresh chroot: what they write is read back with
broker/security/store.py (a password set by the tool authenticates a SCRAM
exchange), the password comes from stdin or a file and never from an
argument, bad usage is exit 2 before ZooKeeper is asked, and an unreachable
ZooKeeper is exit 1 at once, in one line."""
from __future__ import annotations

import json
import time

import pytest

from broker.protocol.scram import DEFAULT_ITERATIONS, ScramClient, ScramServer
from broker.security import store
from broker.security.acl import AclEntry

from broker_helpers import run_module, unused_port


def tool(*args: str, stdin: bytes | None = None):
    return run_module("broker.tools", *args, stdin=stdin, timeout=60)


def ok(*args: str, stdin: bytes | None = None) -> str:
    done = tool(*args, stdin=stdin)
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout.decode()


@pytest.fixture
def zk(zookeeper, zk_client, zk_chroot) -> tuple[str, str]:
    """The tools' cluster option for zk_client's chroot."""
    return ("--zookeeper", zookeeper.connect_string(zk_chroot))


def authenticates(client, user: str, password: str) -> bool:
    """Whether ``password`` passes a SCRAM exchange against the stored credential."""
    server = ScramServer(lambda name: store.read_credential(client, name), b"server secret")
    scram = ScramClient(user, password)
    try:
        scram.verify(server.final(scram.final(server.first(scram.first()))))
    except ValueError:
        return False
    return True


@pytest.mark.parametrize("command", ["users", "acls"])
def test_help(command):
    out = ok(command, "--help")
    assert out.startswith(f"usage: python -m broker.tools {command} ")
    assert "--cluster" in out and "--zookeeper" in out and "Exit status" in out
    assert command in ok("--help")


def test_users_add_replace_list_remove(zk, zk_client, zookeeper, zk_chroot, tmp_path):
    assert ok("users", "add", "alice", "--password-stdin", *zk, stdin=b"s3cret one\n") == \
        "user alice created\n"
    assert authenticates(zk_client, "alice", "s3cret one")      # the newline is not in it
    assert not authenticates(zk_client, "alice", "s3cret one\n")
    assert store.read_credential(zk_client, "alice").iterations == DEFAULT_ITERATIONS
    assert b"s3cret" not in zk_client.get("/security/users/alice")[0]

    secret = tmp_path / "password"
    secret.write_bytes("n\u00e9w\r\nthe second line is not read\n".encode())
    assert ok("users", "add", "alice", "--password-file", str(secret), "--iterations", "4096",
              *zk) == "user alice replaced\n"
    assert authenticates(zk_client, "alice", "n\u00e9w")
    assert not authenticates(zk_client, "alice", "s3cret one")
    assert store.read_credential(zk_client, "alice").iterations == 4096

    # --cluster NAME=ZOOKEEPER as well as --zookeeper
    cluster = ("--cluster", f"dc={zookeeper.connect_string(zk_chroot)}")
    assert ok("users", "add", "bob", "--password-stdin", *cluster, stdin=b"b") == \
        "user bob created\n"
    assert ok("users", "list", *zk) == "alice\nbob\n"
    assert ok("users", "remove", "alice", *cluster) == "user alice removed\n"
    assert store.list_users(zk_client) == ["bob"]
    again = tool("users", "remove", "alice", *zk)
    assert again.returncode == 1
    assert again.stderr.decode().strip() == f"error: no user 'alice' in {zk[1]}"
    assert ok("users", "list", *zk) == "bob\n"


def test_acls_add_list_remove(zk, zk_client):
    def entry(principal: str, operation: str, resource_type: str, name: str,
              permission: str = "allow", pattern_type: str = "literal") -> AclEntry:
        return AclEntry(principal, permission, operation, resource_type, name, pattern_type)

    alice = ("--principal", "User:alice", "--topic", "events")
    assert ok("acls", "add", *alice, "--operation", "read", "--operation", "WRITE", *zk) == \
        "2 entries added\n"
    assert ok("acls", "add", *alice, "--operation", "read", "--operation", "describe",
              *zk) == "1 entry added, 1 entry already there\n"
    assert ok("acls", "add", "--principal", "User:*", "--group", "pv-", "--prefixed",
              "--operation", "read", "--deny", *zk) == "1 entry added\n"
    assert ok("acls", "add", "--principal", "User:ops", "--cluster-resource", "--operation",
              "cluster-action", *zk) == "1 entry added\n"
    assert store.list_acls(zk_client) == [
        entry("User:ops", "cluster_action", "cluster", "cluster"),
        entry("User:*", "read", "group", "pv-", "deny", "prefixed"),
        entry("User:alice", "describe", "topic", "events"),
        entry("User:alice", "read", "topic", "events"),
        entry("User:alice", "write", "topic", "events")]

    assert ok("acls", "list", *zk).splitlines() == [
        "User:ops allow cluster_action cluster literal:cluster",
        "User:* deny read group prefixed:pv-",
        "User:alice allow describe topic literal:events",
        "User:alice allow read topic literal:events",
        "User:alice allow write topic literal:events"]
    assert ok("acls", "list", "--principal", "User:ops", *zk).splitlines() == \
        ["User:ops allow cluster_action cluster literal:cluster"]
    assert ok("acls", "list", "--group", "pv-", *zk).splitlines() == \
        ["User:* deny read group prefixed:pv-"]
    assert ok("acls", "list", "--principal", "User:bob", *zk) == ""
    assert json.loads(ok("acls", "list", "--topic", "events", "--json", *zk)) == \
        {"acls": [e.to_json() for e in store.list_acls(zk_client, name="events")]}

    assert ok("acls", "remove", *alice, "--operation", "read", "--operation", "delete",
              *zk) == "1 entry removed, 1 entry not there\n"
    assert ok("acls", "remove", *alice, "--operation", "write", "--operation", "describe",
              *zk) == "2 entries removed\n"
    assert not zk_client.exists("/security/acls/topic/literal:events")
    assert len(store.list_acls(zk_client)) == 2


NOWHERE = ("--cluster", f"dc=127.0.0.1:{unused_port()}/dc")    # never asked


@pytest.mark.parametrize("args, stdin, says", [
    (["users", "add", "alice", *NOWHERE], None, "users add needs the password"),
    (["users", "add", "alice", "--password", "s3cret", *NOWHERE], None,
     "ambiguous option: --password"),                  # no way to give it as an argument
    (["users", "add", "--password-stdin", *NOWHERE], b"pw\n", "needs the user's NAME"),
    (["users", "list", "alice", *NOWHERE], None, "users list takes no NAME"),
    (["users", "remove", "alice", "--password-stdin", *NOWHERE], b"pw\n",
     "go with users add"),
    (["users", "add", "a/b", "--password-stdin", *NOWHERE], b"pw\n", "must not contain '/'"),
    (["users", "add", "alice", "--password-stdin", "--iterations", "10", *NOWHERE], b"pw\n",
     "--iterations is 4096 to 1048576, not 10"),
    (["users", "add", "alice", "--password-stdin", *NOWHERE], b"\n", "the password is empty"),
    (["users", "add", "alice", "--password-file", "/no/such/file", *NOWHERE], None,
     "cannot read the password"),
    (["users", "list"], None, "users needs the cluster"),
    (["acls", "add", "--principal", "User:a", "--topic", "t", "--operation", "fly",
      *NOWHERE], None, "invalid choice: 'fly' (choose from 'read', 'write', 'create'"),
    (["acls", "add", "--topic", "t", "--operation", "read", *NOWHERE], None,
     "acls add needs --principal User:NAME"),
    (["acls", "remove", "--principal", "User:a", *NOWHERE], None,
     "a resource (--topic NAME, --group NAME or --cluster-resource) and --operation OP "
     "(read, write, create, delete, alter, describe, cluster_action, all)"),
    (["acls", "add", "--principal", "alice", "--topic", "t", "--operation", "read",
      *NOWHERE], None, "a principal is User:<name>"),
    (["acls", "add", "--principal", "User:a", "--cluster-resource", "--prefixed",
      "--operation", "alter", *NOWHERE], None, "--prefixed goes with --topic or --group"),
    (["acls", "add", "--principal", "User:a", "--topic", "a/b", "--operation", "read",
      *NOWHERE], None, "must not contain '/'"),
    (["acls", "add", "--principal", "User:a", "--topic", "t", "--group", "g",
      "--operation", "read", *NOWHERE], None, "not allowed with argument"),
    (["acls", "list", "--operation", "read", *NOWHERE], None, "go with acls add or remove"),
    (["acls", "add", "--principal", "User:a", "--topic", "t", "--operation", "read",
      "--json", *NOWHERE], None, "--json goes with acls list"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_bad_usage_is_exit_2_before_zookeeper_is_asked(args, stdin, says):
    done = tool(*args, stdin=stdin)
    assert done.returncode == 2, done.stderr.decode()
    last = done.stderr.decode().strip().splitlines()[-1]
    assert says in last, last
    assert done.stdout == b""


@pytest.mark.parametrize("args, stdin", [
    (["users", "list"], None), (["users", "add", "alice", "--password-stdin"], b"pw\n"),
    (["acls", "list"], None)], ids=["users-list", "users-add", "acls-list"])
def test_unreachable_zookeeper_is_exit_1_at_once(args, stdin):
    address = f"127.0.0.1:{unused_port()}/nowhere"
    started = time.monotonic()
    done = tool(*args, "--zookeeper", address, "--timeout", "1", stdin=stdin)
    took = time.monotonic() - started
    assert done.returncode == 1
    err = done.stderr.decode()
    last = err.strip().splitlines()[-1]
    assert last.startswith("error:") and "cannot reach ZooKeeper" in last and address in last
    assert "Traceback" not in err and done.stdout == b""
    assert took < 10, took
