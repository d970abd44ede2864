"""Access control lists and the decision they make, pure: no ZooKeeper, no
sockets (the broker keeps the entries it read, docs/security.md; this module
only says what they allow).

An entry allows or denies one *principal* (``User:alice``, or ``User:*``
for every principal) one *operation* on the *resources* its pattern names:
a resource type (topic, group, cluster) and a name, taken literally
(``events``; ``*`` is every resource of the type) or as a prefix
(``pv-`` names every topic whose name starts with it).

The decision for (principal, operation, resource), in order:
  1. a super user (the broker's settings) may do everything;
  2. an entry that matches and DENIES wins over every entry that allows;
  3. else an entry that matches and ALLOWS allows;
  4. else refused (unless ``allow_if_no_acl`` and no entry at all names the
     resource: a migration's setting, off by default).
An entry matches when its principal is the principal or ``User:*``, its
operation is the operation or ``all`` (or implies it: ``describe`` is
implied by ``read``, ``write``, ``delete`` and ``alter``, as in Kafka), and
its pattern names the resource.
"""
from __future__ import annotations

import enum
import json
from dataclasses import dataclass
from typing import Iterable

WILDCARD = "*"
ANY_PRINCIPAL = "User:*"


class Operation(str, enum.Enum):
    READ = "read"                  # fetch a topic; join, commit and read a group's offsets
    WRITE = "write"                # produce to a topic
    CREATE = "create"              # create a topic (or auto-create it by producing)
    DELETE = "delete"              # delete a topic, a group's offsets
    ALTER = "alter"                # change a topic's settings, reset a group's offsets
    DESCRIBE = "describe"          # metadata and offsets of a topic, a group's state
    CLUSTER_ACTION = "cluster_action"   # brokers' own requests: replication, controller
    ALL = "all"


#: what an allowed operation also allows
IMPLIED = {Operation.DESCRIBE: {Operation.READ, Operation.WRITE, Operation.DELETE,
                                Operation.ALTER}}


class ResourceType(str, enum.Enum):
    TOPIC = "topic"
    GROUP = "group"
    CLUSTER = "cluster"


class PatternType(str, enum.Enum):
    LITERAL = "literal"
    PREFIXED = "prefixed"


class Permission(str, enum.Enum):
    ALLOW = "allow"
    DENY = "deny"


def validate_principal(principal: str) -> str:
    """``User:<name>`` (``User:*`` for everyone); ValueError otherwise."""
    kind, sep, name = principal.partition(":")
    if kind != "User" or not sep or not name or any(ord(c) < 0x20 for c in name):
        raise ValueError(f"a principal is User:<name> (or User:*), not {principal!r}")
    return principal


@dataclass(frozen=True)
class AclEntry:
    principal: str
    permission: Permission
    operation: Operation
    resource_type: ResourceType
    name: str
    pattern_type: PatternType = PatternType.LITERAL

    def __post_init__(self) -> None:
        validate_principal(self.principal)
        for attr, kind in (("permission", Permission), ("operation", Operation),
                           ("resource_type", ResourceType), ("pattern_type", PatternType)):
            object.__setattr__(self, attr, kind(getattr(self, attr)))
        if not self.name:
            raise ValueError("an entry names a resource (a name, a prefix, or *)")
        if self.pattern_type is PatternType.PREFIXED and self.name == WILDCARD:
            raise ValueError("a prefix of * means nothing: use a literal *")
        if self.resource_type is ResourceType.CLUSTER and \
                (self.name != "cluster" and self.name != WILDCARD):
            raise ValueError("the cluster resource is named 'cluster'")

    def names(self, resource_type: ResourceType, name: str) -> bool:
        """Whether this entry's pattern names the resource."""
        if resource_type is not self.resource_type:
            return False
        if self.pattern_type is PatternType.PREFIXED:
            return name.startswith(self.name)
        return self.name == WILDCARD or self.name == name

    def covers(self, operation: Operation) -> bool:
        return self.operation in (operation, Operation.ALL) or \
            self.operation in IMPLIED.get(operation, ()) and self.permission is Permission.ALLOW

    def to_json(self) -> dict:
        return {"principal": self.principal, "permission": self.permission.value,
                "operation": self.operation.value, "resource_type": self.resource_type.value,
                "name": self.name, "pattern_type": self.pattern_type.value}

    @classmethod
    def from_json(cls, value: dict) -> "AclEntry":
        try:
            return cls(value["principal"], value["permission"], value["operation"],
                       value["resource_type"], value["name"],
                       value.get("pattern_type", PatternType.LITERAL.value))
        except (KeyError, TypeError) as exc:
            raise ValueError(f"not an ACL entry: {exc}") from None


def entries_to_bytes(entries: Iterable[AclEntry]) -> bytes:
    return json.dumps([e.to_json() for e in entries], sort_keys=True).encode()


def entries_from_bytes(data: bytes) -> list[AclEntry]:
    try:
        value = json.loads(data)
    except ValueError:
        raise ValueError("ACL entries are a JSON list") from None
    if not isinstance(value, list):
        raise ValueError("ACL entries are a JSON list")
    return [AclEntry.from_json(v) for v in value]


@dataclass(frozen=True)
class Decision:
    allowed: bool
    why: str                      # for the broker's log (never sent to the client)


class Authorizer:
    """The decisions of a set of entries (module docstring). Immutable: a
    new set of entries (a ZooKeeper watch) makes a new Authorizer."""

    def __init__(self, entries: Iterable[AclEntry] = (), super_users: Iterable[str] = (),
                 allow_if_no_acl: bool = False) -> None:
        self.entries = tuple(entries)
        self.super_users = frozenset(validate_principal(p) for p in super_users)
        self.allow_if_no_acl = allow_if_no_acl
        # per resource type: literal entries by name, "*" entries, prefixed
        # entries (a decision looks at those that can name the resource,
        # not at every entry: a broker checks on its event loop)
        self._literal: dict[ResourceType, dict[str, list[AclEntry]]] = {
            t: {} for t in ResourceType}
        self._wildcard: dict[ResourceType, list[AclEntry]] = {t: [] for t in ResourceType}
        self._prefixed: dict[ResourceType, list[AclEntry]] = {t: [] for t in ResourceType}
        for entry in self.entries:
            t = entry.resource_type
            if entry.pattern_type is PatternType.PREFIXED:
                self._prefixed[t].append(entry)
            elif entry.name == WILDCARD:
                self._wildcard[t].append(entry)
            else:
                self._literal[t].setdefault(entry.name, []).append(entry)

    def authorize(self, principal: str, operation: Operation | str,
                  resource_type: ResourceType | str, name: str) -> Decision:
        operation, resource_type = Operation(operation), ResourceType(resource_type)
        what = f"{principal} {operation.value} {resource_type.value} {name!r}"
        if principal in self.super_users:
            return Decision(True, f"{what}: a super user")
        named = (self._literal[resource_type].get(name, []) + self._wildcard[resource_type]
                 + [e for e in self._prefixed[resource_type] if name.startswith(e.name)])
        mine = [e for e in named if e.principal in (principal, ANY_PRINCIPAL)]
        for entry in mine:
            if entry.permission is Permission.DENY and entry.covers(operation):
                return Decision(False, f"{what}: denied by {entry.to_json()}")
        for entry in mine:
            if entry.permission is Permission.ALLOW and entry.covers(operation):
                return Decision(True, f"{what}: allowed by {entry.to_json()}")
        if not named and self.allow_if_no_acl:
            return Decision(True, f"{what}: no entry names it (allow_if_no_acl)")
        return Decision(False, f"{what}: no entry allows it")
