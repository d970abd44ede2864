"""The security records in ZooKeeper: each user's SCRAM credential and the
access control entries, written by the ``users`` and ``acls`` tools and
followed by every broker (``SecurityCache``). The layout, in the cluster's
chroot (broker/coordination/paths.py)::

    /security/users/<user>                                persistent
        {"SCRAM-SHA-512": "<ScramCredential.to_text()>"}           (JSON)
    /security/acls/<resource type>/<pattern type>:<name>  persistent
        entries_to_bytes([...]): every entry of that resource pattern (JSON list)

e.g. /security/acls/topic/literal:events, /security/acls/group/prefixed:pv-,
/security/acls/cluster/literal:cluster. A user name and an ACL resource name
name a node: neither may hold '/' nor a character ZooKeeper refuses, and a
user may not be called "." or "..".

Writers are safe against each other: an ACL node is read, changed and
written back only if its version is still the one read (else read again),
so two tools adding entries to one resource at once lose none.

Never stored: a password (only what SCRAM's server keeps). Never done by the
cache: fail as a whole because of one node. A node it cannot read (bad JSON,
a bad credential, an entry of another resource than the node's name says) is
logged (a warning: the path and why) and counts as absent: every broker then
holds the same records whenever it started, and a credential that cannot be
read lets nobody in.

``SecurityCache`` states::

    NEW --start()--> FOLLOWING (``ready`` set once every record was read once)
    FOLLOWING --connection lost (SUSPENDED)--> KEEPING --same session back--> FOLLOWING
    FOLLOWING/KEEPING --session LOST--> KEEPING --new session--> FOLLOWING
    any --stop()--> STOPPED (keeps its last records; calls nobody back)

KEEPING answers from what it held when ZooKeeper went away, unchanged.
Back to FOLLOWING, kazoo's ``ChildrenWatch`` and ``DataWatch`` (which listen
to the connection's state) read their nodes again, and register their
watches again on a new session, so what changed meanwhile is seen then.
"""
from __future__ import annotations

import json
import logging
import os
import re
import threading
from functools import partial
from typing import Callable, Iterable

from kazoo.client import KazooClient
from kazoo.exceptions import (BadVersionError, KazooException, NodeExistsError,
                              NoNodeError)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import ZnodeStat
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

from broker.coordination import paths
from broker.coordination.zk_acls import acl_for
from broker.protocol.scram import MECHANISM, ScramCredential, validate_user
from broker.security.acl import (AclEntry, Authorizer, PatternType, ResourceType,
                                 entries_from_bytes, entries_to_bytes, validate_principal)

log = logging.getLogger(__name__)

#: the name of the cluster resource (the one AclEntry takes, besides "*"):
#: the ``acls`` tool's --cluster-resource
CLUSTER_RESOURCE = "cluster"
#: what ZooKeeper refuses in a node name (its PathUtils.validatePath); a
#: character beyond U+FFFF reaches it as a surrogate pair, refused too
_REFUSED_BY_ZOOKEEPER = re.compile(
    "[\x00-\x1f\x7f-\x9f\ud800-\uf8ff\ufff0-\uffff\U00010000-\U0010ffff]")


# ------------------------------------------------------------------ names

def _check_node_name(text: str, what: str) -> str:
    if "/" in text:
        raise ValueError(f"a {what} must not contain '/' (it names a ZooKeeper node): "
                         f"{text!r}")
    bad = _REFUSED_BY_ZOOKEEPER.search(text)
    if bad:
        raise ValueError(f"a {what} must not contain {bad.group()!r} (ZooKeeper refuses it "
                         f"in a node name): {text!r}")
    return text


def check_user_name(user: str) -> str:
    """``user`` if it can name a user here: scram.validate_user's rule (1 to
    255 printable characters), no '/', not "." nor ".."; ValueError saying why not."""
    validate_user(user)
    if user in (".", ".."):
        raise ValueError(f"a user name cannot be {user!r} (ZooKeeper refuses it as a "
                         f"node name)")
    # names that would read as another principal: the unauthenticated one,
    # every principal (User:*), a certificate's subject (User:CN=...)
    if user in ("ANONYMOUS", "*") or "=" in user or "," in user:
        raise ValueError(f"a user name cannot be {user!r}: it would read as another "
                         f"principal (ANONYMOUS, * and names with '=' or ',' are kept apart)")
    return _check_node_name(user, "user name")


def check_resource_name(name: str) -> str:
    """``name`` if it can name an ACL's resource: not empty, no '/';
    ValueError saying why not."""
    if not isinstance(name, str) or not name:
        raise ValueError("an ACL's resource name must not be empty")
    return _check_node_name(name, "resource name")


