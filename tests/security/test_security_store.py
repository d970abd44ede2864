"""broker/security/store.py against a real ZooKeeper: the users' credentials
and the ACL entries written, read back, replaced and removed; writers racing
on one node lose nothing; and SecurityCache follows every change (awaited on
its on_change, never on a sleep), skips a malformed node with a warning,
comes back from a session expiry, and keeps its records while ZooKeeper is
down (on a ZooKeeper of the test's own: the session's server never stops)."""
from __future__ import annotations

import json
import logging
import threading
from typing import Callable

import pytest
from kazoo.client import KazooClient, KazooState

from broker.coordination import paths
from broker.coordination.zk import make_client, start_client
from broker.harness import ZooKeeperEnsemble
from broker.harness.kazoo_faults import expire_session
from broker.protocol.scram import MECHANISM, MIN_ITERATIONS, ScramCredential
from broker.security import store
from broker.security.acl import AclEntry, entries_from_bytes
from broker.security.store import SecurityCache

WAIT_S = 15.0


def credential(password: str) -> ScramCredential:
    return ScramCredential.from_password(password, iterations=MIN_ITERATIONS)    # cheap


def entry(principal: str = "User:alice", operation: str = "read", name: str = "events",
          resource_type: str = "topic", permission: str = "allow",
          pattern_type: str = "literal") -> AclEntry:
    return AclEntry(principal, permission, operation, resource_type, name, pattern_type)


@pytest.fixture
def other_client(zookeeper, zk_client, zk_chroot):
    """A second client (its own session) in zk_client's chroot: the writer,
    as a tool on another machine would be."""
    client = KazooClient(hosts=zookeeper.connect_string(zk_chroot), timeout=10)
    client.start(timeout=15)
    yield client
    client.stop()
    client.close()


@pytest.fixture
def caches():
    """Start SecurityCaches; each is stopped at teardown."""
    started: list[SecurityCache] = []

    def start(client: KazooClient, **kwargs) -> SecurityCache:
        cache = SecurityCache(client, **kwargs)
        started.append(cache)
        return cache.start()

    yield start
    for cache in started:
        cache.stop()


def wait_for(cache: SecurityCache, holds: Callable[[], bool], what: str) -> None:
    """Wait until ``holds()``, checked now and after each change of the cache."""
    held = threading.Event()

    def check() -> None:
        if holds():
            held.set()
    cache.on_change.append(check)
    try:
        check()
        assert held.wait(WAIT_S), f"the cache did not see {what} within {WAIT_S} s"
    finally:
        cache.on_change.remove(check)


# ------------------------------------------------------------------ the records

def test_users_round_trip_replace_and_remove(zk_client):
    assert store.list_users(zk_client) == []
    assert store.read_credential(zk_client, "alice") is None
    first, second = credential("first"), credential("second")

    assert store.set_user(zk_client, "alice", first) is True
    assert store.read_credential(zk_client, "alice") == first
    data, _ = zk_client.get(paths.user_path("alice"))
    assert json.loads(data) == {MECHANISM: first.to_text()}       # never the password
    assert b"first" not in data

    assert store.set_user(zk_client, "alice", second) is False    # replaced
    assert store.read_credential(zk_client, "alice") == second
    assert store.set_user(zk_client, "bob", first) is True
    assert store.list_users(zk_client) == ["alice", "bob"]

    assert store.remove_user(zk_client, "alice") is True
    assert store.remove_user(zk_client, "alice") is False
    assert store.list_users(zk_client) == ["bob"]
    assert store.read_credential(zk_client, "alice") is None


@pytest.mark.parametrize("name, says", [
    ("a/b", "'/'"), ("", "1 to 255"), ("..", "cannot be '..'"), ("tab\there", "1 to 255"),
    ("smile\U0001f600", "ZooKeeper refuses"), ("x" * 256, "1 to 255")])
def test_a_user_name_that_cannot_name_a_node_is_refused(zk_client, name, says):
    with pytest.raises(ValueError, match=says):
        store.set_user(zk_client, name, credential("pw"))
    assert store.list_users(zk_client) == []


@pytest.mark.parametrize("name, says", [("a/b", "'/'"), ("", "not be empty"),
                                        ("x\x85", "ZooKeeper refuses")])
def test_a_resource_name_that_cannot_name_a_node_is_refused(zk_client, name, says):
    with pytest.raises(ValueError, match=says):
        store.check_resource_name(name)
    if name:             # (AclEntry itself refuses an empty name)
        with pytest.raises(ValueError, match=says):
            store.add_acls(zk_client, [entry(name=name)])
    assert not zk_client.exists(paths.SECURITY_ACLS)


