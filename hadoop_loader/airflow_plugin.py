"""The ``samsa`` Airflow plugin: registers the warehouse DAGs' timetable
(hadoop_loader/timetable.py) so that the scheduler can rebuild the DAGs
from their serialized form. Found through the ``airflow.plugins`` entry
point of the installed package (pyproject.toml); imports nothing but the
timetable."""
from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from hadoop_loader.timetable import PeriodStartTimetable


class SamsaPlugin(AirflowPlugin):
    name = "samsa"
    timetables = [PeriodStartTimetable]
