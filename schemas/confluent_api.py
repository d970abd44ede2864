"""The Confluent Schema Registry REST API, answered from Samsa's registry.

Pure: ``ConfluentAPI.handle(method, segments, query, body)`` turns one
request (the path split into its segments, the query, the raw body) into a
``Reply`` (an HTTP status and a JSON value); schemas/service.py serves it
over HTTP. So Confluent's clients (the registry client and the Avro
serializer and deserializer of confluent-kafka, Java's, the REST tools)
register, fetch and check schemas in a Samsa registry, and bytes written by
Confluent's serializer are read by Samsa's ``ValueReader`` and the other way
round: the envelope is the same (magic byte 0, a 4-byte big-endian id, Avro
binary).

**Subjects.** Confluent's clients name a topic's value schema
``<topic>-value`` (its default TopicNameStrategy); Samsa's registry names it
``<topic>``. The API maps one onto the other: ``GET /subjects`` lists every
Samsa subject with ``-value`` added, and a request for ``page_views-value``
reads and writes Samsa's ``page_views``. A subject not ending in ``-value``
(a key schema, another naming strategy) is not found, and registering under
one is refused (422, error code 42208): Samsa's keys are plain bytes.

**Ids** are Samsa's fingerprints (registry.py): unsigned 32-bit numbers, the
same in every cluster. Confluent's Python clients read and write them as
unsigned; a Java client, whose ids are signed ints, would see an id of 2^31
or more as negative.

**What differs from Confluent's server.** Nothing is ever deleted (DELETE
answers 422, error code 42205: data on disk may hold any id); schema types
other than AVRO and schema references are refused (42201); the mode is
always READWRITE. ``normalize``, ``deleted`` and ``format`` are accepted and
ignored (schemas are always stored normalized, none is ever deleted).

Endpoints (Confluent's paths, bodies and error codes):

    GET  /subjects                                 subject names
    GET  /subjects/S/versions                      [1, 2, ...]
    GET  /subjects/S/versions/V                    {subject, id, version, schema}; V: n, latest, -1
    GET  /subjects/S/versions/V/schema             the schema itself
    GET  /subjects/S/versions/V/referencedby       [] (no references)
    POST /subjects/S/versions  {"schema": ...}     register: {"id": n}
    POST /subjects/S           {"schema": ...}     look up: {subject, id, version, schema}
    GET  /schemas/ids/ID                           {"schema": ...}
    GET  /schemas/ids/ID/schema                    the schema itself
    GET  /schemas/ids/ID/subjects                  subjects holding it
    GET  /schemas/ids/ID/versions                  [{subject, version}, ...]
    GET  /schemas/types                            ["AVRO"]
    POST /compatibility/subjects/S/versions[/V]    {"is_compatible": bool[, "messages": [...]]}
    GET|PUT /config                                the registry's level
    GET|PUT|DELETE /config/S                       a subject's own level
    GET  /mode, /mode/S                            {"mode": "READWRITE"}

Errors are Confluent's ``{"error_code": n, "message": "..."}``: 40401
subject not found, 40402 version not found, 40403 schema not found, 40408
no subject-level compatibility, 40901 incompatible schema, 42201 invalid
schema, 42202 invalid version, 42203 invalid compatibility level, 42205
operation not permitted, 42208 invalid subject, 50001 the store failed.
"""
from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass
from typing import Any, Callable

from schemas import compatibility
from schemas.registry import (
    IncompatibleSchemaError,
    RegistryError,
    SchemaNotFoundError,
    SchemaRegistry,
    check_subject,
    expand,
)
from schemas.stores import IdCollisionError, StoreError

log = logging.getLogger("schemas.confluent_api")

VALUE_SUFFIX = "-value"
CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
MAX_ID = (1 << 32) - 1


@dataclass(frozen=True)
class Reply:
    status: int
    body: Any           # a JSON value


