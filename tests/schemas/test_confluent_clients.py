"""Confluent's own clients against ``python -m schemas serve``: the registry
client of confluent-kafka (from PyPI) registers, fetches and checks schemas
over HTTP, and its Avro serializer and deserializer exchange bytes with
Samsa's ValueWriter and ValueReader in both directions. The server runs as
a process over a real ZooKeeper, as the lab runs it."""
from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.serialization import MessageField, SerializationContext

from schemas import catalog
from schemas.registry import SchemaRegistry, schema_id
from schemas.wire import ValueReader, ValueWriter

PAGE_VIEW_V1 = catalog.load("samsa.events.PageViewEvent")
PAGE_VIEW_V2 = catalog.load("samsa.events.PageViewEvent.v2")


def page_view(n: int) -> dict:
    return {"header": {"time_ms": 1_764_000_000_000 + n, "host": "web-1", "service": "frontend",
                       "event_id": n.to_bytes(16, "big")},
            "member_id": n, "page_key": "profile-view", "url": f"/in/member-{n}",
            "referrer": None, "user_agent": "test", "duration_ms": 12}


@pytest.fixture
def served(served_registry):
    return served_registry.url, served_registry.registry


def test_confluents_registry_client(served):
    url, registry = served
    client = SchemaRegistryClient({"url": url})
    sid = client.register_schema("page_views-value", Schema(json.dumps(PAGE_VIEW_V1), "AVRO"))
    assert sid == schema_id(PAGE_VIEW_V1)
    assert registry.get("page_views").id == sid            # Samsa's subject page_views
    assert client.get_subjects() == ["page_views-value"]

    latest = client.get_latest_version("page_views-value")
    assert (latest.version, latest.schema_id) == (1, sid)
    assert json.loads(latest.schema.schema_str) == PAGE_VIEW_V1
    assert json.loads(client.get_schema(sid).schema_str) == PAGE_VIEW_V1
    found = client.lookup_schema("page_views-value", Schema(json.dumps(PAGE_VIEW_V1), "AVRO"))
    assert (found.version, found.schema_id) == (1, sid)

    v2 = Schema(json.dumps(PAGE_VIEW_V2), "AVRO")
    assert client.test_compatibility("page_views-value", v2) is True
    breaking = json.loads(json.dumps(PAGE_VIEW_V2))
    breaking["fields"].append({"name": "locale", "type": "string"})
    assert client.test_compatibility("page_views-value",
                                     Schema(json.dumps(breaking), "AVRO")) is False
    with pytest.raises(SchemaRegistryError) as refused:
        client.register_schema("page_views-value", Schema(json.dumps(breaking), "AVRO"))
    assert (refused.value.http_status_code, refused.value.error_code) == (409, 40901)
    assert client.register_schema("page_views-value", v2) == schema_id(PAGE_VIEW_V2)
    assert client.get_versions("page_views-value") == [1, 2]

    assert client.set_compatibility("page_views-value", "FULL") == {"compatibility": "FULL"}
    assert client.get_compatibility("page_views-value") == "FULL"
    assert registry.compatibility("page_views") == "FULL"
    with pytest.raises(SchemaRegistryError) as missing:
        client.get_version("page_views-value", 9)
    assert missing.value.error_code == 40402


def test_envelopes_cross_both_ways(served):
    url, registry = served
    client = SchemaRegistryClient({"url": url})
    context = SerializationContext("page_views", MessageField.VALUE)

    # Confluent writes (registering the schema itself), Samsa reads
    serialize = AvroSerializer(client, json.dumps(PAGE_VIEW_V1))
    record = page_view(1)
    written = serialize(record, context)
    assert written[:5] == b"\0" + schema_id(PAGE_VIEW_V1).to_bytes(4, "big")
    assert ValueReader(registry).decode(written) == record

    # Samsa writes (the subject's latest version), Confluent reads
    samsa_bytes = ValueWriter(registry, "page_views").encode(page_view(2))
    deserialize = AvroDeserializer(client)
    assert deserialize(samsa_bytes, context) == page_view(2)

    # the two encodings of one record are the same bytes
    assert samsa_bytes == serialize(page_view(2), context)


def test_errors_and_metrics_over_http(served):
    url, _registry = served
    with pytest.raises(urllib.error.HTTPError) as missing:
        urllib.request.urlopen(url + "/subjects/nothing-value/versions", timeout=10)
    assert missing.value.code == 404
    assert missing.value.headers["Content-Type"] == "application/vnd.schemaregistry.v1+json"
    assert json.loads(missing.value.read())["error_code"] == 40401
    too_big = urllib.request.Request(url + "/subjects/x-value/versions", method="POST",
                                     data=b" " * (5 << 20))
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(too_big, timeout=10)
    assert refused.value.code == 413
    with urllib.request.urlopen(url + "/metrics", timeout=10) as answer:
        text = answer.read().decode()
    assert 'samsa_schema_registry_requests_total{endpoint="versions",status="404"} 1.0' in text
    assert "samsa_schema_registry_store_up 1.0" in text


def test_serve_refuses_bad_settings_and_a_dead_store(tmp_path):
    def serve(*args):
        return subprocess.run([sys.executable, "-m", "schemas", *args], capture_output=True,
                              text=True, timeout=60)
    bad = serve("serve", "--set", "port=99999")
    assert bad.returncode == 2 and bad.stderr.startswith("error: ") and "port" in bad.stderr
    dead = serve("--registry", "zookeeper://127.0.0.1:1", "serve", "--set",
                 "store_timeout_s=1", "--port", "0")
    assert dead.returncode == 3 and "cannot reach ZooKeeper" in dead.stderr
    assert "Traceback" not in dead.stderr
    shown = serve("--registry", f"file:{tmp_path}/r.json", "serve", "--print-config")
    assert shown.returncode == 0 and f'registry = "file:{tmp_path}/r.json"' in shown.stdout


def test_samsas_own_tools_use_the_served_registry(served_registry):
    """http://HOST:PORT is a registry URL like any other: the command line,
    and the writers and readers the audit and the loader use."""
    url = served_registry.url
    done = subprocess.run([sys.executable, "-m", "schemas", "--registry", url, "bootstrap"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "page_views: version 1, id " in done.stdout
    listed = subprocess.run([sys.executable, "-m", "schemas", "--registry", url, "list"],
                            capture_output=True, text=True, timeout=60).stdout
    subjects = served_registry.registry.subjects()        # read from ZooKeeper directly
    assert "page_views" in subjects
    assert [line.split("\t")[0] for line in listed.splitlines()] == subjects
    with SchemaRegistry.open(url) as over_http:
        value = ValueWriter(over_http, "page_views").encode(page_view(3))
        assert ValueReader(over_http).decode(value) == page_view(3)
    unreachable = subprocess.run([sys.executable, "-m", "schemas", "--registry",
                                  "http://127.0.0.1:1", "list"],
                                 capture_output=True, text=True, timeout=60)
    assert unreachable.returncode == 3
    assert unreachable.stderr.startswith("error: cannot reach the schema registry")