def test_acls_round_trip(zk_client):
    read_events = entry(operation="read")
    write_events = entry(operation="write")
    pv_group = entry("User:bob", "read", "pv-", "group", pattern_type="prefixed")
    deny_cluster = entry("User:*", "alter", "cluster", "cluster", permission="deny")
    assert store.add_acls(zk_client, [read_events, write_events, pv_group, read_events,
                                      deny_cluster]) == 4        # a repeat is one entry
    assert store.add_acls(zk_client, [read_events, entry(operation="describe")]) == 1

    data, _ = zk_client.get(paths.acl_path("topic", "literal", "events"))
    assert set(entries_from_bytes(data)) == {read_events, write_events,
                                             entry(operation="describe")}
    assert zk_client.exists("/security/acls/group/prefixed:pv-")
    assert zk_client.exists("/security/acls/cluster/literal:cluster")

    everything = store.list_acls(zk_client)
    assert everything == [deny_cluster, pv_group, entry(operation="describe"), read_events,
                          write_events]                           # type, pattern, name, ...
    assert store.list_acls(zk_client, principal="User:bob") == [pv_group]
    assert store.list_acls(zk_client, resource_type="topic") == everything[2:]
    assert store.list_acls(zk_client, name="pv-") == [pv_group]
    assert store.list_acls(zk_client, principal="User:alice", resource_type="group") == []

    assert store.remove_acls(zk_client, [read_events, entry(operation="delete")]) == 1
    assert store.list_acls(zk_client, resource_type="topic") == \
        [entry(operation="describe"), write_events]
    assert store.remove_acls(zk_client, [write_events, entry(operation="describe")]) == 2
    assert not zk_client.exists(paths.acl_path("topic", "literal", "events"))  # emptied: gone
    assert store.remove_acls(zk_client, [write_events]) == 0
    assert store.list_acls(zk_client) == [deny_cluster, pv_group]


