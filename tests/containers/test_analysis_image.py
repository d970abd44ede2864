"""The analysis image (infra/docker/analysis): pyspark, Airflow, the loader
and the DAGs, working in their container.

* ``airflow standalone`` in the image becomes healthy by the image's own
  HEALTHCHECK, and its DAG processor stores the project's DAGs
  (warehouse_load, audit_report) with no import errors;
* the loader in the image loads page views that the test produced into a
  broker container (a ZooKeeper container beside it) into Parquet on a host
  directory: every row in its hour, the loader's offsets kept with the
  output at the broker's end offsets, and a second run (spark-submit, as
  the warehouse_load DAG runs it) adds nothing. The loader runs as a uid
  the image has no name for, as ``--user "$(id -u)"`` gives one to own the
  files on the host (Spark's Hadoop login needs a name: the entrypoint
  gives it one); Airflow above runs as the image's own user.
"""
from __future__ import annotations

import json
import os
import sys
import time
from types import SimpleNamespace

import pytest

from broker.client.admin import AdminClient
from broker.coordination import paths
from cluster_helpers import chroot_client
from container_helpers import free_ports, healthy, run_to_end
from infra.docker.pipeline import ANALYSIS, SAMSA, ZOOKEEPER, metadata_answers, zookeeper_serving
from schemas import catalog
from schemas.registry import SchemaRegistry

# the loader tests' page views (v1 and v2) and Parquet readers: one way to make them
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "hadoop_loader"))
from loader_helpers import BASE, produce, read_rows, rows_per_hour  # noqa: E402

PROJECT_DAGS = {"warehouse_load", "audit_report"}
# the host user's uid and gid, which the image has no name for (4242 for root: not root)
LOADER_UID, LOADER_GID = (os.getuid(), os.getgid()) if os.getuid() else (4242, 4242)
BROKER_ID = 0                              # produce() waits on broker 0's topic


@pytest.fixture(scope="module")
def analysis_image(docker_host):
    import docker
    client = docker.from_env()
    try:
        client.images.get(ANALYSIS)
    except docker.errors.ImageNotFound:
        pytest.fail(f"{ANALYSIS} is missing in the engine at {docker_host}: build it with "
                    f"`python -m infra.docker.images --only analysis`", pytrace=False)
    finally:
        client.close()
    return ANALYSIS


def _json_list(output: str):
    """The JSON list in an airflow command's output (Airflow also prints
    warnings on stdout); None when there is none."""
    lines = [line for line in output.splitlines() if line.startswith("[")]
    try:
        return json.loads(lines[-1]) if lines else None
    except ValueError:
        return None


def test_airflow_in_the_image_is_healthy_and_imports_the_dags(containers, analysis_image):
    api, worker_logs, trigger_logs = free_ports(3)
    started = time.monotonic()
    airflow = containers.run(
        "airflow", analysis_image, command=["airflow", "standalone"],
        env={"AIRFLOW__API__HOST": "127.0.0.1", "AIRFLOW__API__PORT": api,
             "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": worker_logs,
             "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": trigger_logs},
        ready=healthy, timeout=240)
    healthy_s = time.monotonic() - started

    deadline = time.monotonic() + 120
    while True:                            # until the DAG processor has stored them
        code, out = airflow.exec(["airflow", "dags", "list", "--output", "json"])
        listed = {d["dag_id"]: d for d in _json_list(out) or []} if code == 0 else {}
        if PROJECT_DAGS <= set(listed):
            break
        assert time.monotonic() < deadline, f"the DAGs were not listed in time:\n{out[-3000:]}"
        time.sleep(1.0)
    for dag_id in PROJECT_DAGS:
        assert listed[dag_id]["fileloc"] == f"/opt/samsa-app/dags/{dag_id}.py"
    code, out = airflow.exec(["airflow", "dags", "list-import-errors", "--output", "json"])
    assert code == 0, out[-3000:]
    assert _json_list(out) == [], out[-3000:]
    print(f"airflow standalone healthy {healthy_s:.1f} s after start, the DAGs listed "
          f"{time.monotonic() - started:.1f} s after start")


def test_the_loader_in_the_image_loads_a_broker_containers_events(containers, analysis_image,
                                                                   tmp_path):
    zk_port, broker_port, metrics_port = free_ports(3)
    containers.run("zookeeper", ZOOKEEPER, env={"ZOO_PORT": zk_port},
                   ready=lambda s: zookeeper_serving(zk_port))
    connect = f"127.0.0.1:{zk_port}/analysis"
    zk = chroot_client(connect)            # makes the chroot the broker registers in
    registry = SchemaRegistry.open(f"zookeeper://{connect}")
    try:
        address = f"127.0.0.1:{broker_port}"
        containers.run(
            "broker", SAMSA,
            command=["broker", "--broker-id", str(BROKER_ID), "--port", str(broker_port),
                     "--metrics-port", str(metrics_port), "--data-dir", "/data",
                     "--set", f"zookeeper={connect}", "--set", "default_partitions=2"],
            env={"SAMSA_HEALTH_PORT": metrics_port},
            # it answers Metadata a moment before it registers; the producer needs both
            ready=lambda s: metadata_answers(address)
            and zk.exists(paths.broker_id_path(BROKER_ID)) is not None)
        registry.register("page_views", catalog.load("samsa.events.PageViewEvent"))
        registry.register("page_views", catalog.load("samsa.events.PageViewEvent.v2"))
        want = produce(SimpleNamespace(connect=connect, zk=zk), registry, 60, BASE)
    finally:
        registry.close()
        zk.stop()
        zk.close()
    with AdminClient(address) as admin:
        ends = {f"page_views/{BROKER_ID}-{p}": admin.latest_offset("page_views", p)
                for p in range(admin.partition_count("page_views"))}

    out = tmp_path / "warehouse"
    out.mkdir()
    os.chmod(out, 0o777)                   # LOADER_UID is not its owner when the tests run as root
    load = ["loader", "--zookeeper", connect, "--master", "local[2]", "--whitelist", "page_views"]
    as_loader = {"files": {"/data/warehouse:rw": str(out)}, "user": f"{LOADER_UID}:{LOADER_GID}",
                 "timeout": 240}
    code, log = run_to_end(containers, "loader", analysis_image, load, **as_loader)
    assert code == 0, log[-4000:]
    assert "60 messages" in log, log[-4000:]
    rows = read_rows(str(out))
    assert len(rows) == 60 and rows_per_hour(rows) == want
    parquet = next(p for p in (out / "page_views").rglob("*.parquet"))
    assert parquet.stat().st_uid == LOADER_UID

    from hadoop_loader.state import OffsetStore
    commit = OffsetStore(str(out)).latest()
    assert commit is not None
    assert {k: v for k, v in commit.offsets.items() if k.startswith("page_views/")} == ends

    # offsets read back from the output: a second run, through spark-submit as
    # the warehouse_load DAG runs it, loads nothing again
    submit = ["submit", "--set", f"zookeeper={connect}", "--set", "master=local[2]",
              "--set", "whitelist=page_views"]
    code, log = run_to_end(containers, "loader-submit", analysis_image, submit, **as_loader)
    assert code == 0, log[-4000:]
    assert " 0 messages" in log, log[-4000:]
    assert len(read_rows(str(out))) == 60
    assert OffsetStore(str(out)).latest().offsets == commit.offsets