def _acl_path(entry: AclEntry) -> str:
    return paths.acl_path(entry.resource_type.value, entry.pattern_type.value,
                          check_resource_name(entry.name))


def _order(entry: AclEntry) -> tuple[str, ...]:
    """The one order entries are listed and stored in."""
    return (entry.resource_type.value, entry.pattern_type.value, entry.name, entry.principal,
            entry.permission.value, entry.operation.value)


# ------------------------------------------------------------------ node contents

def _credential_bytes(credential: ScramCredential) -> bytes:
    return json.dumps({MECHANISM: credential.to_text()}, sort_keys=True).encode()


def _credential_from(path: str, data: bytes) -> ScramCredential:
    """The credential a user node holds; ValueError (naming the path) when
    the node holds something else."""
    try:
        check_user_name(path.rpartition("/")[2])
        value = json.loads(data)
        if not isinstance(value, dict) or not isinstance(value.get(MECHANISM), str):
            raise ValueError(f"not a JSON object with a {MECHANISM} credential")
        return ScramCredential.from_text(value[MECHANISM])
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{path}: {exc}") from None


def _entries_from(path: str, data: bytes) -> list[AclEntry]:
    """The entries an ACL node holds, each of the node's resource pattern;
    ValueError (naming the path) otherwise."""
    parent, _, node = path.rpartition("/")
    try:
        resource_type = ResourceType(parent.rpartition("/")[2])
        pattern_type, name = paths.parse_acl_node_name(node)
        pattern = (resource_type, PatternType(pattern_type), name)
        entries = entries_from_bytes(data)
    except (ValueError, TypeError, AttributeError) as exc:   # (a principal not a string)
        raise ValueError(f"{path}: {exc}") from None
    for entry in entries:
        if (entry.resource_type, entry.pattern_type, entry.name) != pattern:
            raise ValueError(f"{path}: holds an entry of another resource pattern: "
                             f"{entry.to_json()}")
    return entries


# ------------------------------------------------------------------ users

def set_user(client: KazooClient, user: str, credential: ScramCredential) -> bool:
    """Store ``user``'s credential: True when the user is new, False when an
    earlier credential was replaced. (A create whose answer was lost, then
    retried, finds its own node and says "replaced".)"""
    path = paths.user_path(check_user_name(user))
    data = _credential_bytes(credential)
    while True:
        try:
            client.retry(client.create, path, data, makepath=True,
                         acl=acl_for(client, path))
            return True
        except NodeExistsError:
            pass
        try:
            client.retry(client.set, path, data)
            return False
        except NoNodeError:
            continue              # removed between the two: create it again


def remove_user(client: KazooClient, user: str) -> bool:
    """Remove ``user``: True when it was there, False when it was not."""
    try:
        client.retry(client.delete, paths.user_path(check_user_name(user)))
        return True
    except NoNodeError:
        return False


def list_users(client: KazooClient) -> list[str]:
    """Every user with a credential, sorted."""
    try:
        return sorted(client.retry(client.get_children, paths.SECURITY_USERS))
    except NoNodeError:
        return []


def read_credential(client: KazooClient, user: str) -> ScramCredential | None:
    """``user``'s credential; None when there is no such user; ValueError
    when its node holds something else."""
    path = paths.user_path(check_user_name(user))
    try:
        data, _ = client.retry(client.get, path)
    except NoNodeError:
        return None
    return _credential_from(path, data)


# ------------------------------------------------------------------ ACLs

def _by_node(entries: Iterable[AclEntry]) -> dict[str, list[AclEntry]]:
    """The entries by the path of their node, each once, in their order."""
    nodes: dict[str, list[AclEntry]] = {}
    for entry in entries:
        wanted = nodes.setdefault(_acl_path(entry), [])
        if entry not in wanted:
            wanted.append(entry)
    return nodes


def _read_node(client: KazooClient, path: str) -> tuple[list[AclEntry], ZnodeStat | None]:
    """An ACL node's entries and its stat; ([], None) when there is no node."""
    try:
        data, stat = client.retry(client.get, path)
    except NoNodeError:
        return [], None
    return _entries_from(path, data), stat


