"""python -m infra.local.airflow_stack up|status|down: a real Airflow on this
machine with the project's DAGs (``make airflow-up`` / ``make airflow-down``).

``up`` makes AIRFLOW_HOME under the state directory (default ``.airflow``),
runs ``airflow db migrate`` (SQLite in AIRFLOW_HOME by default; any database
by ``--db URL``, e.g. the PostgreSQL of the audit), then starts the API
server (the UI, on 127.0.0.1:PORT), the scheduler and the DAG processor,
each detached in its own session with its log in ``logs/<name>.log``, and
waits until the UI answers and the DAG processor has parsed the DAGs. The
scheduler runs tasks with the LocalExecutor. The login is ``admin`` with the
password Airflow generated, printed by ``up`` and ``status``
(``home/simple_auth_manager_passwords.json.generated``).

The DAGs read their settings from the file SAMSA_WAREHOUSE_CONFIG names
(``--warehouse-config``; default config/loader.toml). A triggerer is not
started: no DAG of the project defers (the sensor reschedules instead).
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
import urllib.request

from broker.harness.process import SupervisedProcess, proc_stat, signal_group

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STATE_FILE = "airflow-state.json"
SERVICES = ("api-server", "scheduler", "dag-processor")
PROJECT_DAGS = ("warehouse_load", "audit_report")


class AirflowStackError(RuntimeError):
    pass


def airflow_bin() -> str:
    return os.path.join(os.path.dirname(sys.executable), "airflow")


def environment(state_dir: str, port: int, warehouse_config: str, db_url: str = "") -> dict:
    home = os.path.join(state_dir, "home")
    env = dict(os.environ)
    env.update({
        "AIRFLOW_HOME": home,
        "AIRFLOW__CORE__DAGS_FOLDER": os.path.join(ROOT, "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{port}",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "30",
        "SAMSA_WAREHOUSE_CONFIG": os.path.abspath(warehouse_config),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYTHONPATH": os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p),
    })
    if db_url:
        env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = db_url
    return env


def _alive(record: dict) -> bool:
    stat = proc_stat(record["pid"])
    return stat is not None and stat.start_ticks == record["start_ticks"] and \
        stat.state not in "ZX"


def read_state(state_dir: str) -> dict | None:
    try:
        with open(os.path.join(state_dir, STATE_FILE)) as f:
            return json.load(f)
    except FileNotFoundError:
        return None


def password(state_dir: str) -> str | None:
    path = os.path.join(state_dir, "home", "simple_auth_manager_passwords.json.generated")
    try:
        with open(path) as f:
            return json.load(f).get("admin")
    except (OSError, ValueError):
        return None


def _get(url: str, timeout: float = 2.0) -> bytes | None:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.read()
    except OSError:
        return None


def _dags_parsed(env: dict) -> bool:
    """Whether the DAG processor has stored the project's DAGs."""
    import subprocess
    out = subprocess.run([airflow_bin(), "dags", "list", "--output", "json"], env=env,
                         capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        return False
    # (Airflow prints warnings on stdout too: the JSON is the line that is a list)
    lines = [line for line in out.stdout.splitlines() if line.startswith("[")]
    try:
        listed = {d["dag_id"] for d in json.loads(lines[-1])} if lines else set()
    except (ValueError, KeyError, TypeError):
        return False
    return set(PROJECT_DAGS) <= listed


def up(state_dir: str, port: int, warehouse_config: str, db_url: str = "",
       timeout: float = 180.0, say=print) -> dict:
    import subprocess
    state_dir = os.path.abspath(state_dir)
    existing = read_state(state_dir)
    if existing and any(_alive(r) for r in existing["processes"]):
        raise AirflowStackError(f"an Airflow already runs from {state_dir} "
                                f"(make airflow-down first)")
    env = environment(state_dir, port, warehouse_config, db_url)
    os.makedirs(os.path.join(state_dir, "logs"), exist_ok=True)
    t0 = time.monotonic()
    migrate = subprocess.run([airflow_bin(), "db", "migrate"], env=env, capture_output=True,
                             text=True, timeout=300)
    if migrate.returncode != 0:
        raise AirflowStackError("airflow db migrate failed:\n" + migrate.stdout[-2000:]
                                + migrate.stderr[-2000:])
    say(f"airflow db migrate: {time.monotonic() - t0:.1f} s")
    records = []
    for name in SERVICES:
        log_path = os.path.join(state_dir, "logs", f"{name}.log")
        command = [airflow_bin(), name] + (["--port", str(port), "--host", "127.0.0.1"]
                                           if name == "api-server" else [])
        proc = SupervisedProcess(name, command, log_path, cwd=state_dir, env=env).start()
        stat = proc_stat(proc.pid)
        records.append({"name": name, "pid": proc.pid, "command": command, "log": log_path,
                        "start_ticks": stat.start_ticks if stat else -1})
    state = {"url": f"http://127.0.0.1:{port}", "port": port, "processes": records,
             "warehouse_config": os.path.abspath(warehouse_config)}
    with open(os.path.join(state_dir, STATE_FILE), "w") as f:
        json.dump(state, f, indent=1)
    deadline = time.monotonic() + timeout
    try:
        while _get(f"{state['url']}/api/v2/monitor/health") is None:
            _check_alive(records)
            if time.monotonic() > deadline:
                raise AirflowStackError(f"the Airflow UI did not answer in {timeout:.0f} s")
            time.sleep(0.5)
        say(f"Airflow UI answering at {state['url']} ({time.monotonic() - t0:.1f} s)")
        while not _dags_parsed(env):
            _check_alive(records)
            if time.monotonic() > deadline:
                raise AirflowStackError(f"the DAGs were not parsed in {timeout:.0f} s: see "
                                        f"{state_dir}/logs/dag-processor.log")
            time.sleep(1.0)
    except BaseException:
        down(state_dir, say=lambda *_: None)
        raise
    say(f"DAGs {', '.join(PROJECT_DAGS)} parsed ({time.monotonic() - t0:.1f} s)")
    return state


def _check_alive(records: list[dict]) -> None:
    for r in records:
        if not _alive(r):
            from broker.harness.process import tail
            raise AirflowStackError(f"airflow {r['name']} exited; the end of {r['log']}:\n"
                                    + tail(r["log"], 30))


def down(state_dir: str, timeout: float = 30.0, say=print) -> int:
    """Stop every process ``up`` started; how many were running."""
    state = read_state(os.path.abspath(state_dir))
    if not state:
        say(f"no Airflow state in {state_dir}")
        return 0
    running = [r for r in state["processes"] if _alive(r)]
    for r in running:
        signal_group(r["pid"], signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while any(_alive(r) for r in running) and time.monotonic() < deadline:
        time.sleep(0.2)
    for r in running:
        if _alive(r):
            signal_group(r["pid"], signal.SIGKILL)
    say(f"stopped {len(running)} Airflow processes")
    return len(running)


def status(state_dir: str) -> dict:
    state = read_state(os.path.abspath(state_dir))
    if not state:
        return {"running": False}
    return {"running": any(_alive(r) for r in state["processes"]), "url": state["url"],
            "login": {"user": "admin", "password": password(state_dir)},
            "processes": {r["name"]: ("running" if _alive(r) else "stopped")
                          for r in state["processes"]},
            "healthy": _get(f"{state['url']}/api/v2/monitor/health") is not None}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m infra.local.airflow_stack", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("command", choices=["up", "status", "down"])
    p.add_argument("--dir", default=".airflow", help="state directory (default .airflow)")
    p.add_argument("--port", type=int, default=8080, help="the UI's port (default 8080)")
    p.add_argument("--warehouse-config", default=os.path.join(ROOT, "config", "loader.toml"),
                   help="the DAGs' settings file (SAMSA_WAREHOUSE_CONFIG)")
    p.add_argument("--db", default="", metavar="URL",
                   help="Airflow's metadata database (default SQLite in the state directory)")
    args = p.parse_args(argv)
    try:
        if args.command == "up":
            state = up(args.dir, args.port, args.warehouse_config, args.db)
            print(f"Airflow: {state['url']}  login: admin / {password(args.dir)}")
            print(f"logs: {os.path.abspath(args.dir)}/logs/; stop: make airflow-down")
        elif args.command == "down":
            down(args.dir)
        else:
            print(json.dumps(status(args.dir), indent=1))
    except AirflowStackError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
