"""A real Airflow for the DAG tests, in a subprocess of its own (Airflow
configures logging and its database for the whole process it runs in):
``airflow db migrate`` in a fresh AIRFLOW_HOME, then ``airflow dags test``."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DAGS = os.path.join(ROOT, "dags")
AIRFLOW = os.path.join(os.path.dirname(sys.executable), "airflow")


def airflow_env(home, config_path: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update({
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": DAGS,
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
        "SAMSA_WAREHOUSE_CONFIG": str(config_path),
        "SPARK_LOCAL_IP": "127.0.0.1",
    })
    return env


def migrate(env: dict[str, str]) -> None:
    out = subprocess.run([AIRFLOW, "db", "migrate"], env=env, capture_output=True, text=True,
                         timeout=180)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]


def dags_test(env: dict[str, str], dag_id: str, logical_date: str, timeout: float = 600,
              popen: bool = False):
    """``airflow dags test DAG DATE``: (the run's final state, its output);
    or the running process when ``popen``."""
    argv = [AIRFLOW, "dags", "test", dag_id, logical_date]
    if popen:
        return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)
    out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)
    return run_state(out.stdout + out.stderr), out.stdout + out.stderr


def run_state(output: str) -> str:
    """The final state of the DAG run, from `airflow dags test`'s output."""
    found = re.findall(r"DagRun Finished: dag_id=\S+ .*?state=(\w+)", output)
    return found[-1] if found else "unknown"



def call(url: str, token: str | None = None, body: dict | None = None,
         method: str | None = None) -> dict:
    """A call of Airflow's REST API (JSON in and out; POST when a body is given)."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method or ("POST" if data else "GET"),
                                     headers={"Content-Type": "application/json"})
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.load(response)
