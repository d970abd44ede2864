"""warehouse_load: every hour, load the analysis cluster's topics into the
Parquet warehouse once the audit says the hour is complete.

    audit_complete  (sensor, deferrable: hadoop_loader/audit_wait.py) the audit
                    shows every message the producers delivered in the hour
                    at the analysis tier
    load            spark-submit of the loader: everything new (offsets are
                    kept with the output); on a retry or a cleared run, then
                    the rebuild of the run's hour from the offsets recorded
                    for it, swapped in at once (fails, changing nothing,
                    when part of the hour has left the brokers' retention)
    validate        the event ids of the hour's rows, window by window, against
                    what the producers delivered (counts and id checksums in
                    the audit): fails on a missing message, also one hidden
                    under copies
    mark_success    _SUCCESS in each topic's date=/hour= partition

One run per hour, whoever made it: a run's logical date is the start of
the hour it loads, scheduled or triggered by hand (hadoop_loader/
timetable.py), so a run by hand for hour H is hour H's run and the
scheduler goes on to H+1; reload an hour that has run by clearing it.
docs/loader.md, "Loading an hour by hand". Every task has an
execution_timeout ([warehouse] load_timeout_s, step_timeout_s).

Wiring only: the steps are hadoop_loader/dag_steps.py; the settings are the
[loader] and [warehouse] tables of the file SAMSA_WAREHOUSE_CONFIG names
(config/loader.toml documents them). docs/loader.md has the whole story.
"""
from __future__ import annotations

import datetime as dt

from airflow.sdk import DAG, task

from hadoop_loader import dag_steps
from hadoop_loader.audit_wait import AuditCompleteSensor
from hadoop_loader.timetable import PeriodStartTimetable

settings = dag_steps.dag_settings()

with DAG(
    dag_id="warehouse_load",
    description="Load each hour into Parquet once the audit says it is complete",
    schedule=PeriodStartTimetable("0 * * * *", timezone="UTC"),
    start_date=dag_steps.start_date(settings),
    catchup=settings.catchup,
    max_active_runs=1,                   # one load of the output at a time, hours in order
    default_args=dag_steps.default_args(settings),
    tags=["samsa", "warehouse"],
    doc_md=__doc__,
) as dag:

    audit_complete = AuditCompleteSensor(task_id="audit_complete",
                                         poke_interval=settings.sensor_poke_s,
                                         timeout=settings.sensor_timeout_s)

    @task(execution_timeout=dt.timedelta(seconds=settings.load_timeout_s))
    def load(data_interval_start=None, data_interval_end=None, ti=None) -> int:
        return dag_steps.load(None, data_interval_start, data_interval_end, ti.try_number)

    @task
    def validate(data_interval_start=None, data_interval_end=None) -> dict:
        return dag_steps.validate(data_interval_start, data_interval_end)

    @task
    def mark_success(validated: dict, data_interval_start=None, data_interval_end=None) -> list:
        return dag_steps.mark_success(data_interval_start, data_interval_end, validated)

    checked = validate()
    audit_complete >> load() >> checked
    mark_success(checked)
