"""The warehouse loader: the analysis cluster's topics into Parquet, offsets
kept with the output (after Camus).

* state.py: the offsets a load committed, stored with the output, and per
  event hour the ranges its rows were read from (what a reload re-reads);
* plan.py: work units, one per broker-partition byte range [committed,
  latest at plan time), split at segment starts;
* frames.py: raw Avro record bodies framed into Avro container files per
  writer schema, without decoding them (the fast path into the JVM's Avro
  reader);
* pull.py: inside a Spark task, a unit pulled with the consumer and staged
  as framed Avro (values that are not envelopes, or name an unknown schema,
  go to the error output);
* job.py: the load (plan, tasks, JVM Avro decode resolved to the latest
  reader schema, Parquet by event date/hour, a manifest, moves, the
  offsets commit last; an interrupted publish finished by the next run; one
  load at a time per output); and the reload of an hour: its recorded
  ranges checked against retention, re-read, filtered to the hour and
  swapped in at once;
* config.py: its settings, and the DAGs';
* cli.py, __main__.py: ``python -m hadoop_loader``; submit.py: the same by spark-submit,
  and the zip of the code for --py-files;
* dag_steps.py: the steps of the Airflow DAGs in dags/;
* audit_wait.py: the DAG's wait for the audit (a sensor deferring to a trigger);
* timetable.py: the DAGs' timetable, one run per period whoever makes it;
* airflow_plugin.py: the Airflow plugin that registers that timetable;
* outputfs.py: the output's file system (local, hdfs://, s3a://) through
  pyarrow.fs, and the URIs Spark is given.

Uses the client, the schemas and the audit's counting; never broker internals.
"""
