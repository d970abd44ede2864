"""Where a schema registry keeps its state: ZooKeeper (the default) or a file.

Both hold the same three things:

* schemas by id: ``id -> normalized schema text``, written once, never
  changed (an id is the schema's fingerprint, see registry.py);
* subjects: ``subject -> {"compatibility": level or null, "versions": [id, ...]}``,
  changed only by compare-and-set (``write_subject`` with the token that
  ``read_subject`` returned), so two registrations racing on one subject
  cannot both pass their compatibility check against the same last version;
* the registry's own settings: ``{"compatibility": level}``, the level of
  every subject that has none of its own (absent: BACKWARD). The last
  writer wins.

ZooKeeper layout, under the cluster's chroot (e.g. ``/samsa/dc-a``)::

    /schemas/ids/<id>              the schema's normalized JSON
    /schemas/subjects/<subject>    the subject's JSON; its znode version is the token
    /schemas/config                the registry's settings (JSON), when set

The file store keeps one JSON document, rewritten atomically (write a
temporary file, fsync, rename) under an exclusive ``flock`` of a lock file
beside it, so processes on one machine may share it.

The REST store (``http://HOST:PORT``) is a client of a registry served by
``python -m schemas serve`` (or any server of Confluent's Schema Registry
API): what it stores is the server's. A registration is one POST, which the
server checks and applies by its own compare-and-set; a schema is stored
only with the subject version that holds it. A secured server (HTTPS, users:
docs/security.md) is reached as Confluent's clients do: the user in the
URL (``https://reader@registry:8081``; a password there too is taken, but
shows in settings and process lists), its password from the file named by
``$SAMSA_SCHEMA_REGISTRY_PASSWORD_FILE`` (first line), the server's
certificate checked against ``$SAMSA_SCHEMA_REGISTRY_CA_FILE`` (default: the
system's authorities). Messages name the URL without its user information.

With a ZooKeeper identity (a file holding ``user:password``, named by
``$SAMSA_SCHEMA_REGISTRY_ZOOKEEPER_AUTH_FILE`` or the registry service's
``zookeeper_auth_file``), the ZooKeeper store writes ``/schemas`` so that
only that identity may change it; everyone may still read it (producers and
consumers read schemas without one). docs/security.md, "ZooKeeper".

Over TLS to ZooKeeper's TLS port when ``$SAMSA_ZOOKEEPER_TLS_CA_FILE`` is
set (with ``$SAMSA_ZOOKEEPER_TLS_CERT_FILE`` and ``..._KEY_FILE`` for a
client certificate), as the broker's tools.

Neither store imports anything of the broker: the registry stands alone.
"""
from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import ssl
import urllib.error
import urllib.request
from typing import Any, Iterator, Protocol
from urllib.parse import quote, unquote, urlsplit, urlunsplit

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
    def read_config(self) -> dict[str, Any]: ...
    def write_config(self, config: dict[str, Any]) -> None: ...
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

    def read_config(self) -> dict[str, Any]:
        return dict(self._read().get("config") or {})

    def write_config(self, config: dict[str, Any]) -> None:
        with self._locked() as data:
            data["config"] = dict(config)
            self._write(data)

    def close(self) -> None:
        pass

    def __repr__(self) -> str:
        return f"FileStore({self.path!r})"


# --------------------------------------------------------------------------- ZooKeeper

