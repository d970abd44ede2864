"""make airflow-up's Airflow (infra/local/airflow_stack.py) in the containers
runtime, as Terraform's local environment runs it with ``-var
runtime=containers``: ``db migrate``, then the API server, the scheduler and
the DAG processor, each an attached ``docker run`` of samsa/analysis (host
networking, as the caller, the state directory mounted at its own path).

* the API answers with the image's DAGs (warehouse_load, audit_report) and
  no import errors; the login is the password Airflow generated into the
  state directory;
* the settings file and the loader's output live outside the state
  directory (as Terraform renders them): they are mounted at their own
  paths, so the DAGs' settings hold inside. Real runs: audit_report (against
  an audit service on the host) writes its report into the output;
  warehouse_load's load, a spark-submit in the scheduler's container, loads
  60 page views of a broker process on the host into Parquet there, every
  row in its hour, the files owned by the caller;
* ``down`` stops everything, the container of a SIGKILLed docker client
  included: no container is left, no docker client runs.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import signal
import sys
import time

import pytest

from audit.config import ServeConfig
from audit.service import AuditService
from broker_helpers import wait_until
from container_helpers import free_ports
from infra.local import airflow_stack
from infra.local.pipeline import call_airflow as call
from schemas import catalog
from schemas.registry import SchemaRegistry
from test_lab_containers import USER, containers_of, running

# the loader tests' page views and Parquet readers: one way to make them
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "hadoop_loader"))
from loader_helpers import BASE, produce, read_rows, rows_per_hour  # noqa: E402

PROJECT_DAGS = {"warehouse_load", "audit_report"}


def run_dag(url: str, token: str, dag_id: str, logical_date: dt.datetime,
            timeout: float) -> dict:
    """Trigger a run of ``dag_id``, unpause it, wait until the scheduler has
    finished it: ``{"state": ..., "tasks": {task_id: state}}``.

    Unpaused, the DAG also gets its scheduled runs (the latest hour's, and a
    new one at each hour's end), which wait for an audit this test never
    completes; with max_active_runs=1 one of them would hold the test's run
    back (it did, at 06:00). They are marked failed as they appear."""
    runs_url = f"{url}/api/v2/dags/{dag_id}/dagRuns"
    run_url = f"{runs_url}/test-run"
    call(runs_url, token, {"logical_date": logical_date.isoformat(), "dag_run_id": "test-run"})
    call(f"{url}/api/v2/dags/{dag_id}", token, {"is_paused": False}, method="PATCH")

    def finished() -> bool:
        for other in call(runs_url, token)["dag_runs"]:
            if other["dag_run_id"] != "test-run" and other["state"] in ("queued", "running"):
                call(f"{runs_url}/{other['dag_run_id']}", token, {"state": "failed"},
                     method="PATCH")
        return call(run_url, token)["state"] in ("success", "failed")
    wait_until(finished, timeout, interval=0.5, what=f"the scheduler to run {dag_id}")
    return {"state": call(run_url, token)["state"],
            "tasks": {t["task_id"]: t["state"]
                      for t in call(run_url + "/taskInstances", token)["task_instances"]}}


@pytest.mark.timeout(400)
def test_airflow_runs_from_the_analysis_image_and_down_leaves_no_container(
        docker_host, clusters, tmp_path):
    analysis = clusters("analysis")                # a broker process on the host
    registry = SchemaRegistry.open(f"zookeeper://{analysis.connect}")
    try:
        registry.register("page_views", catalog.load("samsa.events.PageViewEvent"))
        registry.register("page_views", catalog.load("samsa.events.PageViewEvent.v2"))
        want = produce(analysis, registry, 60, BASE)
    finally:
        registry.close()
    (tmp_path / "audit").mkdir()
    service = AuditService(ServeConfig(zookeeper=analysis.connect, http_port=0,
                                       data_dir=str(tmp_path / "audit"), grace_ms=60_000))
    audit_port = service.serve_http()
    output = tmp_path / "warehouse"                # beside the state directory, not in it
    config = tmp_path / "warehouse.toml"
    config.write_text(f'[loader]\nzookeeper = "{analysis.connect}"\n'
                      f'output = "{output}"\n[warehouse]\n'
                      f'audit_url = "http://127.0.0.1:{audit_port}"\n')
    state_dir = str(tmp_path / "airflow")
    (port,) = free_ports(1)
    pids: list[int] = []
    started = time.monotonic()
    try:
        state = airflow_stack.up(state_dir, int(port), str(config), runtime="containers",
                                 say=lambda *_: None)
        up_s = time.monotonic() - started
        pids = [r["pid"] for r in state["processes"]]
        assert airflow_stack.status(state_dir)["runtime"] == "containers"
        assert airflow_stack.status(state_dir)["healthy"] is True

        ours = containers_of(state_dir)
        assert sorted(ours) == sorted(r["container"] for r in state["processes"])
        assert len(ours) == len(airflow_stack.SERVICES)
        for container in ours.values():
            assert container.status == "running", container.name
            assert container.attrs["Config"]["Image"] == "samsa/analysis:latest"
            assert container.attrs["HostConfig"]["NetworkMode"] == "host"
            assert container.attrs["Config"]["User"] == USER

        url = state["url"]
        token = call(f"{url}/auth/token", body={
            "username": "admin", "password": airflow_stack.password(state_dir)})["access_token"]
        dags = {d["dag_id"]: d for d in call(f"{url}/api/v2/dags", token)["dags"]}
        assert PROJECT_DAGS <= set(dags)
        for dag_id in PROJECT_DAGS:           # the image's DAGs, not this checkout's
            assert dags[dag_id]["fileloc"] == f"{airflow_stack.IMAGE_DAGS}/{dag_id}.py"
        assert call(f"{url}/api/v2/importErrors", token)["total_entries"] == 0

        # a real run: audit_report for a day, run by the scheduler's container
        day = dt.datetime.now(dt.timezone.utc).replace(hour=0, minute=0, second=0,
                                                       microsecond=0) - dt.timedelta(days=2)
        run = run_dag(url, token, "audit_report", day, timeout=120)
        assert run["state"] == "success", \
            open(os.path.join(state_dir, "logs", "scheduler.log")).read()[-4000:]
        report_day = day                        # a run by hand loads the day starting there
        report = output / "_audit" / f"date={report_day:%Y-%m-%d}" / "report.json"
        assert json.loads(report.read_text())["summary"]["lost"] == 0
        assert report.stat().st_uid == os.getuid()
        ran_s = time.monotonic() - started

        # warehouse_load for an hour the audit has nothing on: its load, a
        # spark-submit in the scheduler's container, loads everything new
        run = run_dag(url, token, "warehouse_load", day + dt.timedelta(hours=5), timeout=150)
        assert run["state"] == "success", run["tasks"]
        rows = read_rows(str(output))
        assert len(rows) == 60 and rows_per_hour(rows) == want
        parquet = next((output / "page_views").rglob("*.parquet"))
        assert parquet.stat().st_uid == os.getuid()
        print(f"Airflow up from the image in {up_s:.1f} s; audit_report ran by "
              f"{ran_s:.1f} s; warehouse_load by {time.monotonic() - started:.1f} s")

        # SIGKILL cannot be forwarded: the container outlives its docker client
        killed = next(r for r in state["processes"] if r["name"] == "dag-processor")
        os.kill(killed["pid"], signal.SIGKILL)
        wait_until(lambda: not running(killed["pid"]), 10, what="the docker client to die")
        assert containers_of(state_dir)[killed["container"]].status == "running"
    finally:
        stopped = airflow_stack.down(state_dir, say=lambda *_: None)
        service.close()
    assert stopped == len(airflow_stack.SERVICES) - 1
    assert containers_of(state_dir) == {}
    assert not [pid for pid in pids if running(pid)]
