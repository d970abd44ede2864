"""The warehouse loader: the analysis cluster's topics into Parquet, offsets
kept with the output (after Camus).

Built in steps (issue 11). Here so far:

* state.py: the offsets a load committed, stored with the output;
* plan.py: work units, one per broker-partition byte range [committed,
  latest at plan time), split at segment starts;
* frames.py: raw Avro record bodies framed into Avro container files per
  writer schema, without decoding them (the fast path into the JVM's Avro
  reader: tests/hadoop_loader/test_spark_avro.py shows Spark decoding them
  with the reader schema, v1 rows getting v2's defaults, written as Parquet
  by event date and hour).

* pull.py: inside a Spark task, a unit pulled with the consumer and staged
  as framed Avro (values that are not envelopes, or name an unknown schema,
  go to the error output);
* job.py: the load (plan, tasks, JVM Avro decode resolved to the latest
  reader schema, Parquet by event date/hour, a manifest, moves, the
  offsets commit last; an interrupted publish finished by the next run);
* config.py: its settings.

* cli.py: ``python -m hadoop_loader`` (and spark-submit of __main__.py).

To come: hdfs:// and s3a:// outputs, shipping the code to remote executors,
the Airflow DAGs, the benchmark (docs/loader.md).

Uses the client, the schemas and the audit's counting; never broker internals.
"""