class ZooKeeperStore:
    """The registry in a cluster's ZooKeeper, under ``<chroot>/schemas``
    (``connect`` is ``host:port[,host:port...][/chroot]``; the chroot and
    the registry's nodes are created when missing)."""

    def __init__(self, connect: str, timeout: float = 10.0, root: str = "/schemas",
                 reconnect_forever: bool = False, auth_file: str = "",
                 tls_options: dict | None = None) -> None:
        """``tls_options``: kazoo's TLS options (the caller's settings'); None:
        from the environment (``zookeeper_tls_options``)."""
        from kazoo.client import KazooClient
        from kazoo.handlers.threading import KazooTimeoutError
        from kazoo.retry import KazooRetry
        from kazoo.security import OPEN_ACL_UNSAFE
        self.connect = connect
        hosts, slash, chroot = connect.partition("/")
        chroot = "/" + chroot.strip("/") if slash and chroot.strip("/") else ""
        # the chroot is a prefix of our paths, not kazoo's chroot: it may not exist yet
        self.root = chroot + "/" + root.strip("/")
        self.auth_file = auth_file
        auth_data, default_acl = zookeeper_identity(auth_file) if auth_file else (None, None)
        # a command gives up on a lost ZooKeeper after a few tries; a service
        # (python -m schemas serve) keeps reconnecting, whatever the outage
        self.client = KazooClient(hosts=hosts, timeout=timeout, auth_data=auth_data,
                                  default_acl=default_acl,
                                  **(zookeeper_tls_options() if tls_options is None
                                     else tls_options),
                                  connection_retry=KazooRetry(
                                      max_tries=-1 if reconnect_forever else 3, delay=0.1,
                                      max_delay=1),
                                  command_retry=KazooRetry(max_tries=3, delay=0.1, max_delay=1))
        try:
            self.client.start(timeout=timeout)
        except KazooTimeoutError:
            self.client.close()
            raise StoreError(f"cannot reach ZooKeeper at {connect} within {timeout:.0f} s") \
                from None
        try:
            if chroot:
                # the cluster's chroot stays open, as the brokers make it
                # (owned by the registry, it would lock the brokers out)
                self.client.ensure_path(chroot, acl=OPEN_ACL_UNSAFE)
            self.client.ensure_path(f"{self.root}/ids")
            self.client.ensure_path(f"{self.root}/subjects")
        except Exception as exc:
            self.close()
            raise StoreError(f"cannot create {self.root} in ZooKeeper at {connect}: "
                             f"{type(exc).__name__} {exc}") from None

    def _call(self, what: str, fn, *args, **kwargs):
        from kazoo.exceptions import KazooException, NoAuthError, NoNodeError, \
            NodeExistsError, BadVersionError
        try:
            return fn(*args, **kwargs)
        except (NoNodeError, NodeExistsError, BadVersionError):
            raise
        except NoAuthError:
            who = (f"the identity of {self.auth_file}" if self.auth_file else
                   f"a client without an identity (${ZOOKEEPER_AUTH_ENV})")
            raise StoreError(f"ZooKeeper at {self.connect}: {what} refused: {self.root} is "
                             f"not writable by {who}") from None
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

    def read_config(self) -> dict[str, Any]:
        from kazoo.exceptions import NoNodeError
        try:
            data, _ = self._call("read the settings", self.client.get, f"{self.root}/config")
        except NoNodeError:
            return {}
        return json.loads(data) if data else {}

    def write_config(self, config: dict[str, Any]) -> None:
        from kazoo.exceptions import NodeExistsError
        path = f"{self.root}/config"
        payload = json.dumps(config, sort_keys=True).encode()
        try:
            self._call("write the settings", self.client.create, path, payload)
        except NodeExistsError:
            self._call("write the settings", self.client.set, path, payload)

    def close(self) -> None:
        try:
            self.client.stop()
        finally:
            self.client.close()

    def __repr__(self) -> str:
        return f"ZooKeeperStore({self.connect!r})"


ZOOKEEPER_AUTH_ENV = "SAMSA_SCHEMA_REGISTRY_ZOOKEEPER_AUTH_FILE"


ZOOKEEPER_TLS_ENV = ("SAMSA_ZOOKEEPER_TLS_CA_FILE", "SAMSA_ZOOKEEPER_TLS_CERT_FILE",
                     "SAMSA_ZOOKEEPER_TLS_KEY_FILE")


def zookeeper_tls_options(environ: dict[str, str] | None = None) -> dict:
    """kazoo's TLS options from the environment, as the broker's tools take
    them (docs/security.md, "ZooKeeper"): ``$SAMSA_ZOOKEEPER_TLS_CA_FILE``
    (the authorities of ZooKeeper's certificate besides the system's; its
    host name is checked too), ``$SAMSA_ZOOKEEPER_TLS_CERT_FILE`` and
    ``..._KEY_FILE`` (a client certificate). Any set: TLS; none: plaintext.
    ValueError for a certificate without its key."""
    environ = os.environ if environ is None else environ
    ca_file, cert_file, key_file = (environ.get(name, "") for name in ZOOKEEPER_TLS_ENV)
    if not (ca_file or cert_file or key_file):
        return {}
    if bool(cert_file) != bool(key_file):
        raise ValueError("ZooKeeper TLS: a client certificate and its key go together "
                         "($SAMSA_ZOOKEEPER_TLS_CERT_FILE, ..._KEY_FILE)")
    return {"use_ssl": True, "ca": ca_file or None, "certfile": cert_file or None,
            "keyfile": key_file or None, "verify_certs": True, "check_hostname": True}


