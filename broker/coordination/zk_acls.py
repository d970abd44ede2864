"""Who may read and change which ZooKeeper nodes (docs/security.md,
"ZooKeeper"): identities and the ACL of every path.

ZooKeeper's *digest* scheme needs no server configuration: a client adds
the credential ``user:password`` to its session, and an ACL entry names
``digest:user:<base64 of SHA-1 of "user:password">``. A component is given
its identity in a file holding ``user:password`` (its setting
``zookeeper_auth_file``); without one it connects as before, and the nodes
it creates are open to everyone (ZooKeeper's default).

Two kinds of identity:

* the **cluster** identity: the brokers and the operators' tools (topics,
  users, ACLs, reassignments). It owns the cluster's records;
* a **client** identity: a consumer group's members (the mirror, the audit,
  the loader, an application) own their group's records.

The ACL of each path, for nodes created by an identity I (``acl_for``)::

    /brokers/**, /replication/**     I all, everyone read   (the brokers' own:
                                                            clients read them to
                                                            find leaders)
    /security/**                     I all, nobody else     (credentials, ACLs)
    /consumers                       I all, everyone read and create
                                                           (any group may start)
    /consumers/<group>/**            I all, everyone read   (its members share I)
    anything else                    I all, everyone read   (the mirrors' marks,
                                                            /mirrored, made with
                                                            their identity)

(The schema registry stands alone and makes its /schemas the same way with
an identity of its own: schemas/stores.py.)

ZooKeeper's ACLs are per node, not inherited: creating a child needs
``create`` on its parent, deleting one ``delete`` on its parent, so a
stranger can neither register a broker, nor delete a group's offsets, nor
add a user. Reading a node's children needs ``read`` on it: the users'
names are private too. ZooKeeper itself must still be reachable only from
the pipeline's hosts: anyone may read the public records, and a client
without credentials may create a group of its own.
"""
from __future__ import annotations

import base64
import hashlib

from kazoo.security import ACL, OPEN_ACL_UNSAFE, Id, Permissions, make_acl, make_digest_acl

SCHEME = "digest"
_WORLD = Id("world", "anyone")


def read_auth_file(path: str) -> tuple[str, str]:
    """(user, password) from a file holding ``user:password`` on its first
    line; ValueError saying why not."""
    try:
        with open(path, encoding="utf-8") as f:
            line = f.readline().rstrip("\r\n")
    except OSError as exc:
        raise ValueError(f"zookeeper_auth_file {path}: {exc.strerror or exc}") from None
    user, sep, password = line.partition(":")
    if not sep or not user or not password:
        raise ValueError(f"zookeeper_auth_file {path}: its first line must be "
                         f"user:password")
    return user, password


def digest_id(user: str, password: str) -> str:
    """The id a digest ACL entry names for ``user`` (ZooKeeper's
    DigestAuthenticationProvider: base64 of SHA-1 of "user:password")."""
    digest = hashlib.sha1(f"{user}:{password}".encode()).digest()
    return f"{user}:{base64.b64encode(digest).decode()}"


class Identity:
    """A component's ZooKeeper identity, or the lack of one (None user)."""

    def __init__(self, user: str | None = None, password: str | None = None) -> None:
        self.user = user
        self._password = password

    @classmethod
    def from_file(cls, path: str) -> "Identity":
        """The identity in ``path``; no identity for an empty path."""
        return cls(*read_auth_file(path)) if path else cls()

    @property
    def secured(self) -> bool:
        return self.user is not None

    def auth_data(self) -> list[tuple[str, str]] | None:
        """What kazoo's ``auth_data`` takes."""
        return [(SCHEME, f"{self.user}:{self._password}")] if self.secured else None

    def owner(self) -> ACL:
        return make_digest_acl(self.user, self._password, all=True)

    def default_acl(self) -> list[ACL] | None:
        """kazoo's ``default_acl`` for this identity's client: what it
        creates where the policy says nothing special. None without an
        identity (kazoo's default: open)."""
        if not self.secured:
            return None
        return [self.owner(), make_acl("world", "anyone", read=True)]


def acl_for(client, path: str) -> list[ACL]:
    """The ACL of ``path`` (relative to the cluster's chroot) for a node
    ``client`` creates (module docstring): derived from the client's
    ``default_acl`` (its owners are its digest entries), so that code which
    holds only the client gets the policy right."""
    owners = [a for a in (client.default_acl or ()) if a.id.scheme == SCHEME]
    if not owners:
        return list(OPEN_ACL_UNSAFE)
    if path == "/security" or path.startswith("/security/"):
        return owners
    if path == "/consumers":
        return owners + [make_acl("world", "anyone", read=True, create=True)]
    return owners + [make_acl("world", "anyone", read=True)]


def describe(acl: list[ACL]) -> str:
    """An ACL as one line: "digest:broker=all, world:anyone=read"."""
    def perms(p: int) -> str:
        if p == Permissions.ALL:
            return "all"
        names = [n.lower() for n in ("READ", "WRITE", "CREATE", "DELETE", "ADMIN")
                 if p & getattr(Permissions, n)]
        return "+".join(names) or "none"
    return ", ".join(f"{a.id.scheme}:{a.id.id.split(':')[0]}={perms(a.perms)}" for a in acl)


def is_open(acl: list[ACL]) -> bool:
    """Whether everyone may change the node (ZooKeeper's default ACL)."""
    return any(a.id == _WORLD and a.perms & (Permissions.WRITE | Permissions.DELETE)
               for a in acl)
