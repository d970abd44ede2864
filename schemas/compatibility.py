"""Schema compatibility: can data written with one schema be read with another?

Avro resolves a writer's schema to a reader's schema (the specification's
"Schema Resolution"); this module decides, without data, whether that
resolution can fail, and says where. Levels, per subject, as schema
registries name them:

* ``BACKWARD`` (the default): the new schema reads data written with the
  previous one (consumers upgrade first);
* ``FORWARD``: the previous schema reads data written with the new one
  (producers upgrade first);
* ``FULL``: both;
* ``NONE``: no check;
* ``*_TRANSITIVE``: the same against every earlier version, not only the
  last one.

The rules checked (reader ``r``, writer ``w``): same primitive type, or one
of Avro's promotions (int to long, float, double; long to float, double;
float to double; string to and from bytes); records by full name (or a
reader alias), each reader field present in the writer or with a default,
matching fields checked recursively; names are compared unqualified, as
the specification says (a writer field the reader lacks is
ignored); enums by name, every writer symbol known to the reader unless the
reader has a default symbol; fixed by name and size; arrays and maps by
their items and values; a writer union: each branch must be readable; a
reader union: some branch must read the writer's type.
"""
from __future__ import annotations

from typing import Any

LEVELS = ("BACKWARD", "FORWARD", "FULL", "NONE", "BACKWARD_TRANSITIVE",
          "FORWARD_TRANSITIVE", "FULL_TRANSITIVE")
DEFAULT_LEVEL = "BACKWARD"

_PRIMITIVES = {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}
_PROMOTIONS = {
    "int": {"long", "float", "double"},
    "long": {"float", "double"},
    "float": {"double"},
    "string": {"bytes"},
    "bytes": {"string"},
}


