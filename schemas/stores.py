"""Where a schema registry keeps its state: ZooKeeper (the default) or a file.

Both hold the same two things:

* schemas by id: ``id -> normalized schema text``, written once, never
  changed (an id is the schema's fingerprint, see registry.py);
* subjects: ``subject -> {"compatibility": level or null, "versions": [id, ...]}``,
  changed only by compare-and-set (``write_subject`` with the token that
  ``read_subject`` returned), so two registrations racing on one subject
  cannot both pass their compatibility check against the same last version.

ZooKeeper layout, under the cluster's chroot (e.g. ``/samsa/dc-a``)::

    /schemas/ids/<id>              the schema's normalized JSON
    /schemas/subjects/<subject>    the subject's JSON; its znode version is the token

The file store keeps one JSON document, rewritten atomically (write a
temporary file, fsync, rename) under an exclusive ``flock`` of a lock file
beside it, so processes on one machine may share it.

Neither store imports anything of the broker: the registry stands alone.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
from typing import Any, Iterator, Protocol
from urllib.parse import urlsplit

SubjectData = dict[str, Any]


class StoreError(RuntimeError):
    """The store cannot be read or written (ZooKeeper down, a bad file)."""


class IdCollisionError(StoreError):
    """Two different schemas with the same fingerprint id."""


class Store(Protocol):
    def get_schema(self, schema_id: int) -> str | None: ...
    def add_schema(self, schema_id: int, text: str) -> None: ...
    def read_subject(self, subject: str) -> tuple[SubjectData | None, Any]: ...
    def write_subject(self, subject: str, data: SubjectData, token: Any) -> bool: ...
    def list_subjects(self) -> list[str]: ...
    def list_schema_ids(self) -> list[int]: ...
    def close(self) -> None: ...


def _collision(schema_id: int) -> IdCollisionError:
    return IdCollisionError(
        f"schema id {schema_id} is already taken by a different schema (a fingerprint "
        f"collision, about one in 2^32 per pair of schemas): change the new schema's doc "
        f"to give it another id")


# --------------------------------------------------------------------------- file

class FileStore:
    """The registry in one JSON file (local use: a laptop, a test, the demo)."""

    def __init__(self, path: str) -> None:
        self.path = os.path.abspath(path)
        self.lock_path = self.path + ".lock"

    @contextlib.contextmanager
    def _locked(self) -> Iterator[dict]:
        try:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            lock = open(self.lock_path, "a")
        except OSError as exc:
            raise StoreError(f"cannot write the schema registry file {self.path}: "
                             f"{exc.strerror or exc}") from None
        with lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield self._read()
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _read(self) -> dict:
        try:
            with open(self.path) as f:
                data = json.load(f)
        except FileNotFoundError:
            return {"schemas": {}, "subjects": {}}
        except (OSError, ValueError) as exc:
            raise StoreError(f"cannot read the schema registry file {self.path}: {exc}") \
                from None
        if not isinstance(data, dict) or not {"schemas", "subjects"} <= data.keys():
            raise StoreError(f"{self.path} is not a schema registry file")
        return data

    def _write(self, data: dict) -> None:
        tmp = self.path + ".tmp"
        try:
            with open(tmp, "w") as f:
                json.dump(data, f, indent=1, sort_keys=True)
                f.write("\n")
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except OSError as exc:
            raise StoreError(f"cannot write the schema registry file {self.path}: {exc}") \
                from None

    def get_schema(self, schema_id: int) -> str | None:
        return self._read()["schemas"].get(str(schema_id))

    def add_schema(self, schema_id: int, text: str) -> None:
        with self._locked() as data:
            old = data["schemas"].get(str(schema_id))
            if old == text:
                return
            if old is not None:
                raise _collision(schema_id)
            data["schemas"][str(schema_id)] = text
            self._write(data)

    def read_subject(self, subject: str) -> tuple[SubjectData | None, Any]:
        found = self._read()["subjects"].get(subject)
        return found, json.dumps(found, sort_keys=True)

    def write_subject(self, subject: str, data: SubjectData, token: Any) -> bool:
        with self._locked() as current:
            if json.dumps(current["subjects"].get(subject), sort_keys=True) != token:
                return False     # changed since it was read
            current["subjects"][subject] = data
            self._write(current)
            return True

    def list_subjects(self) -> list[str]:
        return sorted(self._read()["subjects"])

    def list_schema_ids(self) -> list[int]:
        return sorted(int(i) for i in self._read()["schemas"])

    def close(self) -> None:
        pass

    def __repr__(self) -> str:
        return f"FileStore({self.path!r})"


# --------------------------------------------------------------------------- ZooKeeper

class ZooKeeperStore:
    """The registry in a cluster's ZooKeeper, under ``<chroot>/schemas``
    (``connect`` is ``host:port[,host:port...][/chroot]``; the chroot and
    the registry's nodes are created when missing)."""

    def __init__(self, connect: str, timeout: float = 10.0, root: str = "/schemas") -> None:
        from kazoo.client import KazooClient
        from kazoo.handlers.threading import KazooTimeoutError
        from kazoo.retry import KazooRetry
        self.connect = connect
        hosts, slash, chroot = connect.partition("/")
        # the chroot is a prefix of our paths, not kazoo's chroot: it may not exist yet
        self.root = ("/" + chroot.strip("/") if slash and chroot.strip("/") else "") + \
            "/" + root.strip("/")
        self.client = KazooClient(hosts=hosts, timeout=timeout,
                                  connection_retry=KazooRetry(max_tries=3, delay=0.1,
                                                              max_delay=1),
                                  command_retry=KazooRetry(max_tries=3, delay=0.1, max_delay=1))
        try:
            self.client.start(timeout=timeout)
        except KazooTimeoutError:
            self.client.close()
            raise StoreError(f"cannot reach ZooKeeper at {connect} within {timeout:.0f} s") \
                from None
        try:
            self.client.ensure_path(f"{self.root}/ids")
            self.client.ensure_path(f"{self.root}/subjects")
        except Exception as exc:
            self.close()
            raise StoreError(f"cannot create {self.root} in ZooKeeper at {connect}: {exc}") \
                from None

    def _call(self, what: str, fn, *args, **kwargs):
        from kazoo.exceptions import KazooException, NoNodeError, NodeExistsError, \
            BadVersionError
        try:
            return fn(*args, **kwargs)
        except (NoNodeError, NodeExistsError, BadVersionError):
            raise
        except KazooException as exc:
            raise StoreError(f"ZooKeeper at {self.connect}: {what} failed: "
                             f"{type(exc).__name__} {exc}") from None

    def get_schema(self, schema_id: int) -> str | None:
        from kazoo.exceptions import NoNodeError
        try:
            data, _ = self._call("read a schema", self.client.get, f"{self.root}/ids/{schema_id}")
        except NoNodeError:
            return None
        return data.decode()

    def add_schema(self, schema_id: int, text: str) -> None:
        from kazoo.exceptions import NodeExistsError
        try:
            self._call("add a schema", self.client.create, f"{self.root}/ids/{schema_id}",
                       text.encode())
        except NodeExistsError:
            if self.get_schema(schema_id) != text:
                raise _collision(schema_id) from None

    def read_subject(self, subject: str) -> tuple[SubjectData | None, Any]:
        from kazoo.exceptions import NoNodeError
        try:
            data, stat = self._call("read a subject", self.client.get,
                                    f"{self.root}/subjects/{subject}")
        except NoNodeError:
            return None, None
        return json.loads(data), stat.version

    def write_subject(self, subject: str, data: SubjectData, token: Any) -> bool:
        from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
        path = f"{self.root}/subjects/{subject}"
        payload = json.dumps(data, sort_keys=True).encode()
        try:
            if token is None:
                self._call("create a subject", self.client.create, path, payload)
            else:
                self._call("update a subject", self.client.set, path, payload, version=token)
        except (BadVersionError, NodeExistsError, NoNodeError):
            return False
        return True

    def list_subjects(self) -> list[str]:
        return sorted(self._call("list subjects", self.client.get_children,
                                 f"{self.root}/subjects"))

    def list_schema_ids(self) -> list[int]:
        return sorted(int(i) for i in self._call("list schemas", self.client.get_children,
                                                 f"{self.root}/ids"))

    def close(self) -> None:
        try:
            self.client.stop()
        finally:
            self.client.close()

    def __repr__(self) -> str:
        return f"ZooKeeperStore({self.connect!r})"


# --------------------------------------------------------------------------- by URL

def open_store(url: str, timeout: float = 10.0) -> Store:
    """``zookeeper://host:port[,host:port...][/chroot]`` or ``file:PATH`` (a
    bare path is a file too)."""
    parts = urlsplit(url)
    if parts.scheme in ("zookeeper", "zk"):
        if not parts.netloc:
            raise ValueError(f"bad registry URL {url!r}: zookeeper://host:port[/chroot]")
        return ZooKeeperStore(parts.netloc + (parts.path.rstrip("/") or ""), timeout)
    if parts.scheme == "file":
        return FileStore(parts.path or parts.netloc)
    if parts.scheme == "":
        return FileStore(url)
    raise ValueError(f"bad registry URL {url!r}: zookeeper://host:port[/chroot] or file:PATH")
