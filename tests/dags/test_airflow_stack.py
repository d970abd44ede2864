"""make airflow-up's Airflow (infra/local/airflow_stack.py): the API server,
scheduler and DAG processor really run the project's DAGs. The test logs in
through the REST API with the generated password, triggers audit_report for
a day (against a real audit service), waits for the scheduler to run it to
success, finds the report beside the data, and stops everything."""
from __future__ import annotations

import datetime as dt
import json
import os
import re
import subprocess
import time
import urllib.request

import pytest

from airflow_helpers import call
from audit.config import ServeConfig
from audit.service import AuditService
from broker.service_kit.process import command_lines
from broker_helpers import unused_port, wait_until
from infra.local import airflow_stack


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_airflow_up_runs_the_project_dags_and_down_stops_it(zookeeper, zk_chroot, tmp_path):
    service = AuditService(ServeConfig(zookeeper=zookeeper.connect_string(zk_chroot),
                                       http_port=0, data_dir=str(tmp_path), grace_ms=60_000))
    audit_port = service.serve_http()
    output = tmp_path / "warehouse"
    config = tmp_path / "warehouse.toml"
    config.write_text(f'[loader]\nzookeeper = "{zookeeper.connect_string(zk_chroot)}"\n'
                      f'output = "{output}"\n[warehouse]\n'
                      f'audit_url = "http://127.0.0.1:{audit_port}"\n')
    state_dir = str(tmp_path / "airflow")
    port = unused_port()
    try:
        state = airflow_stack.up(state_dir, port, str(config), say=lambda *_: None)
        url = state["url"]
        assert airflow_stack.status(state_dir)["healthy"] is True
        password = airflow_stack.password(state_dir)
        token = call(f"{url}/auth/token", body={"username": "admin",
                                               "password": password})["access_token"]
        dags = {d["dag_id"] for d in call(f"{url}/api/v2/dags", token)["dags"]}
        assert {"warehouse_load", "audit_report"} <= dags
        # a backfill of three hours plans three hourly runs (dry run: nothing is run)
        env = airflow_stack.environment(state_dir, port, str(config))
        out = subprocess.run([airflow_stack.airflow_bin(), "backfill", "create", "--dag-id",
                              "warehouse_load", "--from-date", "2026-11-01T10:00:00+00:00",
                              "--to-date", "2026-11-01T12:00:00+00:00", "--dry-run"],
                             env=env, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr[-3000:]
        planned = re.findall(r"\| 2026-11-01 (\d\d):00:00\+00:00 \|", out.stdout)
        assert planned == ["10", "11", "12"], out.stdout[-3000:]

        day = dt.datetime.now(dt.timezone.utc).replace(hour=0, minute=0, second=0,
                                                       microsecond=0) - dt.timedelta(days=2)
        run = call(f"{url}/api/v2/dags/audit_report/dagRuns", token,
                   {"logical_date": day.isoformat(), "dag_run_id": "test-day"})
        # a run by hand loads the day that begins at its logical date (that
        # day's scheduled run's date: hadoop_loader/timetable.py)
        report_day = day
        assert run["data_interval_start"].startswith(report_day.strftime("%Y-%m-%d"))
        # unpaused, the scheduler runs it (and yesterday's scheduled run: catchup is off)
        request = urllib.request.Request(f"{url}/api/v2/dags/audit_report", method="PATCH",
                                         data=b'{"is_paused": false}',
                                         headers={"Content-Type": "application/json",
                                                  "Authorization": f"Bearer {token}"})
        urllib.request.urlopen(request, timeout=30).close()

        def finished() -> bool:
            got = call(f"{url}/api/v2/dags/audit_report/dagRuns/test-day", token)
            return got["state"] in ("success", "failed")
        wait_until(finished, 240, what="the scheduler to run audit_report")
        got = call(f"{url}/api/v2/dags/audit_report/dagRuns/test-day", token)
        assert got["state"] == "success", open(os.path.join(state_dir, "logs",
                                                            "scheduler.log")).read()[-4000:]
        report = output / "_audit" / f"date={report_day:%Y-%m-%d}" / "report.json"
        assert json.loads(report.read_text())["summary"]["lost"] == 0
    finally:
        stopped = airflow_stack.down(state_dir, say=lambda *_: None)
        service.close()
    assert stopped == len(airflow_stack.SERVICES)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and \
            any(state_dir.encode() in b" ".join(a) for _, a in command_lines()):
        time.sleep(0.2)
    assert not any(state_dir.encode() in b" ".join(a) for _, a in command_lines())