def zookeeper_identity(auth_file: str) -> tuple[list, list]:
    """kazoo's ``auth_data`` and ``default_acl`` for the registry's
    ZooKeeper identity, a file holding ``user:password`` on its first line
    (the digest scheme, as the brokers' identities: docs/security.md): the
    nodes it creates are changeable by it alone and readable by everyone
    (clients read schemas). ValueError saying why the file will not do.
    (The brokers read such files in broker/coordination/zk_acls.py; the
    registry stands alone, so it reads its own.)"""
    from kazoo.security import make_acl, make_digest_acl
    try:
        with open(auth_file, encoding="utf-8") as f:
            line = f.readline().rstrip("\r\n")
    except OSError as exc:
        raise ValueError(f"ZooKeeper identity {auth_file}: {exc.strerror or exc}") from None
    user, sep, password = line.partition(":")
    if not sep or not user or not password:
        raise ValueError(f"ZooKeeper identity {auth_file}: its first line must be "
                         f"user:password")
    return ([("digest", f"{user}:{password}")],
            [make_digest_acl(user, password, all=True), make_acl("world", "anyone", read=True)])


# --------------------------------------------------------------------------- REST

class NoRedirects(urllib.request.HTTPRedirectHandler):
    """A redirect is an error: urllib would carry the Authorization header
    to wherever it points."""

    def redirect_request(self, *args, **kwargs):
        return None


