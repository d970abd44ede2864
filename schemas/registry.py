"""The schema registry: subjects (one per topic), versions, ids, compatibility.

**Ids are fingerprints.** A schema's id is the first 4 bytes (big-endian,
0 to 2^32-1) of the SHA-256 of its normalized JSON (every named type it uses
inlined, keys sorted, no whitespace). So the same schema has the same id in
every cluster's registry with no coordination between them: a DC cluster
and the analysis cluster (each with its own ZooKeeper, or the same one
under two chroots) agree on what id 1234567 means, and a message mirrored
from one to the other decodes there. A collision (two different schemas,
one id) is refused at registration, never silently: for n schemas its
probability is about n^2 / 2^33 (1 in 8,600 for a thousand schemas), and
changing the new schema's ``doc`` gives it another id.

**Versions** are per subject and per registry: 1, 2, ... in the order of
registration. ``sync`` (and ``python -m schemas sync``) copies one
registry's subjects to another in version order, so clusters that were
registered together have the same versions too; what is on the wire (the
id) never depends on them.

**Compatibility** is checked at registration against the subject's latest
version (or all of them, for the ``*_TRANSITIVE`` levels): see
compatibility.py. A subject's level is its own when set, else the
registry's (``set_default_compatibility``), else BACKWARD. Registering a
schema the subject already has is a no-op that returns its version.
"""
from __future__ import annotations

import hashlib
import json
import re
import threading
from dataclasses import dataclass
from typing import Any

import fastavro

from schemas import compatibility
from schemas.compatibility import Incompatibility
from schemas.stores import IdCollisionError, Store, StoreError, open_store

SUBJECT_PATTERN = re.compile(r"[A-Za-z0-9._-]{1,249}")


class RegistryError(ValueError):
    """A request the registry refuses: the message says why."""


class SchemaParseError(RegistryError):
    """Not a valid Avro schema."""


class IncompatibleSchemaError(RegistryError):
    def __init__(self, subject: str, level: str, found: list[Incompatibility]) -> None:
        lines = "\n".join(f"  - {p}" for p in found)
        super().__init__(f"schema refused for subject {subject!r}: it breaks {level} "
                         f"compatibility:\n{lines}")
        self.subject = subject
        self.level = level
        self.problems = found


class SchemaNotFoundError(RegistryError):
    pass


@dataclass(frozen=True)
class RegisteredSchema:
    subject: str
    version: int
    id: int
    schema: Any          # the self-contained schema, as JSON values

    def text(self, indent: int | None = 2) -> str:
        return json.dumps(self.schema, indent=indent)


def expand(schema: Any, named: dict | None = None) -> Any:
    """``schema`` (JSON text or values) made self-contained and checked:
    SchemaParseError when it is not valid Avro. ``named`` supplies named
    types it refers to (fastavro's named_schemas)."""
    if isinstance(schema, (str, bytes)) and not _is_type_name(schema):
        try:
            schema = json.loads(schema)
        except ValueError as exc:
            raise SchemaParseError(f"not JSON: {exc}") from None
    try:
        expanded = fastavro.parse_schema(schema, named_schemas=dict(named or {}),
                                         _write_hint=False)
    except Exception as exc:     # fastavro raises several types for a bad schema
        raise SchemaParseError(f"not a valid Avro schema: {exc}") from None
    check_structure(expanded)
    return expanded


def check_structure(schema: Any, path: str = "") -> None:
    """What fastavro lets through but the specification requires: a record
    has a list of fields, each with a name and a type."""
    if isinstance(schema, list):
        for branch in schema:
            check_structure(branch, path)
    elif isinstance(schema, dict):
        kind = schema.get("type")
        if kind in ("record", "error"):
            fields = schema.get("fields")
            if not isinstance(fields, list):
                raise SchemaParseError(f"not a valid Avro schema: record "
                                       f"{schema.get('name')!r} at {path or '/'} has no "
                                       f"list of fields")
            for field in fields:
                if not isinstance(field, dict) or "name" not in field or "type" not in field:
                    raise SchemaParseError(f"not a valid Avro schema: a field of record "
                                           f"{schema.get('name')!r} has no name or type")
                check_structure(field["type"], f"{path}/{field['name']}")
        elif kind == "array":
            check_structure(schema.get("items"), path + "[]")
        elif kind == "map":
            check_structure(schema.get("values"), path + "{}")
        elif isinstance(kind, (dict, list)):
            check_structure(kind, path)


