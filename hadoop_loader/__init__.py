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

To come: the PySpark job that pulls the units in tasks and writes Parquet
by topic and event hour with an atomic publish, the error output, the
hadoop tier's counts, ``python -m hadoop_loader`` and the Airflow DAGs.

Uses the client, the schemas and the audit's counting; never broker internals.
"""