def _write_node(client: KazooClient, path: str, entries: list[AclEntry],
                read: ZnodeStat | None) -> bool:
    """Make ``path`` hold ``entries`` (none: delete it) if it is still as it
    was read (``read`` None: still absent). False when another writer came
    between: read it again and redo the change on what they wrote.

    A write whose answer is lost is retried by ``client.retry``, and may then
    fail against itself (NodeExists, BadVersion): the caller reads its own
    write back and finds nothing left to do, so the entries are right but
    counted as already there."""
    data = entries_to_bytes(sorted(entries, key=_order))
    try:
        if read is None:
            client.retry(client.create, path, data, makepath=True, acl=acl_for(client, path))
        elif entries:
            client.retry(client.set, path, data, version=read.version)
        else:
            client.retry(client.delete, path, version=read.version)
        return True
    except (BadVersionError, NodeExistsError, NoNodeError):
        return False


def add_acls(client: KazooClient, entries: Iterable[AclEntry]) -> int:
    """Add ``entries``: how many were new (an entry already there is not
    stored twice). Safe against other writers of the same nodes. ValueError
    for a bad resource name, or a node that holds something else (left as it is)."""
    added = 0
    for path, wanted in _by_node(entries).items():
        while True:
            current, stat = _read_node(client, path)
            new = [e for e in wanted if e not in current]
            if not new or _write_node(client, path, current + new, stat):
                added += len(new)
                break
    return added


def remove_acls(client: KazooClient, entries: Iterable[AclEntry]) -> int:
    """Remove ``entries``: how many were there. A node left without entries
    is deleted (only if no one wrote to it since it was read)."""
    removed = 0
    for path, unwanted in _by_node(entries).items():
        while True:
            current, stat = _read_node(client, path)
            kept = [e for e in current if e not in unwanted]
            if stat is None or len(kept) == len(current) \
                    or _write_node(client, path, kept, stat):
                removed += len(current) - len(kept)
                break
    return removed


def list_acls(client: KazooClient, principal: str | None = None,
              resource_type: ResourceType | str | None = None,
              name: str | None = None) -> list[AclEntry]:
    """The entries, sorted (resource type, pattern type, name, principal,
    permission, operation), only those of ``principal`` (exactly: a
    ``User:*`` entry is not one of ``User:alice``'s), of ``resource_type``
    and whose pattern's name is ``name`` (of either pattern type), where
    given. A node that cannot be read is logged and skipped."""
    if principal is not None:
        validate_principal(principal)
    types = list(ResourceType) if resource_type is None else [ResourceType(resource_type)]
    found: list[AclEntry] = []
    for rtype in types:
        parent = paths.acl_type_path(rtype.value)
        if name is not None:
            nodes = [paths.acl_node_name(p.value, check_resource_name(name))
                     for p in PatternType]
        else:
            try:
                nodes = client.retry(client.get_children, parent)
            except NoNodeError:
                continue
        for node in nodes:
            path = f"{parent}/{node}"
            try:
                data, _ = client.retry(client.get, path)
                entries = _entries_from(path, data)
            except NoNodeError:
                continue
            except ValueError as exc:
                log.warning("security: skipping a malformed ACL node: %s", exc)
                continue
            found += [e for e in entries if principal is None or e.principal == principal]
    return sorted(found, key=_order)


# ------------------------------------------------------------------ the cluster's secret

SECRET_BYTES = 32


def cluster_secret(client: KazooClient) -> bytes:
    """The cluster's SCRAM secret (/security/scram_secret, made once, with
    random bytes, as private as the users): every broker answers an unknown
    user with a salt derived from it, the same on every broker and after
    every restart, as a known user's salt is (scram.ScramServer)."""
    path = paths.SCRAM_SECRET
    try:
        data, _stat = client.retry(client.get, path)
    except NoNodeError:
        try:
            client.retry(client.create, path, os.urandom(SECRET_BYTES), makepath=True,
                         acl=acl_for(client, path))
        except NodeExistsError:
            pass                      # another broker made it first: read theirs
        data, _stat = client.retry(client.get, path)
    if len(data) < 16:
        raise ValueError(f"{path} holds {len(data)} bytes: not a secret")
    return data


# ------------------------------------------------------------------ the cache

class _Watch:
    """Names one kazoo watch of the cache: a callback whose watch is not the
    one the cache holds for its path now is stale, and stops that watch.
    ``czxid``: for a parent's ChildrenWatch, the parent node it was set on."""
    __slots__ = ("czxid",)

    def __init__(self, czxid: int | None = None) -> None:
        self.czxid = czxid


def _parent_of(path: str) -> str:
    return path.rpartition("/")[0]


