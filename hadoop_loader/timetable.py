"""The warehouse DAGs' timetable: one run per period, whoever makes it.

A scheduled run of ``CronDataIntervalTimetable`` has the start of its
period as its logical date and the period as its data interval. A run
triggered by hand gets the logical date it is given and, from Airflow,
the period that *ends* there: a run by hand for hour H, given the end of
H, then holds the logical date of the scheduled run of H+1. The scheduler
cannot make that run ("run already exists; skipping dagrun creation",
about once a second) and takes the next run's dates from the manual
run's interval, which brings it back to the same date: hour H+1 is never
loaded (issue 25).

``PeriodStartTimetable`` schedules exactly as ``CronDataIntervalTimetable``
does and gives a run by hand the period that *begins* at its logical date
(or, between two ticks, the period that holds it). A run by hand for hour
H, given H, is then hour H's run: the scheduler finds it, makes no second
run and goes on to H+1. Reloading a period that has run is Airflow's
clear.

Airflow knows the class through the ``samsa`` plugin
(hadoop_loader/airflow_plugin.py, the ``airflow.plugins`` entry point of
the installed package): the scheduler rebuilds DAGs from their
serialized form and refuses timetables no plugin registers.
"""
from __future__ import annotations

from airflow.timetables.base import DataInterval
from airflow.timetables.interval import CronDataIntervalTimetable


class PeriodStartTimetable(CronDataIntervalTimetable):
    """Cron periods; a run by hand loads the period that begins at (or
    holds) its logical date, so it has the logical date of that period's
    scheduled run."""

    description = "one run per period; a run by hand loads the period starting at its date"

    def infer_manual_data_interval(self, *, run_after) -> DataInterval:
        start = self._align_to_prev(run_after)
        return DataInterval(start=start, end=self._get_next(start))
