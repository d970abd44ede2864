"""Samsa's Avro schemas, their registry and the wire format of message values.

Stands alone: nothing here imports the broker, the clients or the services,
except service.py, which serves the registry with the service kit
(broker/service_kit/) as every Samsa service does.

* catalog.py: the shipped ``.avsc`` files and the topics they belong to;
* registry.py: subjects, versions, fingerprint ids, compatibility at registration;
* stores.py: where a registry lives (ZooKeeper by default, a file, or a
  registry served over HTTP);
* compatibility.py: BACKWARD / FORWARD / FULL / NONE (and transitive) rules;
* wire.py: ``magic, schema id, Avro binary`` values, written and read;
* header.py: the common event header read straight from a value;
* container.py: Avro container files;
* confluent_api.py: Confluent's Schema Registry REST API over a registry
  (pure: a request in, a status and JSON out);
* service.py: ``python -m schemas serve``, that API over HTTP, with /metrics;
* cli.py, __main__.py: ``python -m schemas``;
* avsc/: the schema files themselves.
"""
from schemas.registry import (
    IncompatibleSchemaError,
    RegisteredSchema,
    RegistryError,
    SchemaNotFoundError,
    SchemaParseError,
    SchemaRegistry,
)
from schemas.wire import EnvelopeError, ValueReader, ValueWriter

__all__ = ["SchemaRegistry", "RegisteredSchema", "RegistryError", "SchemaParseError",
           "IncompatibleSchemaError", "SchemaNotFoundError", "ValueReader", "ValueWriter",
           "EnvelopeError"]
