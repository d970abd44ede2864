"""Confluent's REST API over Samsa's registry (schemas/confluent_api.py), request
by request: the answers' shapes and Confluent's error codes, on both stores
(a file, a real ZooKeeper). tests/schemas/test_confluent_clients.py drives
the same API over HTTP with Confluent's own client."""
from __future__ import annotations

import json

import pytest

from schemas import catalog
from schemas.confluent_api import ConfluentAPI
from schemas.registry import schema_id

PAGE_VIEW_V1 = catalog.load("samsa.events.PageViewEvent")
PAGE_VIEW_V2 = catalog.load("samsa.events.PageViewEvent.v2")


def body(schema, **extra) -> bytes:
    return json.dumps({"schema": json.dumps(schema), **extra}).encode()


def breaking() -> dict:
    schema = json.loads(json.dumps(PAGE_VIEW_V2))
    schema["fields"].append({"name": "locale", "type": "string"})
    return schema


@pytest.fixture(params=["file", "zookeeper"])
def store_kind(request):
    return request.param


@pytest.fixture
def registry(store_kind, request):
    """The registry the API answers from (the REST store is this API's client)."""
    if store_kind == "file":
        return request.getfixturevalue("file_registry")
    return request.getfixturevalue("zk_registries")("cluster")


@pytest.fixture
def api(registry):
    return ConfluentAPI(registry)


def call(api, method, path, payload=b"", **query):
    reply = api.handle(method, [p for p in path.split("/") if p], query, payload)
    return reply.status, reply.body


def test_register_read_back_and_look_up(api, registry):
    status, answer = call(api, "POST", "/subjects/page_views-value/versions", body(PAGE_VIEW_V1))
    assert (status, answer) == (200, {"id": schema_id(PAGE_VIEW_V1)})
    # it is Samsa's subject page_views, version 1
    assert registry.get("page_views").id == schema_id(PAGE_VIEW_V1)
    assert call(api, "POST", "/subjects/page_views-value/versions", body(PAGE_VIEW_V2))[0] == 200
    # the same schema again: the same id, no new version
    assert call(api, "POST", "/subjects/page_views-value/versions",
                body(PAGE_VIEW_V1))[1] == {"id": schema_id(PAGE_VIEW_V1)}

    assert call(api, "GET", "/subjects") == (200, ["page_views-value"])
    assert call(api, "GET", "/subjects", subjectPrefix="search") == (200, [])
    assert call(api, "GET", "/subjects/page_views-value/versions") == (200, [1, 2])
    for version in ("latest", "-1", "2"):
        status, entry = call(api, "GET", f"/subjects/page_views-value/versions/{version}")
        assert status == 200
        assert entry["subject"] == "page_views-value" and entry["version"] == 2
        assert entry["id"] == schema_id(PAGE_VIEW_V2)
        assert json.loads(entry["schema"]) == PAGE_VIEW_V2       # a JSON string, as Confluent's
    assert call(api, "GET", "/subjects/page_views-value/versions/1/schema") == (200, PAGE_VIEW_V1)
    assert call(api, "GET", "/subjects/page_views-value/versions/1/referencedby") == (200, [])

    status, found = call(api, "POST", "/subjects/page_views-value", body(PAGE_VIEW_V1))
    assert status == 200 and (found["version"], found["id"]) == (1, schema_id(PAGE_VIEW_V1))

    sid = schema_id(PAGE_VIEW_V2)
    status, by_id = call(api, "GET", f"/schemas/ids/{sid}", subject="page_views-value")
    assert status == 200 and json.loads(by_id["schema"]) == PAGE_VIEW_V2
    assert call(api, "GET", f"/schemas/ids/{sid}/schema") == (200, PAGE_VIEW_V2)
    assert call(api, "GET", f"/schemas/ids/{sid}/subjects") == (200, ["page_views-value"])
    assert call(api, "GET", f"/schemas/ids/{sid}/versions") == \
        (200, [{"subject": "page_views-value", "version": 2}])
    assert call(api, "GET", "/schemas/types") == (200, ["AVRO"])
    assert call(api, "GET", "/") == (200, {})


