"""Compatibility rules (schemas/compatibility.py), each checked against what
fastavro actually does when it resolves the writer's data to the reader."""
from __future__ import annotations

import io

import fastavro
import pytest

from schemas import compatibility
from schemas.compatibility import can_read, check_new_schema, problems


def record(name: str, *fields: dict, **extra) -> dict:
    return {"type": "record", "name": name, "fields": list(fields), **extra}


def field(name: str, type_, **extra) -> dict:
    return {"name": name, "type": type_, **extra}


def resolves(reader: dict, writer: dict, datum: dict) -> bool:
    """Whether fastavro reads ``datum`` written with ``writer`` as ``reader``."""
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(writer), datum)
    out.seek(0)
    try:
        fastavro.schemaless_reader(out, fastavro.parse_schema(writer),
                                   fastavro.parse_schema(reader))
        return True
    except Exception:
        return False


V1 = record("E", field("a", "int"))
V2_DEFAULT = record("E", field("a", "int"), field("b", "string", default=""))
V2_NO_DEFAULT = record("E", field("a", "int"), field("b", "string"))


@pytest.mark.parametrize("reader, writer, datum, ok", [
    (V2_DEFAULT, V1, {"a": 1}, True),                 # new field with a default: readable
    (V2_NO_DEFAULT, V1, {"a": 1}, False),             # no default: not
    (V1, V2_NO_DEFAULT, {"a": 1, "b": "x"}, True),    # a writer's extra field is skipped
    (record("E", field("a", "long")), V1, {"a": 1}, True),        # int -> long
    (record("E", field("a", "double")), V1, {"a": 1}, True),      # int -> double
    (V1, record("E", field("a", "long")), {"a": 1}, False),       # long -> int: no
    (record("E", field("a", "bytes")), record("E", field("a", "string")), {"a": "x"}, True),
    (record("E", field("a", ["null", "int"])), V1, {"a": 1}, True),   # into a union
    (V1, record("E", field("a", ["null", "int"])), {"a": None}, False),  # a null: unreadable
    (record("F", field("a", "int")), V1, {"a": 1}, False),        # another record name
    (record("F", field("a", "int"), aliases=["E"]), V1, {"a": 1}, True),
    (record("E", field("c", "int", aliases=["a"])), V1, {"a": 1}, True),   # field alias
])
def test_rules_agree_with_fastavro(reader, writer, datum, ok):
    assert can_read(reader, writer) is ok, problems(reader, writer)
    assert resolves(reader, writer, datum) is ok


def enum(symbols, **extra):
    return {"type": "enum", "name": "S", "symbols": symbols, **extra}


def test_enum_symbols():
    assert can_read(record("E", field("s", enum(["A", "B", "C"]))),
                    record("E", field("s", enum(["A", "B"]))))
    found = problems(record("E", field("s", enum(["A"]))), record("E", field("s", enum(["A", "B"]))))
    assert len(found) == 1 and "['B']" in str(found[0]) and found[0].path == "/s"
    # a reader default symbol catches the unknown ones
    assert can_read(record("E", field("s", enum(["A", "X"], default="X"))),
                    record("E", field("s", enum(["A", "B"]))))


def test_nested_arrays_maps_and_fixed():
    inner_w = {"type": "array", "items": {"type": "map", "values": "int"}}
    inner_r = {"type": "array", "items": {"type": "map", "values": "long"}}
    assert can_read(record("E", field("x", inner_r)), record("E", field("x", inner_w)))
    assert not can_read(record("E", field("x", inner_w)), record("E", field("x", inner_r)))
    fixed8 = {"type": "fixed", "name": "F", "size": 8}
    fixed16 = {"type": "fixed", "name": "F", "size": 16}
    found = problems(record("E", field("f", fixed16)), record("E", field("f", fixed8)))
    assert found and "fixed F(8) cannot be read as fixed F(16)" in str(found[0])


def test_named_types_used_twice_and_recursive_types():
    header = record("H", field("t", "long"))
    writer = record("E", field("h1", header), field("h2", "H"))
    reader = record("E", field("h1", header), field("h2", "H"))
    assert can_read(reader, writer)
    linked = record("Node", field("value", "int"), field("next", ["null", "Node"]))
    assert can_read(linked, linked)


def test_problem_paths_name_the_field():
    w = record("E", field("h", record("H", field("t", "int"))))
    r = record("E", field("h", record("H", field("t", "int"), field("new", "int"))))
    (found,) = problems(r, w)
    assert found.path == "/h/new"
    assert "no default" in found.reason


def test_levels():
    earlier = [V1]
    assert check_new_schema("BACKWARD", V2_DEFAULT, earlier) == []
    assert check_new_schema("BACKWARD", V2_NO_DEFAULT, earlier)
    # FORWARD: the old schema must read the new data (an added field is skipped)
    assert check_new_schema("FORWARD", V2_NO_DEFAULT, earlier) == []
    # removing a field without a default breaks FORWARD, not BACKWARD
    assert check_new_schema("FORWARD", V1, [V2_NO_DEFAULT])
    assert check_new_schema("BACKWARD", V1, [V2_NO_DEFAULT]) == []
    assert check_new_schema("FULL", V2_DEFAULT, earlier) == []
    assert check_new_schema("FULL", V2_NO_DEFAULT, earlier)
    assert check_new_schema("NONE", record("X", field("z", "boolean")), earlier) == []


def test_transitive_levels_check_every_version():
    v1 = record("E", field("a", "int"))
    v2 = record("E", field("a", "int"), field("b", "int", default=0))
    v3 = record("E", field("a", "int"), field("b", "int"))   # reads v2's data, not v1's
    assert check_new_schema("BACKWARD", v3, [v1, v2]) == []
    found = check_new_schema("BACKWARD_TRANSITIVE", v3, [v1, v2])
    assert found and "version 1" in str(found[0])


def test_unknown_level_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown compatibility level 'sideways'"):
        compatibility.check_level("sideways")
    assert compatibility.check_level(" full ") == "FULL"