def test_writers_racing_on_one_node_lose_nothing(zk_client, other_client):
    """Two tools add entries to one resource at once, one entry a call: each
    read-change-write is versioned, so none is lost; then each removes its
    own at once, and the node goes once the last is removed."""
    per_writer = 25
    mine = {i: [entry(f"User:w{i}-{k}") for k in range(per_writer)] for i in (0, 1)}
    start = threading.Barrier(2)
    counts: dict[tuple[str, int], int] = {}
    errors: list[BaseException] = []

    def writer(i: int, client: KazooClient, action) -> None:
        try:
            start.wait(WAIT_S)
            counts[action.__name__, i] = sum(action(client, [e]) for e in mine[i])
        except BaseException as exc:     # noqa: BLE001 - said by the main thread
            errors.append(exc)

    for action in (store.add_acls, store.remove_acls):
        threads = [threading.Thread(target=writer, args=(i, client, action))
                   for i, client in ((0, zk_client), (1, other_client))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert not errors, errors
        if action is store.add_acls:
            assert sorted(store.list_acls(zk_client), key=lambda e: e.principal) == \
                sorted(mine[0] + mine[1], key=lambda e: e.principal)
    assert counts == {(name, i): per_writer for name in ("add_acls", "remove_acls")
                      for i in (0, 1)}
    assert store.list_acls(zk_client) == []
    assert not zk_client.exists(paths.acl_path("topic", "literal", "events"))


# ------------------------------------------------------------------ the cache

def test_the_cache_follows_users_and_acls(zk_client, other_client, caches):
    alice = credential("alice")
    store.set_user(other_client, "alice", alice)
    store.add_acls(other_client, [entry()])
    cache = caches(zk_client, super_users=["User:admin"])
    assert cache.ready.is_set()              # everything read once when start() returns
    assert cache.credential("alice") == alice and cache.credential("bob") is None
    assert cache.authorizer.authorize("User:alice", "read", "topic", "events").allowed
    assert not cache.authorizer.authorize("User:alice", "write", "topic", "events").allowed
    assert cache.authorizer.authorize("User:admin", "write", "topic", "events").allowed
    generations = [cache.generation]
    assert generations[0] >= 2

    bob = credential("bob")
    store.set_user(other_client, "bob", bob)
    wait_for(cache, lambda: cache.credential("bob") == bob, "bob added")
    generations.append(cache.generation)

    authorizer = cache.authorizer
    new_alice = credential("new")
    store.set_user(other_client, "alice", new_alice)
    wait_for(cache, lambda: cache.credential("alice") == new_alice, "alice's new password")
    assert cache.authorizer is authorizer            # a user's change keeps the ACLs
    generations.append(cache.generation)

    store.remove_user(other_client, "bob")
    wait_for(cache, lambda: cache.credential("bob") is None, "bob removed")
    generations.append(cache.generation)

    store.add_acls(other_client, [entry(operation="write")])
    wait_for(cache, lambda: cache.authorizer.authorize("User:alice", "write", "topic",
                                                       "events").allowed, "write allowed")
    assert authorizer.authorize("User:alice", "write", "topic", "events").allowed is False
    generations.append(cache.generation)     # (the Authorizer taken before is unchanged)

    store.add_acls(other_client, [entry("User:*", "all", "pv-", "group",
                                        pattern_type="prefixed")])
    wait_for(cache, lambda: cache.authorizer.authorize("User:carol", "read", "group",
                                                       "pv-1").allowed, "a prefixed group")
    generations.append(cache.generation)

    store.remove_acls(other_client, [entry(), entry(operation="write")])
    wait_for(cache, lambda: not cache.authorizer.authorize("User:alice", "read", "topic",
                                                           "events").allowed, "read removed")
    generations.append(cache.generation)
    assert generations == sorted(set(generations)), generations      # grew at each change
    assert cache.authorizer.entries == (entry("User:*", "all", "pv-", "group",
                                              pattern_type="prefixed"),)

    # stopped: no change, no call back. A witness on the same client hears of
    # the same events after it (kazoo calls the watches of one client in turn)
    witness = caches(zk_client)
    cache.stop()
    calls = []
    cache.on_change.append(lambda: calls.append(1))
    store.set_user(other_client, "dave", bob)
    wait_for(witness, lambda: witness.credential("dave") == bob, "dave, by the witness")
    assert cache.credential("dave") is None and calls == []


def test_a_cache_made_before_its_client(zk_client, other_client):
    """(The broker makes its cache before its ZooKeeper client exists.)"""
    store.set_user(other_client, "alice", credential("alice"))
    cache = SecurityCache(None)
    with pytest.raises(RuntimeError, match="use_client"):
        cache.start()
    cache.use_client(zk_client)
    try:
        assert cache.start().ready.is_set() and cache.credential("alice") is not None
        with pytest.raises(RuntimeError, match="starts once"):
            cache.start()
    finally:
        cache.stop()


def test_an_on_change_callback_that_fails_is_logged_and_the_others_run(
        zk_client, other_client, caches, caplog):
    cache = caches(zk_client)

    def broken() -> None:
        raise RuntimeError("a listener's bug")
    after_it = threading.Event()       # the callback after the broken one ran
    cache.on_change.append(broken)
    cache.on_change.append(lambda: cache.credential("erin") is not None and after_it.set())
    store.set_user(other_client, "erin", credential("erin"))
    # (the cache holds erin before its callbacks run: wait for the one after
    # the broken one, not for the credential)
    assert after_it.wait(WAIT_S), "the callback after the broken one did not run"
    assert "a listener's bug" in caplog.text


def test_a_malformed_node_is_skipped_with_a_warning(zk_client, other_client, caches, caplog):
    good = credential("good")
    store.set_user(other_client, "good", good)
    store.add_acls(other_client, [entry()])
    malformed = {
        paths.user_path("bad-json"): b"{not json",
        paths.user_path("bad-credential"): json.dumps({MECHANISM: "salt=AAAA"}).encode(),
        paths.user_path("no-mechanism"): b"{}",
        paths.acl_path("topic", "literal", "junk"): b"[1, 2]",
        # entries of another resource than the node's name says
        paths.acl_path("topic", "literal", "other"): json.dumps([entry().to_json()]).encode(),
        paths.acl_path("group", "literal", "bad-principal"): json.dumps([
            {**entry(resource_type="group", name="bad-principal").to_json(),
             "principal": 7}]).encode(),
        paths.acl_type_path("topic") + "/no-colon": b"[]",
    }
    for path, data in malformed.items():
        other_client.create(path, data, makepath=True)

    with caplog.at_level(logging.WARNING, logger="broker.security.store"):
        cache = caches(zk_client)
        assert cache.ready.is_set()
        warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        for path in malformed:
            assert any(path in message for message in warned), (path, warned)
        assert cache.credential("good") == good
        for user in ("bad-json", "bad-credential", "no-mechanism"):
            assert cache.credential(user) is None
        assert cache.authorizer.entries == (entry(),)
        assert "Traceback" not in caplog.text

        # a good node made bad counts as absent from then on, and the cache goes on
        other_client.set(paths.user_path("good"), b"garbage")
        wait_for(cache, lambda: cache.credential("good") is None, "the good user made bad")
        assert any(paths.user_path("good") in r.getMessage() for r in caplog.records)
        store.set_user(other_client, "later", good)
        wait_for(cache, lambda: cache.credential("later") == good, "a user made after")
    assert store.list_acls(other_client) == [entry()]        # list_acls skips them too


def test_a_parent_removed_and_made_again_is_followed_again(zk_client, other_client, caches):
    """A ChildrenWatch ends for good when its node is deleted: the cache
    watches the parents themselves, and follows the new ones."""
    store.set_user(other_client, "alice", credential("alice"))
    store.add_acls(other_client, [entry()])
    cache = caches(zk_client)
    other_client.delete(paths.SECURITY, recursive=True)
    wait_for(cache, lambda: cache.credential("alice") is None
             and cache.authorizer.entries == (), "everything removed")

    bob = credential("bob")
    store.set_user(other_client, "bob", bob)          # makes /security/users again
    store.add_acls(other_client, [entry(operation="write")])
    wait_for(cache, lambda: cache.credential("bob") == bob
             and cache.authorizer.entries == (entry(operation="write"),), "the new records")


def test_the_cache_comes_back_from_a_session_expiry(zk_client, other_client, caches):
    """kazoo's ChildrenWatch and DataWatch read their nodes again, and watch
    them again, on the new session: changes made around the expiry, and
    after it, are seen."""
    store.set_user(other_client, "alice", credential("alice"))
    store.add_acls(other_client, [entry()])
    cache = caches(zk_client)
    before = cache.generation

    expire_session(zk_client, wait_reconnect=False)
    # made while the cache's session is gone (or as it comes back)
    bob = credential("bob")
    store.set_user(other_client, "bob", bob)
    store.remove_user(other_client, "alice")
    store.add_acls(other_client, [entry(operation="write")])
    wait_for(cache, lambda: cache.credential("bob") == bob and cache.credential("alice") is None
             and cache.authorizer.authorize("User:alice", "write", "topic", "events").allowed,
             "the changes made around the expiry")
    assert zk_client.state == KazooState.CONNECTED

    # and the watches are set again: a later change is seen
    carol = credential("carol")
    store.set_user(other_client, "carol", carol)
    store.remove_acls(other_client, [entry()])
    wait_for(cache, lambda: cache.credential("carol") == carol and not cache.authorizer
             .authorize("User:alice", "read", "topic", "events").allowed, "a later change")
    assert cache.generation > before


def test_the_cache_keeps_its_records_while_zookeeper_is_down(tmp_path, caches):
    ensemble = ZooKeeperEnsemble(1, str(tmp_path / "zookeeper"))
    ensemble.start()
    connect = ensemble.connect_string("/dc")
    client = make_client(connect)
    writer = None
    try:
        start_client(client, connect)
        alice = credential("alice")
        store.set_user(client, "alice", alice)
        store.add_acls(client, [entry()])
        cache = caches(client)
        generation, authorizer = cache.generation, cache.authorizer
        changes: list[int] = []
        cache.on_change.append(lambda: changes.append(cache.generation))
        gone = threading.Event()
        client.add_listener(lambda state: gone.set() if state != KazooState.CONNECTED
                            else None)

        ensemble.stop()
        assert gone.wait(WAIT_S), "the client did not notice ZooKeeper stopped"
        assert not client.connected
        assert cache.credential("alice") == alice
        assert cache.authorizer is authorizer
        assert cache.authorizer.authorize("User:alice", "read", "topic", "events").allowed
        assert cache.generation == generation and changes == []

        ensemble.start()                 # back (same data): the cache follows again
        writer = make_client(connect)
        start_client(writer, connect)
        bob = credential("bob")
        store.set_user(writer, "bob", bob)
        wait_for(cache, lambda: cache.credential("bob") == bob, "a user added after the outage")
        assert cache.credential("alice") == alice
    finally:
        for zk in (writer, client):
            if zk is not None:
                zk.stop()
                zk.close()
        ensemble.stop()
