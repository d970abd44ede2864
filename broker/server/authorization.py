"""Authorizing requests: which permissions each request needs, and the
broker's check of them against the ACLs it keeps (docs/security.md).

What each request needs (Kafka's choices, for our APIs)::

    Produce          write on each topic; create on the topic too when the
                     broker does not have it (the produce would auto-create it)
    Fetch            read on each topic
    Offsets          describe on the topic
    Metadata         describe on each topic named; a request for all topics
                     lists only those the principal may describe
    CreateTopic      create on the topic
    DeleteTopic      delete on the topic
    ReplicaFetch, LeaderEpochEnd   cluster_action on the cluster (brokers only)

A request that lacks one permission is refused whole, before anything is
appended or changed: TOPIC_AUTHORIZATION_FAILED (CLUSTER_AUTHORIZATION_FAILED
for the cluster), the message naming the operation and the resource but not
why (the broker's log has the entry that decided, at a bounded rate).
Until the broker has read the ACLs from ZooKeeper once (just after it
starts), only super users are allowed anything: the others are answered
REQUEST_TIMED_OUT ("... not read yet; retry"), which clients retry.
"""
from __future__ import annotations

import logging

from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode
from broker.security.acl import Authorizer, Operation, ResourceType
from broker.service_kit.logging_setup import RateLimitedLog

log = logging.getLogger(__name__)
limited_log = RateLimitedLog(log)

#: the name of the one cluster resource
CLUSTER = "cluster"
#: what one connection's memo of decisions holds at most (names, their length)
MEMO_ENTRIES = 1000
MEMO_NAME_BYTES = 255
Permission = tuple[Operation, ResourceType, str]


def permissions_of(api_key: int, request) -> list[Permission]:
    """What ``request`` needs, but for Produce's create (it depends on
    whether the broker has the topic) and Metadata for all topics (filtered)."""
    if api_key == ApiKey.PRODUCE:
        return [(Operation.WRITE, ResourceType.TOPIC, t) for t in _topics(request.entries)]
    if api_key == ApiKey.FETCH:
        return [(Operation.READ, ResourceType.TOPIC, t) for t in _topics(request.entries)]
    if api_key == ApiKey.OFFSETS:
        return [(Operation.DESCRIBE, ResourceType.TOPIC, request.topic)]
    if api_key == ApiKey.METADATA:
        return [(Operation.DESCRIBE, ResourceType.TOPIC, t) for t in request.topics]
    if api_key == ApiKey.CREATE_TOPIC:
        return [(Operation.CREATE, ResourceType.TOPIC, request.name)]
    if api_key == ApiKey.DELETE_TOPIC:
        return [(Operation.DELETE, ResourceType.TOPIC, request.name)]
    if api_key in (ApiKey.REPLICA_FETCH, ApiKey.LEADER_EPOCH_END):
        return [(Operation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER)]
    return []


def _topics(entries) -> list[str]:
    seen: dict[str, None] = {}
    for entry in entries:
        seen.setdefault(entry[0], None)
    return list(seen)


def refusal(permission: Permission) -> tuple[ErrorCode, str]:
    """The error code and message of a refused ``permission``."""
    operation, resource_type, name = permission
    code = (ErrorCode.CLUSTER_AUTHORIZATION_FAILED if resource_type is ResourceType.CLUSTER
            else ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    return code, f"not authorized to {operation.value} {resource_type.value} {name!r}"


class RequestAuthorizer:
    """The broker's check of a connection's principal against the ACLs of
    ``cache`` (broker/security/store.py's SecurityCache: ``authorizer``,
    ``generation``, ``ready``). Event-loop thread only. Each connection
    keeps the decisions it got until the ACLs change (``generation``)."""

    def __init__(self, cache, super_users, metrics) -> None:
        self._cache = cache
        self._super_users = frozenset(super_users)
        self._metrics = metrics
        self._before_ready = Authorizer((), super_users)

    def not_ready(self, conn) -> tuple[ErrorCode, str] | None:
        """REQUEST_TIMED_OUT's code and message while the ACLs are not read
        and ``conn``'s principal is no super user; else None."""
        if self._cache.ready.is_set() or conn.principal in self._super_users:
            return None
        return (ErrorCode.REQUEST_TIMED_OUT,
                "the broker has not read its ACLs from ZooKeeper yet; retry")

    def allowed(self, conn, permission: Permission, count: bool = True) -> bool:
        """Whether ``conn``'s principal has ``permission``; a refusal is
        logged and counted unless ``count`` is False (a topic merely left
        out of a listing)."""
        generation = self._cache.generation
        memo = conn.authorized
        if memo is None or memo[0] != generation:
            memo = conn.authorized = (generation, {})
        decided = memo[1].get(permission)
        if decided is not None:
            return decided
        ready = self._cache.ready.is_set()
        authorizer = self._cache.authorizer if ready else self._before_ready
        operation, resource_type, name = permission
        decision = authorizer.authorize(conn.principal, operation, resource_type, name)
        if not decision.allowed and count:
            self._metrics.authorization_denials[(operation.value, resource_type.value)] += 1
            limited_log.log(logging.WARNING, "authorization denied", "refused %s from %s%s",
                            decision.why, conn.peer,
                            "" if ready else " (the ACLs are not read from ZooKeeper yet)")
        # not before the ACLs are read: reading them may end without a change
        # of generation (no entries at all), and the refusal would stick
        # a client naming endless (or endlessly long) topics gets no more memo:
        # at most MEMO_ENTRIES names of at most MEMO_NAME_BYTES per connection
        if ready and len(memo[1]) < MEMO_ENTRIES and len(name) <= MEMO_NAME_BYTES:
            memo[1][permission] = decision.allowed
        return decision.allowed

    def check(self, conn, permissions: list[Permission]) -> tuple[ErrorCode, str] | None:
        """None when every permission is allowed, else the refusal's error
        code and message (REQUEST_TIMED_OUT, retriable, while the ACLs are
        not read yet)."""
        for permission in permissions:
            if not self.allowed(conn, permission):
                return self.not_ready(conn) or refusal(permission)
        return None