def test_compatibility_checks_and_levels(api, registry):
    call(api, "POST", "/subjects/page_views-value/versions", body(PAGE_VIEW_V1))
    assert call(api, "POST", "/compatibility/subjects/page_views-value/versions/latest",
                body(PAGE_VIEW_V2)) == (200, {"is_compatible": True})
    status, verdict = call(api, "POST", "/compatibility/subjects/page_views-value/versions/1",
                           body(breaking()), verbose="true")
    assert status == 200 and verdict["is_compatible"] is False
    assert any("locale" in m for m in verdict["messages"])
    assert call(api, "POST", "/compatibility/subjects/page_views-value/versions",
                body(breaking()))[1] == {"is_compatible": False}

    # the registry's level, then a subject's own
    assert call(api, "GET", "/config") == (200, {"compatibilityLevel": "BACKWARD"})
    status, err = call(api, "GET", "/config/page_views-value")
    assert (status, err["error_code"]) == (404, 40408)
    assert call(api, "GET", "/config/page_views-value", defaultToGlobal="true") == \
        (200, {"compatibilityLevel": "BACKWARD"})
    assert call(api, "PUT", "/config", b'{"compatibility": "FULL"}') == \
        (200, {"compatibility": "FULL"})
    assert registry.compatibility("page_views") == "FULL"       # no level of its own
    assert call(api, "PUT", "/config/page_views-value", b'{"compatibility": "none"}') == \
        (200, {"compatibility": "NONE"})
    assert call(api, "GET", "/config/page_views-value") == (200, {"compatibilityLevel": "NONE"})
    # NONE lets the breaking schema in
    assert call(api, "POST", "/subjects/page_views-value/versions", body(breaking()))[0] == 200
    assert call(api, "DELETE", "/config/page_views-value") == \
        (200, {"compatibilityLevel": "NONE"})
    assert registry.compatibility("page_views") == "FULL"
    assert call(api, "GET", "/mode") == (200, {"mode": "READWRITE"})


@pytest.mark.parametrize("method, path, payload, status, code", [
    ("GET", "/subjects/nothing-value/versions", b"", 404, 40401),
    ("GET", "/subjects/page_views-key/versions", b"", 404, 40401),       # keys are bytes
    ("GET", "/subjects/page_views-value/versions/7", b"", 404, 40402),
    ("GET", "/subjects/page_views-value/versions/zero", b"", 422, 42202),
    ("GET", "/subjects/page_views-value/versions/0", b"", 422, 42202),
    ("GET", "/schemas/ids/12", b"", 404, 40403),
    ("GET", "/schemas/ids/-5", b"", 404, 40403),
    ("POST", "/subjects/page_views-value", body({"type": "record", "name": "Other",
                                                  "fields": []}), 404, 40403),
    ("POST", "/subjects/page_views-value/versions", body(breaking()), 409, 40901),
    ("POST", "/subjects/page_views-value/versions", b'{"schema": "{\\"type\\": \\"nope\\"}"}',
     422, 42201),
    ("POST", "/subjects/page_views-value/versions", b'{"schema": "{}", "schemaType": "PROTOBUF"}',
     422, 42201),
    ("POST", "/subjects/page_views-value/versions", b'{"schema": "{}", "schemaType": 5}',
     422, 42201),
    ("POST", "/subjects/page_views-value/versions",
     body(PAGE_VIEW_V2, references=[{"name": "x", "subject": "y", "version": 1}]), 422, 42201),
    ("POST", "/subjects/page_views-value/versions", b"not json", 400, 400),
    ("POST", "/subjects/page_views-key/versions", body(PAGE_VIEW_V1), 422, 42208),
    ("POST", "/subjects/bad%20name-value/versions", body(PAGE_VIEW_V1), 422, 42208),
    ("PUT", "/config", b'{"compatibility": "SOMETIMES"}', 422, 42203),
    ("PUT", "/config/page_views-value", b'{}', 422, 42203),
    ("DELETE", "/subjects/page_views-value", b"", 422, 42205),
    ("DELETE", "/subjects/page_views-value/versions/1", b"", 422, 42205),
    ("GET", "/no/such/path", b"", 404, 404),
    ("PUT", "/subjects", b"", 405, 405),
])
def test_errors_are_confluents(api, method, path, payload, status, code):
    call(api, "POST", "/subjects/page_views-value/versions", body(PAGE_VIEW_V1))
    path = path.replace("%20", " ")            # the HTTP server unquotes segments
    got, answer = call(api, method, path, payload)
    assert (got, answer["error_code"]) == (status, code), answer
    assert isinstance(answer["message"], str) and answer["message"]
    # nothing was changed by a refused request
    assert call(api, "GET", "/subjects/page_views-value/versions") == (200, [1])


def test_a_failing_store_is_50001(api, registry, store_kind):
    if store_kind == "file":
        with open(registry.store.path, "w") as f:
            f.write("not a registry")                 # unreadable from now on
    else:
        registry.store.close()                        # ZooKeeper gone from under it
    status, answer = call(api, "GET", "/subjects")
    assert (status, answer["error_code"]) == (500, 50001)
    assert "store" in answer["message"]
    assert api.request_counts()[("subjects", 500)] == 1


def test_the_shipped_settings_file_is_the_defaults():
    """config/schema_registry.toml lists every setting with its default."""
    import pathlib

    from broker.service_kit.settings import load
    from schemas.service import TABLE, RegistryServiceConfig
    path = pathlib.Path(__file__).resolve().parents[2] / "config" / "schema_registry.toml"
    assert load(RegistryServiceConfig, str(path), table=TABLE) == RegistryServiceConfig()
    text = path.read_text()
    for name in RegistryServiceConfig.__dataclass_fields__:
        assert f"\n{name} = " in text or f"\n[{TABLE}.{name}]\n" in text, name
