"""The schemas that ship with Samsa (``schemas/avsc/*.avsc``) and the topics
they are registered under by default.

One file per schema, named ``<namespace>.<Name>.avsc`` (a later version of
a schema: ``<namespace>.<Name>.v<N>.avsc``); a schema refers to another
(the common header) by its full name, and ``load`` inlines it, so what is
registered is self-contained.
"""
from __future__ import annotations

import functools
import json
import os
from typing import Any

from fastavro.schema import UnknownType, load_schema, load_schema_ordered

from schemas.registry import RegisteredSchema, SchemaParseError, SchemaRegistry, check_structure

AVSC_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "avsc")


@functools.lru_cache(maxsize=1)
def avsc_dir() -> str:
    """The shipped schemas' directory: AVSC_DIR, or, when the package is
    imported from a zip (Spark's --py-files), a copy of its files in a
    temporary directory (fastavro reads schemas from files)."""
    if os.path.isdir(AVSC_DIR):
        return AVSC_DIR
    import importlib.resources
    import tempfile
    target = tempfile.mkdtemp(prefix="samsa-avsc-")
    for entry in (importlib.resources.files("schemas") / "avsc").iterdir():
        if entry.name.endswith(".avsc"):
            with open(os.path.join(target, entry.name), "wb") as f:
                f.write(entry.read_bytes())
    return target

HEADER = "samsa.events.EventHeader"
MONITORING_EVENT = "samsa.audit.MonitoringEvent"

#: topic (subject) -> the schema its values are written with
TOPIC_SCHEMAS = {
    "page_views": "samsa.events.PageViewEvent",
    "searches": "samsa.events.SearchEvent",
    "logins": "samsa.events.LoginEvent",
    "service_calls": "samsa.events.ServiceCallEvent",
    "_audit": MONITORING_EVENT,
}


def names() -> list[str]:
    """Every shipped schema file's name without ``.avsc`` (versions included)."""
    return sorted(n[:-5] for n in os.listdir(avsc_dir()) if n.endswith(".avsc"))


def path_of(name: str) -> str:
    path = os.path.join(avsc_dir(), name + ".avsc")
    if not os.path.exists(path):
        raise SchemaParseError(f"no shipped schema {name!r}; there are: {', '.join(names())}")
    return path


def load(name: str) -> Any:
    """A shipped schema, self-contained (the header inlined), as JSON values."""
    return load_file(path_of(name))


def load_file(path: str) -> Any:
    """An ``.avsc`` file, with the named types it uses loaded from files
    named after them beside it (or among the shipped ones), inlined."""
    try:
        with open(path) as f:
            raw = json.load(f)      # a clear error for bad JSON before fastavro's
    except OSError as exc:
        raise SchemaParseError(f"{path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise SchemaParseError(f"{path}: {exc}") from None
    check_structure(raw)            # what fastavro would let through
    return _load_with_shipped(path)


def _load_with_shipped(path: str) -> Any:
    try:
        return load_schema(path, _write_hint=False)
    except Exception as first:    # fastavro's errors for an unknown name or a bad schema
        if os.path.dirname(os.path.abspath(path)) == avsc_dir():
            raise SchemaParseError(f"{path}: {_explained(first)}") from None
    # a file elsewhere may refer to the shipped header (or the other shipped types)
    try:
        return load_schema_ordered([path_of(HEADER), path], _write_hint=False)
    except Exception as exc:
        raise SchemaParseError(f"{path}: {_explained(exc)}") from None


def _explained(exc: Exception) -> str:
    """fastavro's error in words: its UnknownType says only the name."""
    if isinstance(exc, UnknownType):
        name = exc.args[0] if exc.args else "?"
        if isinstance(name, dict):          # {"type": "nosuch"}: the type it names
            name = name.get("type", name)
        return (f"unknown type {name!r}: neither an Avro type nor a named type defined "
                f"before it (in the file, or shipped)")
    return str(exc)


def register_defaults(registry: SchemaRegistry) -> list[RegisteredSchema]:
    """Register the shipped schema of every default topic (a no-op for those
    already registered); what each topic now has."""
    return [registry.register(topic, load(name)) for topic, name in TOPIC_SCHEMAS.items()]