def _is_type_name(text: Any) -> bool:
    return isinstance(text, str) and text.strip() and text.strip()[0] not in "{[\""


def normalized(schema: Any) -> str:
    return json.dumps(schema, sort_keys=True, separators=(",", ":"))


def schema_id(schema: Any) -> int:
    """The id of a self-contained schema: its fingerprint (see the module's docstring)."""
    return int.from_bytes(hashlib.sha256(normalized(schema).encode()).digest()[:4], "big")


def check_subject(subject: str) -> str:
    if not isinstance(subject, str) or not SUBJECT_PATTERN.fullmatch(subject):
        raise RegistryError(f"bad subject name {subject!r}: 1 to 249 of A-Z a-z 0-9 . _ -")
    return subject


class SchemaRegistry:
    """A registry over a store (``SchemaRegistry.open(url)`` for a URL).

    Thread-safe: schemas by id are immutable and cached; subject updates are
    compare-and-set in the store, so several processes may register at once.
    """

    def __init__(self, store: Store) -> None:
        self.store = store
        self._by_id: dict[int, Any] = {}
        self._parsed: dict[int, Any] = {}
        self._lock = threading.Lock()

    @classmethod
    def open(cls, url: str, timeout: float = 10.0,
             zookeeper_tls: dict | None = None) -> "SchemaRegistry":
        """The registry at ``url`` (stores.open_store); ``zookeeper_tls``:
        kazoo's TLS options for a ZooKeeper store (None: the environment's)."""
        return cls(open_store(url, timeout, zookeeper_tls=zookeeper_tls))

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> "SchemaRegistry":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------ reading

    def subjects(self) -> list[str]:
        return self.store.list_subjects()

    def schema_ids(self) -> list[int]:
        return self.store.list_schema_ids()

    def versions(self, subject: str) -> list[int]:
        """The ids of ``subject``'s versions, oldest first (version n is [n-1])."""
        data, _ = self.store.read_subject(check_subject(subject))
        return list(data["versions"]) if data else []

    def compatibility(self, subject: str) -> str:
        """The level that applies to ``subject``: its own, else the registry's."""
        return self.subject_compatibility(subject) or self.default_compatibility()

    def subject_compatibility(self, subject: str) -> str | None:
        """``subject``'s own level; None when it has none (the registry's applies)."""
        data, _ = self.store.read_subject(check_subject(subject))
        return (data or {}).get("compatibility") or None

    def default_compatibility(self) -> str:
        """The level of every subject without one of its own (BACKWARD unless set)."""
        return self.store.read_config().get("compatibility") or compatibility.DEFAULT_LEVEL

    def by_id(self, sid: int) -> Any:
        """The schema with id ``sid`` (SchemaNotFoundError if none)."""
        found = self._by_id.get(sid)
        if found is None:
            text = self.store.get_schema(sid)
            if text is None:
                raise SchemaNotFoundError(f"no schema with id {sid}")
            found = json.loads(text)
            with self._lock:
                self._by_id[sid] = found
        return found

    def parsed(self, sid: int) -> Any:
        """fastavro's parsed form of schema ``sid``, cached (for readers and writers)."""
        found = self._parsed.get(sid)
        if found is None:
            found = fastavro.parse_schema(self.by_id(sid))
            with self._lock:
                self._parsed[sid] = found
        return found

    def get(self, subject: str, version: int | str = "latest") -> RegisteredSchema:
        ids = self.versions(subject)
        if not ids:
            raise SchemaNotFoundError(f"no subject {subject!r}")
        if version == "latest":
            n = len(ids)
        else:
            try:
                n = int(version)
            except ValueError:
                raise RegistryError(f"bad version {version!r}: a number or 'latest'") from None
            if not 1 <= n <= len(ids):
                raise SchemaNotFoundError(f"subject {subject!r} has versions 1 to {len(ids)}, "
                                          f"not {n}")
        sid = ids[n - 1]
        return RegisteredSchema(subject, n, sid, self.by_id(sid))

    def lookup(self, subject: str, schema: Any) -> RegisteredSchema | None:
        """The version of ``subject`` that is ``schema``, if registered."""
        expanded = expand(schema)
        sid = schema_id(expanded)
        ids = self.versions(subject)
        return RegisteredSchema(subject, ids.index(sid) + 1, sid, expanded) \
            if sid in ids else None

    # ------------------------------------------------------------ checking and registering

    def check(self, subject: str, schema: Any, level: str | None = None) -> list[Incompatibility]:
        """Why ``schema`` could not be registered under ``subject`` now (empty: it could)."""
        expanded = expand(schema)
        ids = self.versions(subject)
        level = level or self.compatibility(subject)
        return compatibility.check_new_schema(level, expanded, [self.by_id(i) for i in ids])

    def register(self, subject: str, schema: Any) -> RegisteredSchema:
        """Register ``schema`` under ``subject`` (IncompatibleSchemaError when
        it breaks the subject's compatibility level); its version and id."""
        check_subject(subject)
        expanded = expand(schema)
        sid = schema_id(expanded)
        text = normalized(expanded)
        # Registered already: nothing to write (a reader without the right to
        # write a secured registry registers what is there, as every service
        # does with its schemas at start).
        data, _token = self.store.read_subject(subject)
        if data and sid in data["versions"] and self.store.get_schema(sid) == text:
            with self._lock:
                self._by_id.setdefault(sid, expanded)
            return RegisteredSchema(subject, data["versions"].index(sid) + 1, sid, expanded)
        if self.store.get_schema(sid) != text:
            self.store.add_schema(sid, text)      # new, or a collision it reports
        with self._lock:
            self._by_id.setdefault(sid, expanded)
        for _ in range(100):     # compare-and-set: retried when another writer won
            data, token = self.store.read_subject(subject)
            data = dict(data or {"compatibility": None, "versions": []})
            ids = list(data["versions"])
            if sid in ids:
                return RegisteredSchema(subject, ids.index(sid) + 1, sid, expanded)
            level = data.get("compatibility") or self.default_compatibility()
            found = compatibility.check_new_schema(level, expanded,
                                                   [self.by_id(i) for i in ids])
            if found:
                raise IncompatibleSchemaError(subject, level, found)
            data["versions"] = ids + [sid]
            if self.store.write_subject(subject, data, token):
                return RegisteredSchema(subject, len(ids) + 1, sid, expanded)
        raise StoreError(f"subject {subject!r}: too many concurrent registrations")

    def set_compatibility(self, subject: str, level: str | None) -> str | None:
        """Set ``subject``'s own level (None: drop it, the registry's applies
        again); the level set."""
        check_subject(subject)
        if level is not None:
            level = compatibility.check_level(level)
        for _ in range(100):
            data, token = self.store.read_subject(subject)
            if data is None and level is None:
                return None
            data = dict(data or {"compatibility": None, "versions": []})
            data["compatibility"] = level
            if self.store.write_subject(subject, data, token):
                return level
        raise StoreError(f"subject {subject!r}: too many concurrent updates")

    def set_default_compatibility(self, level: str) -> str:
        """Set the level of every subject that has none of its own."""
        level = compatibility.check_level(level)
        self.store.write_config({**self.store.read_config(), "compatibility": level})
        return level

    # ------------------------------------------------------------ between registries

    def sync_to(self, other: "SchemaRegistry") -> list[str]:
        """Copy every subject (its compatibility level and versions, in order)
        to ``other``; what was done, one line each. RegistryError when a
        subject there has versions this one does not (diverged)."""
        done = []
        for subject in self.subjects():
            mine = self.versions(subject)
            theirs = other.versions(subject)
            if theirs != mine[:len(theirs)]:
                raise RegistryError(f"subject {subject!r} differs: versions {theirs} there, "
                                    f"{mine} here")
            level = self.compatibility(subject)
            if other.compatibility(subject) != level:
                other.set_compatibility(subject, level)
                done.append(f"{subject}: compatibility {level}")
            for n, sid in enumerate(mine[len(theirs):], start=len(theirs) + 1):
                other.register(subject, self.by_id(sid))
                done.append(f"{subject}: version {n} (id {sid})")
        return done


__all__ = ["SchemaRegistry", "RegisteredSchema", "RegistryError", "SchemaParseError",
           "IncompatibleSchemaError", "SchemaNotFoundError", "IdCollisionError", "StoreError",
           "expand", "schema_id", "normalized"]
