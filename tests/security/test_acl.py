"""The Authorizer's decisions (broker/security/acl.py): deny wins over
allow whatever the order, prefixes and the literal * name what they should,
User:* is everyone, describe is implied by the operations that use a
resource (and a deny of one of them does not deny describe), super users
may do everything, and nothing is allowed that no entry allows."""
from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from broker.security.acl import (AclEntry, Authorizer, Operation, PatternType, Permission,
                                 ResourceType, entries_from_bytes, entries_to_bytes)

ALICE, BOB = "User:alice", "User:bob"


def entry(principal=ALICE, permission="allow", operation="read", resource="topic",
          name="events", pattern="literal") -> AclEntry:
    return AclEntry(principal, permission, operation, resource, name, pattern)


def allowed(entries, principal=ALICE, operation="read", resource="topic", name="events",
            **kwargs) -> bool:
    return Authorizer(entries, **kwargs).authorize(principal, operation, resource, name).allowed


def test_nothing_is_allowed_that_no_entry_allows():
    assert not allowed([])
    assert not allowed([entry(operation="read")], operation="write")
    assert not allowed([entry(principal=BOB)])
    assert not allowed([entry(name="other")])
    assert not allowed([entry(resource="group")])


def test_literal_prefix_and_wildcard_names():
    assert allowed([entry(name="events")], name="events")
    assert not allowed([entry(name="events")], name="events-2")
    assert allowed([entry(name="pv-", pattern="prefixed")], name="pv-2026")
    assert not allowed([entry(name="pv-", pattern="prefixed")], name="p")
    assert allowed([entry(name="*")], name="anything")
    assert allowed([entry(principal="User:*")], principal=BOB)


def test_describe_is_implied_by_use_and_all_covers_everything():
    for op in ("read", "write", "delete", "alter"):
        assert allowed([entry(operation=op)], operation="describe")
    assert not allowed([entry(operation="create")], operation="describe")
    for op in Operation:
        assert allowed([entry(operation="all")], operation=op)
    # a deny of read does not deny describe; a deny of all does
    assert allowed([entry(operation="all"), entry(permission="deny", operation="read")],
                   operation="describe")
    assert not allowed([entry(operation="read"), entry(permission="deny", operation="all")],
                       operation="describe")


def test_super_users_may_do_everything_and_no_acl_may_be_a_migrations_allow():
    assert allowed([entry(permission="deny", operation="all")], principal=BOB,
                   super_users=[BOB])
    assert allowed([], allow_if_no_acl=True)
    # but not where some entry names the resource
    assert not allowed([entry(principal=BOB)], allow_if_no_acl=True)


NAMES = st.sampled_from(["events", "events-2", "pv-1", "pv-2", "_audit", "g1"])
ENTRIES = st.tuples(
    st.sampled_from([ALICE, BOB, "User:*"]), st.sampled_from(list(Permission)),
    st.sampled_from(list(Operation)), st.sampled_from([ResourceType.TOPIC, ResourceType.GROUP]),
    st.sampled_from(["events", "pv-", "*", "_audit", "g"]),
    st.sampled_from(list(PatternType))).filter(
        lambda t: not (t[5] is PatternType.PREFIXED and t[4] == "*")).map(lambda t: AclEntry(*t))

@given(st.lists(ENTRIES, max_size=12), st.sampled_from(list(Operation)), NAMES,
       st.sampled_from([ResourceType.TOPIC, ResourceType.GROUP]), st.randoms())
def test_deny_wins_whatever_the_order(entries, operation, name, resource, rnd):
    decision = Authorizer(entries).authorize(ALICE, operation, resource, name).allowed
    shuffled = list(entries)
    rnd.shuffle(shuffled)
    assert Authorizer(shuffled).authorize(ALICE, operation, resource, name).allowed == decision
    denying = [e for e in entries if e.permission is Permission.DENY
               and e.principal in (ALICE, "User:*") and e.names(resource, name)
               and e.operation in (operation, Operation.ALL)]
    if denying:
        assert not decision
    # adding an allow of everything never overrides a deny
    everything = AclEntry(ALICE, "allow", "all", resource, "*")
    assert Authorizer([*entries, everything]).authorize(
        ALICE, operation, resource, name).allowed == (not denying)


@given(st.lists(ENTRIES, max_size=8))
def test_entries_survive_their_stored_form(entries):
    assert entries_from_bytes(entries_to_bytes(entries)) == entries


@pytest.mark.parametrize("bad", [
    dict(principal="alice"), dict(principal="User:"), dict(permission="maybe"),
    dict(operation="fly"), dict(resource="queue"), dict(name=""),
    dict(name="*", pattern="prefixed"), dict(resource="cluster", name="other")])
def test_a_malformed_entry_is_refused(bad):
    with pytest.raises(ValueError):
        entry(**bad)


def test_stored_forms_that_are_not_entries_are_refused():
    for data in (b"{}", b"not json", b'[{"principal": "User:a"}]'):
        with pytest.raises(ValueError):
            entries_from_bytes(data)


@given(st.lists(ENTRIES, max_size=16), st.sampled_from(list(Operation)), NAMES,
       st.sampled_from([ResourceType.TOPIC, ResourceType.GROUP]), st.booleans())
def test_the_index_decides_as_a_scan_of_every_entry(entries, operation, name, resource,
                                                     allow_if_no_acl):
    """The Authorizer looks only at the entries its index finds for a name;
    reading every entry, in the rule's words, decides the same."""
    named = [e for e in entries if e.names(resource, name)]
    mine = [e for e in named if e.principal in (ALICE, "User:*")]
    if any(e.permission is Permission.DENY and e.covers(operation) for e in mine):
        expected = False
    elif any(e.permission is Permission.ALLOW and e.covers(operation) for e in mine):
        expected = True
    else:
        expected = allow_if_no_acl and not named
    assert Authorizer(entries, allow_if_no_acl=allow_if_no_acl).authorize(
        ALICE, operation, resource, name).allowed == expected
