"""The registry on both stores: versions, fingerprint ids, compatibility at
registration, concurrent registrations, and ids shared by two clusters."""
from __future__ import annotations

import json
import threading

import pytest

from schemas import catalog
from schemas.registry import (
    IncompatibleSchemaError,
    RegistryError,
    SchemaNotFoundError,
    SchemaParseError,
    schema_id,
)
from schemas.stores import FileStore, IdCollisionError, StoreError, open_store

PAGE_VIEW_V1 = catalog.load("samsa.events.PageViewEvent")
PAGE_VIEW_V2 = catalog.load("samsa.events.PageViewEvent.v2")


def breaking_v3() -> dict:
    """Version 2 plus a field with no default: old data cannot be read with it."""
    schema = json.loads(json.dumps(PAGE_VIEW_V2))
    schema["fields"].append({"name": "locale", "type": "string"})
    return schema


def test_register_versions_and_ids(registry):
    v1 = registry.register("page_views", PAGE_VIEW_V1)
    assert (v1.version, v1.id) == (1, schema_id(PAGE_VIEW_V1))
    v2 = registry.register("page_views", PAGE_VIEW_V2)
    assert v2.version == 2 and v2.id != v1.id
    assert registry.versions("page_views") == [v1.id, v2.id]
    assert registry.get("page_views").id == v2.id
    assert registry.get("page_views", 1).schema == PAGE_VIEW_V1
    assert registry.by_id(v2.id) == PAGE_VIEW_V2
    assert registry.subjects() == ["page_views"]
    # registering a version the subject has is a no-op that returns it
    assert registry.register("page_views", PAGE_VIEW_V1).version == 1
    assert registry.versions("page_views") == [v1.id, v2.id]


def test_an_incompatible_schema_is_refused_with_the_reason(registry):
    registry.register("page_views", PAGE_VIEW_V1)
    registry.register("page_views", PAGE_VIEW_V2)
    with pytest.raises(IncompatibleSchemaError) as err:
        registry.register("page_views", breaking_v3())
    message = str(err.value)
    assert "breaks BACKWARD compatibility" in message
    assert "/locale" in message and "no default" in message
    assert len(registry.versions("page_views")) == 2      # nothing was registered
    assert registry.check("page_views", breaking_v3())
    assert registry.check("page_views", breaking_v3(), level="NONE") == []


def test_compatibility_level_per_subject(registry):
    registry.register("searches", catalog.load("samsa.events.SearchEvent"))
    assert registry.compatibility("searches") == "BACKWARD"
    registry.set_compatibility("searches", "none")
    assert registry.compatibility("searches") == "NONE"
    other = {"type": "record", "name": "Whatever", "fields": [{"name": "x", "type": "int"}]}
    assert registry.register("searches", other).version == 2
    assert registry.compatibility("page_views") == "BACKWARD"   # others keep the default
    with pytest.raises(ValueError, match="unknown compatibility level"):
        registry.set_compatibility("searches", "sideways")


def test_bad_requests_are_clear(registry):
    with pytest.raises(SchemaParseError, match="not a valid Avro schema"):
        registry.register("x", {"type": "record", "name": "R", "fields": [{"name": "a"}]})
    with pytest.raises(SchemaParseError, match="not JSON"):
        registry.register("x", "{not json")
    with pytest.raises(RegistryError, match="bad subject name"):
        registry.register("a/b", PAGE_VIEW_V1)
    with pytest.raises(SchemaNotFoundError, match="no subject 'nothing'"):
        registry.get("nothing")
    registry.register("page_views", PAGE_VIEW_V1)
    with pytest.raises(SchemaNotFoundError, match="versions 1 to 1, not 7"):
        registry.get("page_views", 7)
    with pytest.raises(SchemaNotFoundError, match="no schema with id 12345"):
        registry.by_id(12345)


def test_racing_registrations_both_check_against_the_latest(registry):
    """Two compatible schemas registered at once: both land, in some order,
    each checked against the version before it (compare-and-set)."""
    registry.register("page_views", PAGE_VIEW_V1)
    errors = []

    def register(schema) -> None:
        try:
            registry.register("page_views", schema)
        except Exception as exc:     # noqa: BLE001 - reported below
            errors.append(exc)

    other_v2 = json.loads(json.dumps(PAGE_VIEW_V1))
    other_v2["fields"].append({"name": "experiment", "type": "string", "default": "none"})
    threads = [threading.Thread(target=register, args=(s,)) for s in (PAGE_VIEW_V2, other_v2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sorted(registry.versions("page_views")[1:]) == sorted([schema_id(PAGE_VIEW_V2),
                                                                  schema_id(other_v2)])


def test_two_clusters_agree_on_ids_without_talking(zk_registries):
    """Each cluster's ZooKeeper holds its own registry; ids are fingerprints,
    so the same schemas get the same ids whatever the order of registration."""
    dc_a, analysis = zk_registries("dc-a"), zk_registries("analysis")
    a1 = dc_a.register("page_views", PAGE_VIEW_V1)
    dc_a.register("searches", catalog.load("samsa.events.SearchEvent"))
    s1 = analysis.register("searches", catalog.load("samsa.events.SearchEvent"))
    b1 = analysis.register("page_views", PAGE_VIEW_V1)
    assert a1.id == b1.id
    assert dc_a.get("searches").id == s1.id
    # and sync makes the versions the same too
    dc_a.register("page_views", PAGE_VIEW_V2)
    assert dc_a.sync_to(analysis) == [f"page_views: version 2 (id {schema_id(PAGE_VIEW_V2)})"]
    assert analysis.versions("page_views") == dc_a.versions("page_views")
    assert dc_a.sync_to(analysis) == []


def test_sync_refuses_diverged_subjects(tmp_path, file_registry):
    from schemas.registry import SchemaRegistry
    other = SchemaRegistry(FileStore(str(tmp_path / "other.json")))
    file_registry.register("page_views", PAGE_VIEW_V1)
    other.set_compatibility("page_views", "NONE")
    other.register("page_views", catalog.load("samsa.events.SearchEvent"))
    with pytest.raises(RegistryError, match="subject 'page_views' differs"):
        file_registry.sync_to(other)


def test_a_fingerprint_collision_is_refused(tmp_path):
    store = FileStore(str(tmp_path / "r.json"))
    store.add_schema(7, '{"type":"int"}')
    store.add_schema(7, '{"type":"int"}')          # the same schema again: fine
    with pytest.raises(IdCollisionError, match="id 7 is already taken"):
        store.add_schema(7, '{"type":"long"}')


def test_unreachable_zookeeper_and_bad_files_are_clear_errors(tmp_path):
    with pytest.raises(StoreError, match="cannot reach ZooKeeper at 127.0.0.1:1"):
        open_store("zookeeper://127.0.0.1:1", timeout=1)
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    with pytest.raises(StoreError, match="is not a schema registry file"):
        FileStore(str(bad)).list_subjects()
    with pytest.raises(ValueError, match="bad registry URL"):
        open_store("ftp://example/registry")
    with pytest.raises(StoreError, match="cannot reach the schema registry at http://127.0.0.1:1"):
        open_store("http://127.0.0.1:1", timeout=1)


def test_the_file_store_survives_a_crash_mid_write(tmp_path):
    """The file is replaced atomically: a leftover temporary file is ignored."""
    path = tmp_path / "r.json"
    store = FileStore(str(path))
    store.add_schema(1, '{"type":"int"}')
    (tmp_path / "r.json.tmp").write_text('{"schemas": {"1": "half')
    assert FileStore(str(path)).get_schema(1) == '{"type":"int"}'
