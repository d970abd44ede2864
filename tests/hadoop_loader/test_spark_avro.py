"""The loader's path into the warehouse, checked with real Spark: container
files framed from raw bodies of two writer schemas (page views v1 and v2)
are decoded by Spark's JVM Avro reader and resolved to the latest reader
schema (v1 rows get v2's default), then written as Parquet by event date and
hour and read back with pyarrow, an independent reader."""
from __future__ import annotations

import json

import pyarrow.dataset as ds

from hadoop_loader.frames import split_envelopes, write_container
from schemas import catalog
from schemas.registry import SchemaRegistry
from schemas.stores import FileStore

from loader_helpers import BASE, HOUR, page_view_value


def test_framed_files_decode_in_spark_with_the_reader_schema(spark, tmp_path):
    from pyspark.sql import functions as F
    registry = SchemaRegistry(FileStore(str(tmp_path / "registry.json")))
    registry.register("page_views", catalog.load("samsa.events.PageViewEvent"))
    registry.register("page_views", catalog.load("samsa.events.PageViewEvent.v2"))
    values, expected_hours = [], {}
    for i in range(600):
        t = BASE + (i % 3) * HOUR + i
        values.append(page_view_value(registry, i, t))
        expected_hours[t - t % HOUR] = expected_hours.get(t - t % HOUR, 0) + 1
    by_schema, bad = split_envelopes(values)
    assert bad == [] and len(by_schema) == 2
    staged = tmp_path / "avro"
    staged.mkdir()
    for sid, bodies in by_schema.items():
        with open(staged / f"{sid}.avro", "wb") as f:
            write_container(f, json.dumps(registry.by_id(sid)), bodies, codec="deflate")
    reader = json.dumps(registry.get("page_views").schema)
    df = (spark.read.format("org.apache.spark.sql.avro.AvroFileFormat")
          .option("avroSchema", reader).load(str(staged)))
    ts = (F.col("header.time_ms") / 1000).cast("timestamp")
    df = df.withColumn("date", F.date_format(ts, "yyyy-MM-dd")) \
        .withColumn("hour", F.date_format(ts, "HH"))
    out = tmp_path / "parquet"
    df.repartition("date", "hour").write.partitionBy("date", "hour").parquet(str(out))

    table = ds.dataset(str(out), partitioning="hive").to_table()
    assert table.num_rows == 600
    rows = table.to_pylist()
    assert sum(1 for r in rows if r["session_id"] == "") == 300            # v1 rows: the default
    assert {r["session_id"] for r in rows if r["member_id"] % 2} == \
        {f"s{i}" for i in range(1, 600, 2)}
    hours = {}
    for r in rows:
        hours[(str(r["date"]), int(r["hour"]))] = hours.get((str(r["date"]), int(r["hour"])), 0) + 1
    import datetime as dt
    want = {(dt.datetime.fromtimestamp(h / 1000, dt.timezone.utc).strftime("%Y-%m-%d"),
             dt.datetime.fromtimestamp(h / 1000, dt.timezone.utc).hour): n
            for h, n in expected_hours.items()}
    assert hours == want