class RestStore:
    """The registry of a Confluent-API server (``python -m schemas serve``):
    Samsa's subject ``S`` is the server's ``S-value`` (schemas/confluent_api.py).

    ``write_subject`` carries out one change at a time as the server's API
    can say it: a version appended (a POST of the schema ``add_schema`` was
    given, which the server checks for compatibility itself) and the
    subject's level set or dropped. The token is the subject as read; a
    subject changed since is not written (False), as with the other stores."""

    SUFFIX = "-value"

    def __init__(self, url: str, timeout: float = 10.0,
                 environ: dict[str, str] | None = None) -> None:
        environ = os.environ if environ is None else environ
        parts = urlsplit(url.rstrip("/"))
        # the URL without user information: for requests and every message
        netloc = parts.netloc.rpartition("@")[2]
        self.url = urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
        self.timeout = timeout
        self._headers = {}
        if parts.username:
            password = unquote(parts.password or "")
            password_file = environ.get("SAMSA_SCHEMA_REGISTRY_PASSWORD_FILE", "")
            if not password and password_file:
                try:
                    with open(password_file, encoding="utf-8") as f:
                        password = f.readline().rstrip("\r\n")
                except OSError as exc:
                    raise StoreError(f"$SAMSA_SCHEMA_REGISTRY_PASSWORD_FILE {password_file}: "
                                     f"{exc.strerror or exc}") from None
            token = base64.b64encode(f"{unquote(parts.username)}:{password}".encode())
            self._headers["Authorization"] = f"Basic {token.decode()}"
        ca_file = environ.get("SAMSA_SCHEMA_REGISTRY_CA_FILE", "")
        try:
            self._context = (ssl.create_default_context(cafile=ca_file or None)
                             if parts.scheme == "https" else None)
        except (OSError, ssl.SSLError) as exc:
            raise StoreError(f"$SAMSA_SCHEMA_REGISTRY_CA_FILE {ca_file}: {exc}") from None
        self._pending: dict[int, str] = {}      # add_schema()'s texts, until registered
        self._request("GET", "/config")         # reachable, and speaks the API

    def _request(self, method: str, path: str, body: Any = None,
                 missing: tuple[int, ...] = ()) -> Any:
        """The answer's JSON; None for an error code in ``missing``."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method, headers={
            "Content-Type": "application/vnd.schemaregistry.v1+json",
            "Accept": "application/vnd.schemaregistry.v1+json, application/json",
            **self._headers})
        handlers: list = [NoRedirects()]
        if self._context is not None:
            handlers.append(urllib.request.HTTPSHandler(context=self._context))
        try:
            with urllib.request.build_opener(*handlers).open(request, timeout=self.timeout) \
                    as answer:
                return json.loads(answer.read() or b"null")
        except urllib.error.HTTPError as exc:
            try:
                error = json.loads(exc.read())
            except ValueError:
                error = {}
            code = error.get("error_code") if isinstance(error, dict) else None
            if code in missing:
                return None
            message = (error.get("message") or error.get("error")) \
                if isinstance(error, dict) else None
            raise StoreError(f"schema registry at {self.url}: {method} {path}: HTTP {exc.code}"
                             f"{f' (error {code})' if code else ''}: {message or exc.reason}") \
                from None
        except (OSError, ValueError) as exc:
            raise StoreError(f"cannot reach the schema registry at {self.url}: {exc}") from None

    def _subject_path(self, subject: str) -> str:
        return "/subjects/" + quote(subject + self.SUFFIX, safe="")

    def get_schema(self, schema_id: int) -> str | None:
        found = self._request("GET", f"/schemas/ids/{schema_id}", missing=(40403,))
        return None if found is None else found["schema"]

    def add_schema(self, schema_id: int, text: str) -> None:
        stored = self.get_schema(schema_id)
        if stored is not None and json.loads(stored) != json.loads(text):
            raise _collision(schema_id)
        self._pending[schema_id] = text

    def read_subject(self, subject: str) -> tuple[SubjectData | None, Any]:
        path = self._subject_path(subject)
        versions = self._request("GET", f"{path}/versions", missing=(40401,)) or []
        ids = [self._request("GET", f"{path}/versions/{n}")["id"] for n in versions]
        level = self._request("GET", "/config/" + quote(subject + self.SUFFIX, safe=""),
                              missing=(40401, 40408))
        level = level["compatibilityLevel"] if level else None
        if not ids and level is None:
            return None, None
        data = {"compatibility": level, "versions": ids}
        return data, json.dumps(data, sort_keys=True)

    def write_subject(self, subject: str, data: SubjectData, token: Any) -> bool:
        current, now = self.read_subject(subject)
        if now != token:
            return False
        current = current or {"compatibility": None, "versions": []}
        config = "/config/" + quote(subject + self.SUFFIX, safe="")
        if data.get("compatibility") != current["compatibility"]:
            if data.get("compatibility") is None:
                self._request("DELETE", config, missing=(40401,))
            else:
                self._request("PUT", config, {"compatibility": data["compatibility"]})
        added = list(data["versions"])[len(current["versions"]):]
        if list(data["versions"])[:len(current["versions"])] != current["versions"] or \
                len(added) > 1:
            raise StoreError(f"a REST registry appends one version at a time; cannot write "
                             f"{subject!r} as {data['versions']}")
        for sid in added:
            text = self._pending.get(sid) or self.get_schema(sid)
            if text is None:
                raise StoreError(f"schema {sid} is not known here: add it first")
            got = self._request("POST", self._subject_path(subject) + "/versions",
                                {"schema": text})["id"]
            if got != sid:
                raise StoreError(f"the registry at {self.url} gave schema id {got}, not "
                                 f"{sid}: is it a Samsa registry (fingerprint ids)?")
            self._pending.pop(sid, None)
        return True

    def list_subjects(self) -> list[str]:
        return sorted(s[:-len(self.SUFFIX)] for s in self._request("GET", "/subjects")
                      if s.endswith(self.SUFFIX))

    def list_schema_ids(self) -> list[int]:
        ids = set()
        for subject in self.list_subjects():
            data, _ = self.read_subject(subject)
            ids.update((data or {}).get("versions", []))
        return sorted(ids)

    def read_config(self) -> dict[str, Any]:
        return {"compatibility": self._request("GET", "/config")["compatibilityLevel"]}

    def write_config(self, config: dict[str, Any]) -> None:
        if config.get("compatibility"):
            self._request("PUT", "/config", {"compatibility": config["compatibility"]})

    def close(self) -> None:
        pass

    def __repr__(self) -> str:
        return f"RestStore({self.url!r})"


# --------------------------------------------------------------------------- by URL

def open_store(url: str, timeout: float = 10.0, long_lived: bool = False,
               zookeeper_auth_file: str | None = None,
               zookeeper_tls: dict | None = None) -> Store:
    """``zookeeper://host:port[,host:port...][/chroot]``, ``file:PATH`` (a
    bare path is a file too) or ``http(s)://host:port`` (a registry served
    over Confluent's REST API). ``long_lived``: a service's store, which
    reconnects to ZooKeeper for as long as it is down.
    ``zookeeper_auth_file``: the ZooKeeper identity the registry's nodes are
    written with (``user:password``; None: ``$SAMSA_SCHEMA_REGISTRY_ZOOKEEPER_AUTH_FILE``,
    empty: none). ``zookeeper_tls``: kazoo's TLS options for ZooKeeper (a
    service's settings say them; None: ``$SAMSA_ZOOKEEPER_TLS_CA_FILE`` ...)."""
    parts = urlsplit(url)
    if parts.scheme in ("http", "https"):
        if not parts.netloc:
            raise ValueError(f"bad registry URL {url!r}: http://host:port")
        return RestStore(url, timeout)
    if parts.scheme in ("zookeeper", "zk"):
        if not parts.netloc:
            raise ValueError(f"bad registry URL {url!r}: zookeeper://host:port[/chroot]")
        if zookeeper_auth_file is None:
            zookeeper_auth_file = os.environ.get(ZOOKEEPER_AUTH_ENV, "")
        return ZooKeeperStore(parts.netloc + (parts.path.rstrip("/") or ""), timeout,
                              reconnect_forever=long_lived, auth_file=zookeeper_auth_file,
                              tls_options=zookeeper_tls)
    if parts.scheme == "file":
        return FileStore(parts.path or parts.netloc)
    if parts.scheme == "":
        return FileStore(url)
    raise ValueError(f"bad registry URL {url!r}: zookeeper://host:port[/chroot], "
                     f"http://host:port or file:PATH")