class SecurityCache:
    """The users' credentials and the ACLs, as ZooKeeper holds them now (the
    module docstring says what it does when ZooKeeper goes away).

    Thread-safe: ``credential()``, ``authorizer`` and ``generation`` may be
    read from any thread at any time (a dict lookup, a reference). The
    records change on kazoo's threads, under the cache's lock; kazoo is
    never called with it held (a watch's first read calls the cache back).

    ``on_change``: callables, called with no argument after each change, on
    kazoo's threads (maybe two at once): quick, thread-safe, and an exception
    is logged, not raised. ``generation`` grows by one for each record (a
    user, an ACL node) added, changed or removed, first reads included.

    Each user and ACL node has a kazoo DataWatch, and kazoo starts a thread
    for each on every reconnection: meant for hundreds of records, not
    hundreds of thousands.
    """

    def __init__(self, client: KazooClient | None, super_users: Iterable[str] = (),
                 allow_if_no_acl: bool = False) -> None:
        self._client = client
        self._super_users = tuple(super_users)
        self._allow_if_no_acl = allow_if_no_acl
        self._lock = threading.Lock()
        self._credentials: dict[str, ScramCredential] = {}
        self._acl_nodes: dict[str, tuple[AclEntry, ...]] = {}       # by node path
        self._authorizer = Authorizer((), self._super_users, allow_if_no_acl)
        self._generation = 0
        self._started = False
        self._stopped = False
        self._parents = (paths.SECURITY_USERS,
                         *(paths.acl_type_path(t.value) for t in ResourceType))
        self._children_watches: dict[str, _Watch] = {}    # by parent path
        self._node_watches: dict[str, _Watch] = {}        # by node path
        self._unread = set(self._parents)
        self.on_change: list[Callable[[], None]] = []
        self.ready = threading.Event()
        # the cluster's secret (cluster_secret), read by start(); a process's
        # own until then
        self.secret: bytes = os.urandom(SECRET_BYTES)

    # ---- reading (any thread)

    def credential(self, user: str) -> ScramCredential | None:
        return self._credentials.get(user)

    @property
    def authorizer(self) -> Authorizer:
        """The decisions of the entries held now (a new Authorizer after each
        ACL change: a caller keeps the one it took for a whole request)."""
        return self._authorizer

    @property
    def generation(self) -> int:
        return self._generation

    # ---- life

    def use_client(self, client: KazooClient) -> None:
        """The client to watch with, for a cache made before its client
        (None then): before ``start()``."""
        if self._started:
            raise RuntimeError("use_client() comes before start()")
        self._client = client

    def start(self) -> "SecurityCache":
        """Watch the records: the parents are made if missing (and waited for
        if they cannot be), then each is read. With the client connected,
        everything has been read once (``ready``) when this returns; while
        the connection is lost it waits for it (kazoo's DataWatch does)."""
        if self._started:
            raise RuntimeError("a SecurityCache starts once")
        if self._client is None:
            raise RuntimeError("a SecurityCache needs a client to start: use_client()")
        self._started = True
        for parent in self._parents:
            try:
                self._client.ensure_path(parent, acl=acl_for(self._client, parent))
            except (KazooException, KazooTimeoutError) as exc:
                log.warning("security: cannot make %s (%s: %s): waiting for it", parent,
                            type(exc).__name__, exc)
        try:
            self.secret = cluster_secret(self._client)
        except (KazooException, KazooTimeoutError) as exc:
            log.warning("security: cannot read the cluster's secret (%s: %s): this broker "
                        "uses one of its own until it restarts", type(exc).__name__, exc)
        for parent in self._parents:
            # a DataWatch on the parent, which may be missing: a ChildrenWatch
            # stops for good, silently, when its node is gone
            DataWatch(self._client, parent, partial(self._on_parent, parent))
        return self

    def stop(self) -> None:
        """No more changes, no more calls back; the records stay as they
        are. Each kazoo watch ends the next time it fires."""
        with self._lock:
            self._stopped = True

    # ---- kazoo's callbacks (its threads)

    def _on_parent(self, parent: str, _data: bytes | None, stat: ZnodeStat | None,
                   _event=None) -> bool | None:
        try:
            if self._stopped:
                return False
            if stat is None:
                # removed (by hand): nothing under it any more. Its ChildrenWatch
                # has stopped; the parent made again gets a new one (below).
                with self._lock:
                    self._children_watches.pop(parent, None)
                    changed = self._forget([p for p in self._node_watches
                                            if _parent_of(p) == parent])
                self._notify(changed)
                self._mark_read(parent)
                return None
            with self._lock:
                current = self._children_watches.get(parent)
                if current is not None and current.czxid == stat.czxid:
                    return None       # the same node, its data written: its watch lives on
                watch = self._children_watches[parent] = _Watch(stat.czxid)
            try:
                ChildrenWatch(self._client, parent, partial(self._on_children, parent, watch))
            except (KazooException, KazooTimeoutError) as exc:
                # its first read failed with the connection: the ChildrenWatch
                # already listens to the connection's state and reads again
                # once connected
                log.warning("security: reading %s failed (%s): again once reconnected",
                            parent, type(exc).__name__)
        except Exception:     # noqa: BLE001 - a watch callback must not raise
            log.exception("security: watching %s failed", parent)
        return None

    def _on_children(self, parent: str, watch: _Watch, children: list[str]) -> bool | None:
        try:
            with self._lock:
                if self._stopped or self._children_watches.get(parent) is not watch:
                    return False      # stopped, or set on a parent node since replaced
                present = {f"{parent}/{child}" for child in children}
                changed = self._forget([p for p in self._node_watches
                                        if _parent_of(p) == parent and p not in present])
                new = {p: _Watch() for p in sorted(present - self._node_watches.keys())}
                self._node_watches.update(new)
            self._notify(changed)
            for path, node_watch in new.items():
                try:
                    # reads the node now, on this thread, and calls _on_node
                    DataWatch(self._client, path, partial(self._on_node, path, node_watch))
                except Exception:     # noqa: BLE001 - the other nodes are still read
                    log.exception("security: cannot watch %s", path)
                    with self._lock:
                        if self._node_watches.get(path) is node_watch:
                            del self._node_watches[path]    # the next children change retries
            self._mark_read(parent)
        except Exception:     # noqa: BLE001 - a watch callback must not raise
            log.exception("security: following %s failed", parent)
        return None

    def _on_node(self, path: str, watch: _Watch, data: bytes | None,
                 stat: ZnodeStat | None, _event=None) -> bool | None:
        try:
            if stat is None:
                # Gone. This watch ends: if the name is made again, the parent's
                # ChildrenWatch sees it and starts a new one. (Ending it and
                # dropping its _Watch here, not on the parent's next call, is
                # what lets a node deleted and made again between two of the
                # parent's reads be watched again.)
                with self._lock:
                    if self._stopped or self._node_watches.get(path) is not watch:
                        return False
                    changed = self._forget([path])
                self._notify(changed)
                return False
            record = self._parse(path, data or b"")
            with self._lock:
                if self._stopped or self._node_watches.get(path) is not watch:
                    return False
                changed = self._store(path, record)
            self._notify(changed)
        except Exception:     # noqa: BLE001 - a watch callback must not raise
            log.exception("security: following %s failed", path)
        return None

    # ---- the records

    @staticmethod
    def _parse(path: str, data: bytes) -> ScramCredential | tuple[AclEntry, ...] | None:
        """A node's record; None (logged) when it cannot be read."""
        try:
            if _parent_of(path) == paths.SECURITY_USERS:
                return _credential_from(path, data)
            return tuple(sorted(_entries_from(path, data), key=_order))
        except ValueError as exc:
            log.warning("security: skipping a malformed node (it counts as absent): %s", exc)
            return None

    def _store(self, path: str, record) -> bool:
        """Hold ``record`` for ``path`` (None: nothing); whether that changed
        anything. The lock is held."""
        if _parent_of(path) == paths.SECURITY_USERS:
            user = path.rpartition("/")[2]
            if self._credentials.get(user) == record:
                return False
            if record is None:
                del self._credentials[user]
            else:
                self._credentials[user] = record
        else:
            if self._acl_nodes.get(path) == record:
                return False
            if record is None:
                del self._acl_nodes[path]
            else:
                self._acl_nodes[path] = record
            entries = sorted((e for node in self._acl_nodes.values() for e in node), key=_order)
            # one assignment: a reader has the old Authorizer or the new one
            self._authorizer = Authorizer(entries, self._super_users, self._allow_if_no_acl)
        # after the records: a reader that sees the new generation reads the
        # new records (one that keeps decisions by generation never keeps an
        # old decision under the new number)
        self._generation += 1
        return True

    def _forget(self, gone: list[str]) -> bool:
        """Stop following these nodes (their watches end when they next fire)
        and drop their records. The lock is held."""
        changed = False
        for path in gone:
            self._node_watches.pop(path, None)
            changed |= self._store(path, None)
        return changed

    def _mark_read(self, parent: str) -> None:
        with self._lock:
            self._unread.discard(parent)
            done = not self._unread
        if done:
            self.ready.set()

    def _notify(self, changed: bool) -> None:
        if not changed or self._stopped:
            return
        for callback in list(self.on_change):
            try:
                callback()
            except Exception:     # noqa: BLE001 - one listener must not stop the others
                log.exception("security: an on_change callback failed")
