"""audit_report: every day, the audit's report of the day (HTML heatmap and
JSON verdicts) kept beside the warehouse data; the run fails when the audit
shows a loss, naming the lost windows in its log.

Wiring only: the step is hadoop_loader/dag_steps.py (audit_report); the
settings are the [loader] and [warehouse] tables of the file
SAMSA_WAREHOUSE_CONFIG names (config/loader.toml).
"""
from __future__ import annotations

from airflow.sdk import DAG, task

from hadoop_loader import dag_steps
from hadoop_loader.timetable import PeriodStartTimetable

settings = dag_steps.dag_settings()

with DAG(
    dag_id="audit_report",
    description="The day's audit report beside the data; fails on a loss",
    # a run's logical date is the start of its day, scheduled or by hand
    schedule=PeriodStartTimetable("0 0 * * *", timezone="UTC"),
    start_date=dag_steps.start_date(settings),
    catchup=settings.catchup,
    max_active_runs=1,
    default_args=dag_steps.default_args(settings),
    tags=["samsa", "audit"],
    doc_md=__doc__,
) as dag:

    @task
    def report(data_interval_start=None, data_interval_end=None) -> dict:
        return dag_steps.audit_report(data_interval_start, data_interval_end)

    report()
