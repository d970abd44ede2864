"""The DAG files as Airflow's DagBag sees them (in a subprocess: Airflow sets
itself up for the whole process it is imported in): no import errors, a fast
parse that imports nothing heavy, and the structure the docs describe."""
from __future__ import annotations

import json
import subprocess
import sys

from airflow_helpers import DAGS, airflow_env

INSPECT = r"""
import json, sys, time
before = set(sys.modules)
from airflow.models import DagBag
after_airflow = set(sys.modules)
t0 = time.perf_counter()
bag = DagBag(dag_folder=sys.argv[1])
parse_s = time.perf_counter() - t0
loaded_by_dags = sorted(set(sys.modules) - after_airflow)
dags = {}
for dag_id in bag.dag_ids:
    dag = bag.dags[dag_id]
    tasks = {}
    for t in dag.tasks:
        tasks[t.task_id] = {
            "upstream": sorted(t.upstream_task_ids), "retries": t.retries,
            "backoff": t.retry_exponential_backoff,
            "retry_delay_s": t.retry_delay.total_seconds(),
            "operator": type(t).__name__, "mode": getattr(t, "mode", None),
            "poke_interval": getattr(t, "poke_interval", None),
            "timeout": getattr(t, "timeout", None),
            "execution_timeout_s": t.execution_timeout.total_seconds()
                                   if t.execution_timeout else None}
    tt = dag.timetable
    dags[dag_id] = {"tasks": tasks, "catchup": dag.catchup,
                    "max_active_runs": dag.max_active_runs,
                    "timetable": type(tt).__name__, "summary": tt.summary,
                    "start_date": dag.start_date.isoformat(), "tags": sorted(dag.tags)}
print(json.dumps({"errors": {k: v for k, v in bag.import_errors.items()}, "parse_s": parse_s,
                  "loaded_by_dags": loaded_by_dags, "dags": dags}))
"""

HEAVY = ("pyspark", "pyarrow", "pandas", "kazoo", "fastavro", "broker.client",
         "hadoop_loader.job", "hadoop_loader.plan", "audit.service")


def inspect(tmp_path, config_text: str) -> dict:
    config = tmp_path / "warehouse.toml"
    config.write_text(config_text)
    env = airflow_env(tmp_path / "airflow", config)
    out = subprocess.run([sys.executable, "-c", INSPECT, DAGS], env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_dags_parse_fast_without_heavy_imports_and_are_wired_as_documented(tmp_path):
    found = inspect(tmp_path, """
[loader]
zookeeper = "127.0.0.1:2181/analysis"
[warehouse]
start_date = "2026-06-01T00:00:00+00:00"
catchup = true
sensor_poke_s = 120.0
sensor_timeout_s = 7200.0
retries = 4
retry_delay_s = 60.0
load_timeout_s = 5400.0
step_timeout_s = 900.0
""")
    assert found["errors"] == {}
    assert found["parse_s"] < 2.0, found["parse_s"]
    heavy = [m for m in found["loaded_by_dags"] if m.split(".")[0] in HEAVY or m in HEAVY]
    assert heavy == [], heavy

    load = found["dags"]["warehouse_load"]
    # a run by hand for an hour is that hour's run (hadoop_loader/timetable.py)
    assert load["timetable"] == "PeriodStartTimetable" and load["summary"] == "0 * * * *"
    assert load["catchup"] is True and load["max_active_runs"] == 1
    assert load["start_date"].startswith("2026-06-01T00:00:00")
    tasks = load["tasks"]
    assert {k: v["upstream"] for k, v in tasks.items()} == {
        "audit_complete": [], "load": ["audit_complete"], "validate": ["load"],
        "mark_success": ["validate"]}
    sensor = tasks["audit_complete"]
    # deferrable (no reschedule mode: hadoop_loader/audit_wait.py says why)
    assert (sensor["operator"], sensor["poke_interval"], sensor["timeout"], sensor["retries"]) == \
        ("AuditCompleteSensor", 120.0, 7200.0, 0)
    assert tasks["load"]["retries"] == 4 and tasks["load"]["backoff"] is True
    assert tasks["load"]["retry_delay_s"] == 60.0
    # every task of both DAGs has a bounded run time: a hung step fails
    # instead of holding its hour (the sensor's wait in the triggerer is
    # bounded by its own timeout)
    bounds = {(dag_id, task_id): t["execution_timeout_s"]
              for dag_id, dag in found["dags"].items() for task_id, t in dag["tasks"].items()}
    assert set(dag_id for dag_id, _ in bounds) == {"warehouse_load", "audit_report"}
    assert bounds == {("warehouse_load", "audit_complete"): 900.0,
                      ("warehouse_load", "load"): 5400.0,
                      ("warehouse_load", "validate"): 900.0,
                      ("warehouse_load", "mark_success"): 900.0,
                      ("audit_report", "report"): 900.0}

    report = found["dags"]["audit_report"]
    assert report["timetable"] == "PeriodStartTimetable" and report["summary"] == "0 0 * * *"
    assert list(report["tasks"]) == ["report"]


def test_a_bad_settings_file_is_a_clear_import_error(tmp_path):
    found = inspect(tmp_path, "[loader]\nzookeeper = \"h:1/a\"\n[warehouse]\nsensor_poke_s = -1\n")
    assert set(found["errors"]) == {f"{DAGS}/warehouse_load.py", f"{DAGS}/audit_report.py"}
    message = found["errors"][f"{DAGS}/warehouse_load.py"]
    assert "sensor_poke_s and sensor_timeout_s must be positive" in message