class APIError(Exception):
    """An answer of Confluent's error shape."""

    def __init__(self, status: int, code: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message

    def reply(self) -> Reply:
        return Reply(self.status, {"error_code": self.code, "message": self.message})


def registry_subject(subject: str) -> str | None:
    """Samsa's subject for Confluent's ``subject`` (``<topic>-value``), or
    None when it names no value schema."""
    if subject.endswith(VALUE_SUFFIX) and len(subject) > len(VALUE_SUFFIX):
        return subject[:-len(VALUE_SUFFIX)]
    return None


def confluent_subject(subject: str) -> str:
    return subject + VALUE_SUFFIX


class ConfluentAPI:
    """Confluent's REST API over ``registry`` (thread-safe as the registry is).
    ``requests`` counts the answers by (endpoint, status) for the metrics."""

    def __init__(self, registry: SchemaRegistry) -> None:
        self.registry = registry
        self.requests: dict[tuple[str, int], int] = {}
        self._count_lock = threading.Lock()
        self.routes = self._routes()

    # ------------------------------------------------------------ dispatch

    def handle(self, method: str, segments: list[str], query: dict[str, str],
               body: bytes = b"") -> Reply:
        route, endpoint, args = self._route(method, segments)
        try:
            if route is None and endpoint == "unknown":
                raise APIError(404, 404, f"HTTP 404 Not Found: /{'/'.join(segments)}")
            if route is None:
                raise APIError(405, 405, f"HTTP 405 Method Not Allowed: {method} "
                                         f"/{'/'.join(segments)}")
            reply = route(*args, query=query, body=body)
        except APIError as exc:
            reply = exc.reply()
        except IncompatibleSchemaError as exc:
            reply = APIError(409, 40901, str(exc)).reply()
        except IdCollisionError as exc:
            reply = APIError(422, 42201, str(exc)).reply()
        except StoreError as exc:
            log.warning("the registry's store failed: %s", exc)
            reply = APIError(500, 50001, f"error in the registry's store: {exc}").reply()
        key = (endpoint, reply.status)
        with self._count_lock:
            self.requests[key] = self.requests.get(key, 0) + 1
        return reply

    def request_counts(self) -> dict[tuple[str, int], int]:
        """Answers given so far by (endpoint, HTTP status)."""
        with self._count_lock:
            return dict(self.requests)

    def _routes(self) -> list[tuple[str, tuple, str, Callable]]:
        """(method, path pattern (None: any segment, an argument), the
        endpoint's name for the metrics, the handler)."""
        return [
            ("GET", (), "root", self._root),
            ("GET", ("subjects",), "subjects", self._subjects),
            ("GET", ("subjects", None, "versions"), "versions", self._versions),
            ("POST", ("subjects", None, "versions"), "register", self._register),
            ("GET", ("subjects", None, "versions", None), "version", self._version),
            ("GET", ("subjects", None, "versions", None, "schema"), "version_schema",
             self._version_schema),
            ("GET", ("subjects", None, "versions", None, "referencedby"), "referencedby",
             self._referenced_by),
            ("POST", ("subjects", None), "lookup", self._lookup),
            ("GET", ("schemas", "types"), "types", self._types),
            ("GET", ("schemas", "ids", None), "schema_by_id", self._by_id),
            ("GET", ("schemas", "ids", None, "schema"), "schema_by_id_raw", self._by_id_raw),
            ("GET", ("schemas", "ids", None, "subjects"), "schema_subjects", self._id_subjects),
            ("GET", ("schemas", "ids", None, "versions"), "schema_versions", self._id_versions),
            ("POST", ("compatibility", "subjects", None, "versions"), "compatibility",
             self._compatible_all),
            ("POST", ("compatibility", "subjects", None, "versions", None), "compatibility",
             self._compatible_version),
            ("GET", ("config",), "config", self._get_global),
            ("PUT", ("config",), "config", self._put_global),
            ("GET", ("config", None), "subject_config", self._get_subject_config),
            ("PUT", ("config", None), "subject_config", self._put_subject_config),
            ("DELETE", ("config", None), "subject_config", self._delete_subject_config),
            ("GET", ("mode",), "mode", self._mode),
            ("GET", ("mode", None), "mode", self._mode),
        ]

    def _route(self, method: str, s: list[str]) -> tuple[Callable | None, str, tuple]:
        """(the handler, the endpoint's name for the metrics, its path
        arguments); no handler: the path is "unknown", or the method not
        served on it ("method")."""
        n = len(s)
        path_known = False
        for verb, pattern, endpoint, handler in self.routes:
            if len(pattern) != n or any(p is not None and p != seg for p, seg in zip(pattern, s)):
                continue
            path_known = True
            if verb == method:
                return handler, endpoint, tuple(seg for p, seg in zip(pattern, s) if p is None)
        if method == "DELETE" and n and s[0] in ("subjects", "schemas"):
            return self._refuse_delete, "delete", ()
        return None, ("method" if path_known else "unknown"), ()

    # ------------------------------------------------------------ helpers

    def _subject(self, subject: str, creating: bool = False) -> str:
        mine = registry_subject(subject)
        if mine is None:
            if creating:
                raise APIError(422, 42208, f"subject {subject!r}: Samsa's registry holds value "
                                           f"schemas only, named <topic>{VALUE_SUFFIX} "
                                           f"(Confluent's TopicNameStrategy)")
            raise APIError(404, 40401, f"Subject '{subject}' not found.")
        try:
            return check_subject(mine)
        except RegistryError as exc:
            if creating:
                raise APIError(422, 42208, str(exc)) from None
            raise APIError(404, 40401, f"Subject '{subject}' not found.") from None

    def _ids(self, subject: str) -> tuple[str, list[int]]:
        """Samsa's subject and its versions' ids; 40401 when it has none."""
        mine = self._subject(subject)
        ids = self.registry.versions(mine)
        if not ids:
            raise APIError(404, 40401, f"Subject '{subject}' not found.")
        return mine, ids

    def _version_number(self, subject: str, version: str, ids: list[int]) -> int:
        if version in ("latest", "-1"):
            return len(ids)
        try:
            n = int(version)
        except ValueError:
            n = 0
        if n <= 0 or str(n) != version.lstrip("+"):
            raise APIError(422, 42202, f"The specified version '{version}' is not a valid "
                                       f"version id. Allowed values are between [1, "
                                       f"2^31-1] and the string \"latest\"")
        if n > len(ids):
            raise APIError(404, 40402, f"Version {n} not found.")
        return n

    def _entry(self, subject: str, n: int, sid: int) -> dict:
        return {"subject": subject, "version": n, "id": sid,
                "schema": json.dumps(self.registry.by_id(sid))}

    @staticmethod
    def _json_body(body: bytes) -> Any:
        try:
            return json.loads(body or b"null")
        except ValueError as exc:
            raise APIError(400, 400, f"the body is not JSON: {exc}") from None

    def _schema_of(self, body: bytes) -> Any:
        """The schema a request's body carries (Confluent's ``{"schema": text}``)."""
        request = self._json_body(body)
        if not isinstance(request, dict) or not isinstance(request.get("schema"), str):
            raise APIError(422, 42201, 'Invalid schema: the body must be {"schema": "<the '
                                       'schema as a JSON string>"}')
        kind = request.get("schemaType") or "AVRO"
        kind = kind.upper() if isinstance(kind, str) else repr(kind)
        if kind != "AVRO":
            raise APIError(422, 42201, f"Invalid schema: Samsa's registry holds AVRO schemas "
                                       f"only, not {kind}")
        if request.get("references"):
            raise APIError(422, 42201, "Invalid schema: schema references are not supported: "
                                       "inline the named types")
        try:
            return expand(request["schema"])
        except RegistryError as exc:
            raise APIError(422, 42201, f"Invalid schema: {exc}") from None

    def _schema_id(self, text: str) -> int:
        try:
            sid = int(text)
        except ValueError:
            sid = -1
        if not 0 <= sid <= MAX_ID:
            raise APIError(404, 40403, f"Schema {text} not found")
        return sid

    def _schema(self, sid: int) -> Any:
        try:
            return self.registry.by_id(sid)
        except SchemaNotFoundError:
            raise APIError(404, 40403, f"Schema {sid} not found") from None

    def _level(self, body: bytes) -> str:
        request = self._json_body(body)
        level = request.get("compatibility") if isinstance(request, dict) else None
        try:
            return compatibility.check_level(level if isinstance(level, str) else "")
        except ValueError:
            raise APIError(422, 42203, f"Invalid compatibility level {level!r}: one of "
                                       f"{', '.join(compatibility.LEVELS)}") from None

    # ------------------------------------------------------------ subjects

    def _root(self, **_) -> Reply:
        return Reply(200, {})

    def _subjects(self, *, query, **_) -> Reply:
        prefix = query.get("subjectPrefix", "")
        names = [confluent_subject(s) for s in self.registry.subjects()
                 if self.registry.versions(s)]
        return Reply(200, [s for s in names if s.startswith(prefix)])

    def _versions(self, subject: str, **_) -> Reply:
        _, ids = self._ids(subject)
        return Reply(200, list(range(1, len(ids) + 1)))

    def _version(self, subject: str, version: str, **_) -> Reply:
        _, ids = self._ids(subject)
        n = self._version_number(subject, version, ids)
        return Reply(200, self._entry(subject, n, ids[n - 1]))

    def _version_schema(self, subject: str, version: str, **_) -> Reply:
        _, ids = self._ids(subject)
        return Reply(200, self.registry.by_id(ids[self._version_number(subject, version, ids)
                                                  - 1]))

    def _referenced_by(self, subject: str, version: str, **_) -> Reply:
        _, ids = self._ids(subject)
        self._version_number(subject, version, ids)
        return Reply(200, [])

    def _register(self, subject: str, *, body, **_) -> Reply:
        mine = self._subject(subject, creating=True)
        done = self.registry.register(mine, self._schema_of(body))
        return Reply(200, {"id": done.id})

    def _lookup(self, subject: str, *, body, **_) -> Reply:
        mine, _ids = self._ids(subject)
        found = self.registry.lookup(mine, self._schema_of(body))
        if found is None:
            raise APIError(404, 40403, "Schema not found")
        return Reply(200, self._entry(subject, found.version, found.id))

    # ------------------------------------------------------------ schemas by id

    def _types(self, **_) -> Reply:
        return Reply(200, ["AVRO"])

    def _by_id(self, sid: str, **_) -> Reply:
        return Reply(200, {"schema": json.dumps(self._schema(self._schema_id(sid)))})

    def _by_id_raw(self, sid: str, **_) -> Reply:
        return Reply(200, self._schema(self._schema_id(sid)))

    def _holders(self, sid: str) -> list[tuple[str, int]]:
        wanted = self._schema_id(sid)
        self._schema(wanted)
        return [(confluent_subject(s), n) for s in self.registry.subjects()
                for n, i in enumerate(self.registry.versions(s), start=1) if i == wanted]

    def _id_subjects(self, sid: str, **_) -> Reply:
        return Reply(200, sorted({s for s, _n in self._holders(sid)}))

    def _id_versions(self, sid: str, **_) -> Reply:
        return Reply(200, [{"subject": s, "version": n} for s, n in self._holders(sid)])

    # ------------------------------------------------------------ compatibility

    def _compatible(self, subject: str, against: list[int], query, body) -> Reply:
        schema = self._schema_of(body)
        level = self.registry.compatibility(self._subject(subject))
        problems = compatibility.check_new_schema(level, schema,
                                                  [self.registry.by_id(i) for i in against])
        reply: dict[str, Any] = {"is_compatible": not problems}
        if query.get("verbose", "").lower() == "true":
            reply["messages"] = [str(p) for p in problems]
        return Reply(200, reply)

    def _compatible_all(self, subject: str, *, query, body) -> Reply:
        mine = self._subject(subject)
        return self._compatible(subject, self.registry.versions(mine), query, body)

    def _compatible_version(self, subject: str, version: str, *, query, body) -> Reply:
        _, ids = self._ids(subject)
        n = self._version_number(subject, version, ids)
        return self._compatible(subject, [ids[n - 1]], query, body)

    # ------------------------------------------------------------ config and mode

    def _get_global(self, **_) -> Reply:
        return Reply(200, {"compatibilityLevel": self.registry.default_compatibility()})

    def _put_global(self, *, body, **_) -> Reply:
        return Reply(200, {"compatibility": self.registry.set_default_compatibility(
            self._level(body))})

    def _get_subject_config(self, subject: str, *, query, **_) -> Reply:
        mine = self._subject(subject)
        level = self.registry.subject_compatibility(mine)
        if level is None:
            if query.get("defaultToGlobal", "").lower() != "true":
                raise APIError(404, 40408, f"Subject '{subject}' does not have subject-level "
                                           f"compatibility configured")
            level = self.registry.default_compatibility()
        return Reply(200, {"compatibilityLevel": level})

    def _put_subject_config(self, subject: str, *, body, **_) -> Reply:
        mine = self._subject(subject, creating=True)
        return Reply(200, {"compatibility": self.registry.set_compatibility(mine,
                                                                            self._level(body))})

    def _delete_subject_config(self, subject: str, **_) -> Reply:
        mine = self._subject(subject)
        old = self.registry.subject_compatibility(mine)
        if old is None:
            raise APIError(404, 40401, f"Subject '{subject}' not found.")
        self.registry.set_compatibility(mine, None)
        return Reply(200, {"compatibilityLevel": old})

    def _mode(self, *_, **__) -> Reply:
        return Reply(200, {"mode": "READWRITE"})

    def _refuse_delete(self, **_) -> Reply:
        raise APIError(422, 42205, "Samsa's registry never deletes a subject, a version or a "
                                   "schema: ids are fingerprints that data on disk may hold")
