"""Inside a Spark task: pull work units from the brokers and stage them.

For each unit the task reads [start, end) of one broker-partition with the
Samsa consumer, groups the values by writer schema id and frames them into
Avro container files under the run's staging directory (frames.py), one
file per (unit, schema id); values that are not envelopes go to an error
container file with their topic, partition and offset. It returns one stats
row per unit. Nothing it writes is visible in the output: the driver
publishes the run's staging directory once every task has succeeded.
"""
from __future__ import annotations

import json

from broker.security.credentials import ServiceCredentials
from broker.client.consumer import Consumer

from hadoop_loader.frames import split_envelopes, write_container

ERROR_SCHEMA = {
    "type": "record", "name": "LoadError", "namespace": "samsa.loader",
    "doc": "A message the loader could not load: where it was, and why.",
    "fields": [{"name": "topic", "type": "string"}, {"name": "broker_partition", "type": "string"},
               {"name": "offset", "type": "long"}, {"name": "error", "type": "string"},
               {"name": "value", "type": "bytes"}]}


def pull_unit(unit, fetch_bytes: int, timeout_s: float = 120.0,
              credentials: ServiceCredentials = ServiceCredentials()
              ) -> tuple[list[bytes], list[int], list[int]]:
    """The values, offsets and timestamps of the messages starting in
    [unit.start, unit.end), read with ``credentials`` (the unit's address is
    a TLS listener's when they say tls)."""
    import time
    consumer = Consumer(bootstrap=unit.address, fetch_max_bytes=fetch_bytes, max_wait_ms=100,
                        auto_offset_reset="error", client_id="samsa-loader",
                        **credentials.client_settings())
    values, offsets, stamps = [], [], []
    tp = (unit.topic, unit.partition)
    deadline = time.monotonic() + timeout_s
    try:
        consumer.assign([tp], start=unit.start)
        while consumer.position(tp) < unit.end:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{unit.key}: read only to {consumer.position(tp)} of "
                                   f"[{unit.start}, {unit.end}) in {timeout_s:.0f} s")
            for m in consumer.poll(1000):
                if m.offset >= unit.end:
                    break
                values.append(m.value)
                offsets.append(m.offset)
                stamps.append(m.timestamp)
    finally:
        consumer.close()
    return values, offsets, stamps


def stage_units(units, output: str, staging: str, registry_url: str, fetch_bytes: int,
                window_ms: int | None = None, codec: str = "null",
                credentials: ServiceCredentials = ServiceCredentials()):
    """The body of a Spark task (mapPartitions): pull, frame, stage under
    ``staging`` (relative to the ``output`` root, on its file system); a
    stats row per unit. With ``window_ms``, the row carries the audit's
    tallies (audit/tally.py) of the messages staged for the warehouse (not of
    those sent to the error output): the hadoop tier's counts."""
    from hadoop_loader.outputfs import OutputFS
    from schemas.registry import SchemaRegistry
    out = OutputFS(output)
    registry = SchemaRegistry.open(registry_url,
                                   zookeeper_tls=credentials.zookeeper_tls_settings()
                                   .kazoo_options())
    try:
        for unit in units:
            values, offsets, stamps = pull_unit(unit, fetch_bytes, credentials=credentials)
            by_schema, bad = split_envelopes(values)
            name = f"{unit.name}-{unit.start}"
            staged = {}
            for sid, bodies in by_schema.items():
                try:
                    schema = json.dumps(registry.by_id(sid))
                except Exception as exc:     # an id no registry knows: error output
                    for i, v in enumerate(values):
                        if len(v) >= 5 and v[0] == 0 and int.from_bytes(v[1:5], "big") == sid:
                            bad.append((i, f"unknown schema id {sid}: {exc}"))
                    continue
                with out.open_output(staging, "avro", unit.topic, f"{name}-{sid}.avro") as f:
                    write_container(f, schema, bodies, codec=codec,
                                    metadata={"samsa.schema_id": str(sid)})
                staged[sid] = len(bodies)
            if bad:
                import fastavro
                with out.open_output(staging, "errors", unit.topic, f"{name}.avro") as f:
                    fastavro.writer(f, fastavro.parse_schema(ERROR_SCHEMA), [
                        {"topic": unit.topic, "broker_partition": unit.name,
                         "offset": offsets[i], "error": why,
                         "value": values[i]} for i, why in sorted(bad)], codec="deflate")
            tallies: dict = {}
            ids: dict = {}
            if window_ms:
                from audit.counting import DEFAULT_LATENCY_BOUNDS_MS, id_hashes, kernel
                import time
                rejected = {i for i, _ in bad}
                good = [i for i in range(len(values)) if i not in rejected]
                id_sets: dict = {}
                kernel.tally_values(tallies, [values[i] for i in good],
                                     [stamps[i] for i in good], window_ms,
                                     int(time.time() * 1000), DEFAULT_LATENCY_BOUNDS_MS, id_sets)
                # the id hashes per window, for the driver to tell copies from
                # first sightings across every task of the run (8 bytes a row)
                ids = {begin: id_hashes(found) for begin, found in id_sets.items()}
            yield {"key": unit.key, "topic": unit.topic, "messages": len(values),
                   "bytes": sum(map(len, values)), "errors": len(bad), "staged": staged,
                   "tallies": tallies, "ids": ids}
    finally:
        registry.close()
