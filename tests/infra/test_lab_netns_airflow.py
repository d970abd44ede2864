"""Airflow in its host of the network lab (issue 29, point 1): the lab in the
netns runtime with the audit in the ``audit`` host, audited traffic from
each datacenter's client host, then a real Airflow (API server, scheduler,
DAG processor, triggerer) in the analysis datacenter's ``airflow`` host.
warehouse_load, triggered over the REST API at that host's address and run
by the scheduler, waits on the audit across the lab's network, runs the
loader (spark-submit, its driver bound to the host's address) against the
analysis cluster at its lab addresses, and the audit's hadoop tier then has
every acknowledged message. The lab is secured: the audit and the loader
run with their users and ZooKeeper identities, the audit service serves
HTTPS to the lab's HTTP users (the DAGs ask it as admin). Every Airflow
process ran in the host's namespace; nothing is left behind. Needs root: skipped, with the reason,
where namespaces cannot be made (CI runs as root)."""
from __future__ import annotations

import datetime as dt
import os
import time

import pytest

from broker_helpers import wait_until
from infra.local.network.runner import missing_requirements
from lab_helpers import processes_mentioning

MISSING = missing_requirements()
pytestmark = pytest.mark.skipif(bool(MISSING), reason="the network lab needs "
                                + ", ".join(MISSING))

SUBNET = "10.91.0.0/16"


def _verdicts(audit_url: str, hour_ms: int, hour_len: int, access=None) -> list[dict]:
    from audit.remote import fetch_verdicts
    return fetch_verdicts(audit_url, hour_ms, hour_ms + hour_len,
                          credentials=access)["verdicts"]


def _tier(verdicts: list[dict], tier: str) -> tuple[int, int]:
    """(count, missing) of ``tier`` over ``verdicts``."""
    return (sum(v["count"] for v in verdicts if v["tier"] == tier),
            sum(v["missing"] for v in verdicts if v["tier"] == tier))


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_warehouse_load_runs_in_the_airflow_host(tmp_path):
    from infra.local import airflow_stack
    from infra.local.drill_network import Traffic, drill_topology
    from infra.local.lab import Lab
    from infra.local.network import control
    from infra.local.pipeline import call_airflow as airflow_api
    from infra.local.traffic import HOUR_MS, prepare_clusters

    state = str(tmp_path / "lab")
    # secured: the audit's and the loader's users, identities and HTTPS too
    topology = drill_topology(SUBNET, rtt_ms=10.0, secure=True)
    lab = Lab(topology, state, runtime="netns")
    lab.up(timeout=120, mirrors=False)
    try:
        prepare_clusters({lab.zookeeper_connect(c.name): c.topic_partitions()
                          for c in topology.clusters()}, lab.security)
        lab.start_mirrors(timeout=120)
        # unpausing the DAG makes the scheduler run the hour just ended as
        # well, before the triggered one (one run at a time); that empty hour
        # is waited on until the audit's grace for it runs out, so a short
        # grace: started just after the hour, a 10-minute one cost 7 minutes
        audit_url = lab.start_audit(grace_ms=60_000, timeout=120)
        assert audit_url.startswith("https://")
        access = lab.http_access
        now = int(time.time() * 1000)
        hour = now - now % HOUR_MS - 2 * HOUR_MS
        traffic = Traffic(lab, str(tmp_path / "traffic"), hour, per_round=300, seed=29)
        traffic.start()
        try:
            traffic.wait_rounds(1)
        finally:
            result = traffic.stop()
        acked = result.total()
        assert acked > 0 and result.failed == 0

        def upstream_complete() -> bool:
            verdicts = _verdicts(audit_url, hour, HOUR_MS, access)
            return all(_tier(verdicts, t) == (acked, 0) for t in ("producer", "mirror"))
        wait_until(upstream_complete, 180, interval=2,
                   what=lambda: f"the audit to have all {acked} messages at the producer and "
                                f"mirror tiers: {_verdicts(audit_url, hour, HOUR_MS, access)}")

        url = lab.start_airflow(sensor_poke_s=2.0, sensor_timeout_s=300.0, timeout=300)
        address = topology.address_of("airflow")
        assert url == f"https://{address}:8080"            # secured: HTTPS of its own
        assert lab.airflow_url() == url
        ca_file = lab.airflow_tls.ca_file

        def call_airflow(url, token=None, body=None, method=None):
            return airflow_api(url, token, body, method, ca_file=ca_file)
        fields, records = airflow_stack.read(lab.path("airflow"))
        # every Airflow process runs in the airflow host's network namespace
        host_ns = os.readlink(f"/proc/{control.host_pid(state, 'airflow')}/ns/net")
        assert {r.name: os.readlink(f"/proc/{r.pid}/ns/net") for r in records} == \
            {r.name: host_ns for r in records}
        assert host_ns != os.readlink("/proc/self/ns/net")

        token = call_airflow(f"{url}/auth/token", body={
            "username": "admin",
            "password": airflow_stack.password(lab.path("airflow"))})["access_token"]
        run_id = "netns-load"
        call_airflow(f"{url}/api/v2/dags/warehouse_load/dagRuns", token, {
            "logical_date": dt.datetime.fromtimestamp(hour / 1000, dt.timezone.utc).isoformat(),
            "dag_run_id": run_id})
        call_airflow(f"{url}/api/v2/dags/warehouse_load", token, {"is_paused": False},
                     method="PATCH")

        def finished() -> str | None:
            run = call_airflow(f"{url}/api/v2/dags/warehouse_load/dagRuns/{run_id}", token)
            return run["state"] if run["state"] in ("success", "failed") else None
        def where_the_run_is() -> str:
            tasks = call_airflow(f"{url}/api/v2/dags/warehouse_load/dagRuns/{run_id}"
                                 f"/taskInstances", token)["task_instances"]
            return (f"warehouse_load's run: tasks "
                    f"{ {t['task_id']: t['state'] for t in tasks} } "
                    f"(logs in {lab.path('airflow')})")
        outcome = wait_until(finished, 480, interval=3, what=where_the_run_is)
        assert outcome == "success", f"the run {outcome}; logs in {lab.path('airflow')}"
        # the loader's own tier: every acknowledged message reached the warehouse
        def hadoop_tier() -> tuple[int, int]:
            return _tier(_verdicts(audit_url, hour, HOUR_MS, access), "hadoop")
        wait_until(lambda: hadoop_tier() == (acked, 0), 120, interval=2,
                   what=lambda: f"the audit's hadoop tier to have all {acked} messages: "
                                f"{hadoop_tier()}")
        assert os.path.isdir(lab.path("warehouse"))
    finally:
        lab.down(timeout=20)
    assert lab.airflow_url() is None
    assert processes_mentioning(state) == []