class Incompatibility(ValueError):
    """Why a reader cannot read a writer's data: the path and the reason."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path or '/'}: {reason}")
        self.path = path
        self.reason = reason


def check_level(level: str) -> str:
    upper = level.strip().upper()
    if upper not in LEVELS:
        raise ValueError(f"unknown compatibility level {level!r}: one of {', '.join(LEVELS)}")
    return upper


def problems(reader: Any, writer: Any) -> list[Incompatibility]:
    """Every reason ``reader`` cannot read data written with ``writer`` (both
    self-contained schemas as JSON values); empty when it can."""
    found: list[Incompatibility] = []
    _check(reader, writer, "", found, _Names(), _Names(), set())
    return found


def can_read(reader: Any, writer: Any) -> bool:
    return not problems(reader, writer)


def check_new_schema(level: str, new: Any, earlier: list[Any]) -> list[Incompatibility]:
    """What stops ``new`` from being registered after ``earlier`` (oldest
    first) under ``level``; each problem says which version it concerns."""
    level = check_level(level)
    if level == "NONE" or not earlier:
        return []
    against = earlier if level.endswith("_TRANSITIVE") else earlier[-1:]
    first_version = len(earlier) - len(against) + 1
    found: list[Incompatibility] = []
    for n, old in enumerate(against, start=first_version):
        if level.startswith(("BACKWARD", "FULL")):
            for p in problems(new, old):
                found.append(Incompatibility(p.path, f"the new schema cannot read data written "
                                                     f"with version {n}: {p.reason}"))
        if level.startswith(("FORWARD", "FULL")):
            for p in problems(old, new):
                found.append(Incompatibility(p.path, f"version {n} cannot read data written "
                                                     f"with the new schema: {p.reason}"))
    return found


# --------------------------------------------------------------------------- the rules

class _Names:
    """Named types seen while walking one schema (a later reference is by name)."""

    def __init__(self) -> None:
        self.types: dict[str, dict] = {}

    def resolve(self, schema: Any, namespace: str) -> Any:
        if isinstance(schema, str) and schema not in _PRIMITIVES:
            full = schema if "." in schema or not namespace else f"{namespace}.{schema}"
            for name in (full, schema):
                if name in self.types:
                    return self.types[name]
            raise ValueError(f"unknown type name {schema!r}")
        return schema

    def define(self, schema: dict, namespace: str) -> str:
        full = _full_name(schema, namespace)
        self.types.setdefault(full, schema)
        return full


def _full_name(schema: dict, namespace: str) -> str:
    name = schema["name"]
    if "." in name:
        return name
    ns = schema.get("namespace", namespace)
    return f"{ns}.{name}" if ns else name


def _type_of(schema: Any) -> str:
    if isinstance(schema, list):
        return "union"
    if isinstance(schema, dict):
        t = schema["type"]
        return t if isinstance(t, str) and t in _PRIMITIVES | {"record", "error", "enum",
                                                               "fixed", "array", "map"} \
            else _type_of(t)
    return schema


def _namespace_of(full_name: str) -> str:
    return full_name.rpartition(".")[0]


def _check(reader: Any, writer: Any, path: str, found: list, rnames: _Names, wnames: _Names,
           seen: set, rns: str = "", wns: str = "") -> None:
    reader = rnames.resolve(reader, rns)
    writer = wnames.resolve(writer, wns)
    rt, wt = _type_of(reader), _type_of(writer)
    if isinstance(reader, dict) and rt in ("record", "error", "enum", "fixed"):
        rns = _namespace_of(rnames.define(reader, rns))
    if isinstance(writer, dict) and wt in ("record", "error", "enum", "fixed"):
        wns = _namespace_of(wnames.define(writer, wns))
    if wt == "union":
        for i, branch in enumerate(writer):
            _check(reader, branch, f"{path}[writer branch {i}]", found, rnames, wnames, seen,
                   rns, wns)
        return
    if rt == "union":
        for branch in reader:
            trial: list = []
            _check(branch, writer, path, trial, rnames, wnames, set(seen), rns, wns)
            if not trial:
                return
        found.append(Incompatibility(path, f"no branch of the reader's union reads the "
                                           f"writer's {_describe(writer, wt)}"))
        return
    if rt != wt:
        if wt in _PROMOTIONS and rt in _PROMOTIONS[wt]:
            return
        found.append(Incompatibility(path, f"the writer's {_describe(writer, wt)} cannot be "
                                           f"read as {_describe(reader, rt)}"))
        return
    if rt in _PRIMITIVES:
        return
    if rt in ("record", "error"):
        key = (id(reader), id(writer))
        if key in seen:          # a recursive type, already being compared
            return
        seen.add(key)
        rname, wname = _full_name(reader, rns), _full_name(writer, wns)
        if not _names_match(reader, rname, wname, rns):
            found.append(Incompatibility(path, f"record {wname} cannot be read as record "
                                               f"{rname} (names differ, no alias)"))
            return
        wfields = {f["name"]: f for f in writer["fields"]}
        for field in reader["fields"]:
            match = wfields.get(field["name"])
            if match is None:
                for alias in field.get("aliases", ()):
                    match = wfields.get(alias)
                    if match is not None:
                        break
            where = f"{path}/{field['name']}"
            if match is None:
                if "default" not in field:
                    found.append(Incompatibility(where, "a field the writer does not have, "
                                                        "and with no default"))
                continue
            _check(field["type"], match["type"], where, found, rnames, wnames, seen, rns, wns)
        return
    if rt == "enum":
        rname, wname = _full_name(reader, rns), _full_name(writer, wns)
        if not _names_match(reader, rname, wname, rns):
            found.append(Incompatibility(path, f"enum {wname} cannot be read as enum {rname}"))
            return
        missing = [s for s in writer["symbols"] if s not in reader["symbols"]]
        if missing and "default" not in reader:
            found.append(Incompatibility(path, f"enum {rname} lacks the writer's symbols "
                                               f"{missing} and has no default"))
        return
    if rt == "fixed":
        rname, wname = _full_name(reader, rns), _full_name(writer, wns)
        if not _names_match(reader, rname, wname, rns) or reader["size"] != writer["size"]:
            found.append(Incompatibility(path, f"fixed {wname}({writer['size']}) cannot be "
                                               f"read as fixed {rname}({reader['size']})"))
        return
    if rt == "array":
        _check(reader["items"], writer["items"], f"{path}[]", found, rnames, wnames, seen,
               rns, wns)
        return
    if rt == "map":
        _check(reader["values"], writer["values"], f"{path}{{}}", found, rnames, wnames, seen,
               rns, wns)
        return
    # a dict whose type is a nested primitive, e.g. {"type": "string"}
    if isinstance(reader, dict) or isinstance(writer, dict):
        inner_r = reader["type"] if isinstance(reader, dict) else reader
        inner_w = writer["type"] if isinstance(writer, dict) else writer
        _check(inner_r, inner_w, path, found, rnames, wnames, seen, rns, wns)


def _names_match(reader: dict, rname: str, wname: str, rns: str) -> bool:
    # the specification compares unqualified names (and the reader's aliases)
    if rname.rpartition(".")[2] == wname.rpartition(".")[2]:
        return True
    for alias in reader.get("aliases", ()):
        full = alias if "." in alias or not rns else f"{rns}.{alias}"
        if wname in (alias, full):
            return True
    return False


def _describe(schema: Any, kind: str) -> str:
    if isinstance(schema, dict) and "name" in schema:
        return f"{kind} {schema['name']}"
    return kind
