"""The broker's per-connection check (broker/server/authorization.py's
RequestAuthorizer) without a broker: what it answers before the ACLs are
read, and the bound of a connection's memo of decisions."""
from __future__ import annotations

import threading
from collections import defaultdict
from dataclasses import dataclass, field

from broker.protocol.errors import ErrorCode
from broker.security.acl import AclEntry, Authorizer, Operation, ResourceType
from broker.server.authorization import MEMO_ENTRIES, MEMO_NAME_BYTES, RequestAuthorizer


@dataclass
class Cache:
    """SecurityCache's face towards the authorizer."""
    authorizer: Authorizer = field(default_factory=Authorizer)
    generation: int = 0
    ready: threading.Event = field(default_factory=threading.Event)


@dataclass
class Connection:
    principal: str
    peer: str = "127.0.0.1:1"
    authorized: tuple | None = None


class Metrics:
    def __init__(self) -> None:
        self.authorization_denials = defaultdict(int)


def read(name: str):
    return (Operation.READ, ResourceType.TOPIC, name)


def test_before_the_acls_are_read_only_super_users_pass_and_nothing_is_remembered():
    cache, metrics = Cache(), Metrics()
    check = RequestAuthorizer(cache, ["User:admin"], metrics)
    alice, admin = Connection("User:alice"), Connection("User:admin")
    assert check.not_ready(alice) == (
        ErrorCode.REQUEST_TIMED_OUT, "the broker has not read its ACLs from ZooKeeper yet; retry")
    assert check.not_ready(admin) is None
    assert check.allowed(admin, read("events"))
    assert not check.allowed(alice, read("events"))
    assert alice.authorized[1] == {}          # a refusal before the read is not kept
    # the ACLs are read, with no change of generation (none were there before)
    cache.authorizer = Authorizer([AclEntry("User:alice", "allow", "read", "topic", "events")])
    cache.ready.set()
    assert check.not_ready(alice) is None
    assert check.allowed(alice, read("events"))
    assert metrics.authorization_denials[("read", "topic")] == 1


def test_a_connections_memo_is_bounded_in_names_and_their_length():
    cache = Cache(Authorizer([AclEntry("User:alice", "allow", "read", "topic", "t",
                                       "prefixed")]))
    cache.ready.set()
    check = RequestAuthorizer(cache, [], Metrics())
    alice = Connection("User:alice")
    for i in range(MEMO_ENTRIES + 500):
        assert check.allowed(alice, read(f"t{i}"))
    assert len(alice.authorized[1]) == MEMO_ENTRIES
    long_name = "t" + "x" * MEMO_NAME_BYTES
    assert check.allowed(Connection("User:alice"), read(long_name))
    fresh = Connection("User:alice")
    check.allowed(fresh, read(long_name))
    assert fresh.authorized[1] == {}          # too long to be kept
    # a change of the ACLs (a new generation) forgets what was decided
    cache.authorizer, cache.generation = Authorizer(), 1
    assert not check.allowed(alice, read("t1"))
