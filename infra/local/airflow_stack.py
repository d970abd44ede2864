"""python -m infra.local.airflow_stack up|status|down: a real Airflow on this
machine with the project's DAGs (``make airflow-up`` / ``make airflow-down``).

``up`` makes AIRFLOW_HOME under the state directory (default ``.airflow``),
runs ``airflow db migrate`` (SQLite in AIRFLOW_HOME by default; any database
by ``--db URL``, e.g. the PostgreSQL of the audit), then starts the API
server (the UI, on 127.0.0.1:PORT), the scheduler, the DAG processor and
the triggerer (warehouse_load's sensor defers to it), each detached in its
own session with its log in ``logs/<name>.log``, and
waits until the UI answers and the DAG processor has parsed the DAGs. The
scheduler runs tasks with the LocalExecutor. The login is ``admin`` with the
password Airflow generated, printed by ``up`` and ``status``
(``home/simple_auth_manager_passwords.json.generated``).

The DAGs read their settings from the file SAMSA_WAREHOUSE_CONFIG names
(``--warehouse-config``; default config/loader.toml).

With ``--runtime containers`` the same Airflow runs from the samsa/analysis
image (Airflow, the loader and the DAGs built in: ``make images``): ``db
migrate`` is a one-shot container, and each service an attached ``docker
run`` recorded like a process (infra/local/container_runtime.py: host
networking, as the invoking user, the state directory mounted at the same
path and labelled with it). The settings file and the loader's local output
(and ``report_dir``) are mounted at their own paths too, so the rendered
settings hold inside; a task's spark-submit runs in the scheduler's
container. The DAGs are the image's, not this checkout's: rebuild the image
after changing them. ``down`` also removes the containers a SIGKILLed docker
client would leave.

With ``tls`` (``AirflowTls``: a secured lab's, ``make demo``) the API server
serves HTTPS alone (Airflow's ``[api] ssl_cert``/``ssl_key``): the UI, the
REST API and the execution API its task runners call, which trust the
authority of ``[api] ssl_ca_file``; the state file keeps the authority, so
``status`` and the readiness check verify the server too.
"""
from __future__ import annotations

import argparse
import json
import os
import ssl
import sys
import time
import urllib.request
from dataclasses import dataclass
from typing import Callable

from broker.service_kit import detached
from broker.service_kit.detached import DetachedProcess
from broker.service_kit.process import SupervisedProcess, tail, wait_until
from infra.local.command import exit_status
from infra.local.container_runtime import (IMAGES, RUNTIMES, ContainerError, Docker, Mount,
                                           container_name, engine_host)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STATE_FILE = "airflow-state.json"
SERVICES = ("api-server", "scheduler", "dag-processor", "triggerer")
PROJECT_DAGS = ("warehouse_load", "audit_report")
#: Where the DAGs and the entrypoint are in the analysis image (infra/docker/analysis).
IMAGE_DAGS = "/opt/samsa-app/dags"
IMAGE_ENTRYPOINT = "/usr/local/bin/analysis"


class AirflowStackError(RuntimeError):
    pass


@dataclass(frozen=True)
class AirflowTls:
    """The API server on HTTPS: its certificate and key, and the authority
    that issued it (trusted by Airflow's own processes and this module)."""
    cert_file: str
    key_file: str
    ca_file: str

    def settings(self) -> dict[str, str]:
        return {"AIRFLOW__API__SSL_CERT": os.path.abspath(self.cert_file),
                "AIRFLOW__API__SSL_KEY": os.path.abspath(self.key_file),
                "AIRFLOW__API__SSL_CA_FILE": os.path.abspath(self.ca_file)}


def url_context(ca_file: str | None) -> ssl.SSLContext | None:
    """The TLS context of a client of an API server on HTTPS (None: plain)."""
    return ssl.create_default_context(cafile=ca_file) if ca_file else None


def airflow_bin() -> str:
    return os.path.join(os.path.dirname(sys.executable), "airflow")


def settings(state_dir: str, port: int, warehouse_config: str, db_url: str = "",
             dags_folder: str = os.path.join(ROOT, "dags"),
             address: str = "127.0.0.1", tls: AirflowTls | None = None) -> dict[str, str]:
    """Airflow's and the DAGs' settings (environment variables), the same in
    both runtimes but for where the DAGs are; ``address``: where the API
    server binds and is reached, and Spark's driver binds (a host of the
    network lab: its own address); ``tls``: the API server on HTTPS."""
    scheme = "https" if tls else "http"
    values = {
        "AIRFLOW_HOME": os.path.join(state_dir, "home"),
        "AIRFLOW__CORE__DAGS_FOLDER": dags_folder,
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
        "AIRFLOW__API__HOST": address,
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__API__BASE_URL": f"{scheme}://{address}:{port}",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{scheme}://{address}:{port}/execution/",
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "30",
        "SAMSA_WAREHOUSE_CONFIG": os.path.abspath(warehouse_config),
        "SPARK_LOCAL_IP": address,
        **(tls.settings() if tls else {}),
    }
    if db_url:
        values["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = db_url
        if db_url.startswith("postgresql+psycopg://"):
            # Airflow 3 opens an async engine too, and by default derives it
            # for asyncpg (not installed); psycopg 3 serves both
            values["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_ASYNC"] = db_url
    return values


def environment(state_dir: str, port: int, warehouse_config: str, db_url: str = "",
                address: str = "127.0.0.1", extra: dict[str, str] | None = None,
                tls: AirflowTls | None = None) -> dict:
    """The environment of this checkout's Airflow processes (and so of the
    tasks they run); ``extra``: more variables for them."""
    env = dict(os.environ)
    env.update(extra or {})
    env.update(settings(state_dir, port, warehouse_config, db_url, address=address, tls=tls))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)
    return env


def container_environment(state_dir: str, port: int, warehouse_config: str,
                          db_url: str = "", tls: AirflowTls | None = None) -> dict[str, str]:
    """The environment of the Airflow containers: the caller's own
    ``AIRFLOW__*`` (as a process inherits them: log server ports, ...), then
    the settings, with the image's DAGs."""
    env = {k: v for k, v in os.environ.items() if k.startswith("AIRFLOW__")}
    env.update(settings(state_dir, port, warehouse_config, db_url, dags_folder=IMAGE_DAGS,
                        tls=tls))
    return env


def container_mounts(state_dir: str, warehouse_config: str) -> list[Mount]:
    """What the containers need outside the state directory, at the same
    paths: the settings file (read-only) and the local directories it names
    (the loader's output, the audit reports'), made first so that they belong
    to the caller. A relative output is the processes' working directory's,
    the state directory."""
    from hadoop_loader.config import read_settings
    config = os.path.abspath(warehouse_config)
    try:
        loader, warehouse = read_settings(config)
    except (OSError, ValueError) as exc:
        raise AirflowStackError(f"the warehouse settings {config}: {exc}") from None
    mounts = [Mount(config, config, read_only=True)]
    for location in (loader.output, warehouse.report_dir):
        path = location[len("file://"):] if location.startswith("file://") else location
        if not path or "://" in path:       # hdfs://, s3a://: reached over the network
            continue
        path = os.path.normpath(os.path.join(state_dir, path))
        os.makedirs(path, exist_ok=True)
        mounts.append(Mount(path, path))
    # what is in the state directory is mounted already, with it
    return [m for m in dict.fromkeys(mounts)
            if m.host != state_dir and not m.host.startswith(state_dir + os.sep)]


def read(state_dir: str) -> tuple[dict, list[DetachedProcess]] | None:
    """The state file of ``state_dir``: its fields (url, port, runtime,
    docker_host, ...) and the records of the processes ``up`` started; None
    when there is none."""
    try:
        return detached.read_state(os.path.join(os.path.abspath(state_dir), STATE_FILE))
    except detached.StateFileError as exc:
        raise AirflowStackError(str(exc)) from None


def password(state_dir: str) -> str | None:
    path = os.path.join(state_dir, "home", "simple_auth_manager_passwords.json.generated")
    try:
        with open(path) as f:
            return json.load(f).get("admin")
    except (OSError, ValueError):
        return None


def _get(url: str, ca_file: str | None = None, timeout: float = 2.0) -> bytes | None:
    try:
        with urllib.request.urlopen(url, timeout=timeout,
                                    context=url_context(ca_file)) as response:
            return response.read()
    except OSError:
        return None


def _dags_parsed(cli: list[str], env: dict) -> bool:
    """Whether the DAG processor has stored the project's DAGs (``cli``: the
    airflow command, here or in a container)."""
    import subprocess
    out = subprocess.run(cli + ["dags", "list", "--output", "json"], env=env,
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


class _Runner:
    """How ``up`` runs an airflow command: this checkout's, or in a container
    of the analysis image (``docker`` set); ``enter``: what makes a command
    run in a host of the network lab (its network namespace), or None."""

    def __init__(self, state_dir: str, port: int, warehouse_config: str, db_url: str,
                 docker: Docker | None = None, address: str = "127.0.0.1",
                 enter: Callable[[list[str]], list[str]] | None = None,
                 extra_env: dict[str, str] | None = None, tls: AirflowTls | None = None) -> None:
        self.state_dir, self.docker, self.enter = state_dir, docker, enter
        if docker is None:
            self.env = environment(state_dir, port, warehouse_config, db_url, address, extra_env,
                                   tls)
        else:
            self.env = docker.env               # the docker client's
            self.container_env = {**container_environment(state_dir, port, warehouse_config,
                                                          db_url, tls), **(extra_env or {})}
            self.mounts = container_mounts(state_dir, warehouse_config)

    def container(self, name: str) -> str | None:
        return None if self.docker is None else container_name("airflow", self.state_dir, name)

    def command(self, name: str, args: list[str]) -> list[str]:
        """``airflow ARGS``, the one called ``name`` (its container's name)."""
        if self.docker is None:
            command = [airflow_bin(), *args]
            return self.enter(command) if self.enter else command
        return self.docker.run_command(self.container(name), IMAGES["analysis"],
                                       ["airflow", *args], state_dir=self.state_dir,
                                       env=self.container_env, mounts=self.mounts)

    def cli(self) -> list[str]:
        """The airflow command for queries: in the API server's container (its
        environment; the entrypoint names the uid for it), or this checkout's."""
        if self.docker is None:
            return [airflow_bin()]
        return [self.docker.cli, "exec", self.container("api-server"), IMAGE_ENTRYPOINT,
                "airflow"]


def up(state_dir: str, port: int, warehouse_config: str, db_url: str = "",
       timeout: float = 180.0, say=print, runtime: str = "processes",
       address: str = "127.0.0.1",
       enter: Callable[[list[str]], list[str]] | None = None,
       extra_env: dict[str, str] | None = None, tls: AirflowTls | None = None) -> dict:
    """Start Airflow (see the module's docstring) and wait until its UI
    answers and the DAGs are parsed; the state file's content (the
    processes' records as dicts). ``address`` and ``enter``: a host of the
    network lab (Lab.start_airflow): every process runs in its network
    namespace (``enter(command)``), the UI binds its address; processes
    runtime only. ``extra_env``: variables for every Airflow process and
    the tasks they run (a secured registry's $SAMSA_SCHEMA_REGISTRY_*);
    ``tls``: the API server on HTTPS (its files must be visible to the
    containers: in the state directory)."""
    import subprocess
    state_dir = os.path.abspath(state_dir)
    existing = read(state_dir)
    if existing and any(r.alive() for r in existing[1]):
        raise AirflowStackError(f"an Airflow already runs from {state_dir} "
                                f"(make airflow-down first)")
    if runtime not in RUNTIMES:
        raise AirflowStackError(f"runtime {runtime!r}: one of {', '.join(RUNTIMES)}")
    if enter is not None and runtime != "processes":
        raise AirflowStackError("Airflow runs in a host of the network lab as processes only")
    docker = None
    if runtime == "containers":
        try:
            docker = Docker(engine_host())
            docker.require_images([IMAGES["analysis"]])
            docker.remove_labelled(state_dir)         # left by a killed docker client
        except ContainerError as exc:
            raise AirflowStackError(str(exc)) from None
    os.makedirs(os.path.join(state_dir, "logs"), exist_ok=True)
    runner = _Runner(state_dir, port, warehouse_config, db_url, docker, address, enter,
                     extra_env, tls)
    t0 = time.monotonic()
    try:
        migrate = subprocess.run(runner.command("db-migrate", ["db", "migrate"]),
                                 env=runner.env, cwd=state_dir, capture_output=True, text=True,
                                 timeout=300)
    except subprocess.TimeoutExpired:
        if docker is not None:
            docker.remove_labelled(state_dir)
        raise AirflowStackError("airflow db migrate did not finish in 300 s") from None
    if migrate.returncode != 0:
        raise AirflowStackError("airflow db migrate failed:\n" + migrate.stdout[-2000:]
                                + migrate.stderr[-2000:])
    say(f"airflow db migrate: {time.monotonic() - t0:.1f} s")
    records = []
    for name in SERVICES:
        log_path = os.path.join(state_dir, "logs", f"{name}.log")
        command = runner.command(name, [name] + (["--port", str(port), "--host", address]
                                                 if name == "api-server" else []))
        proc = SupervisedProcess(name, command, log_path, cwd=state_dir, env=runner.env).start()
        records.append(DetachedProcess.of(proc, container=runner.container(name)))
    fields = {"url": f"{'https' if tls else 'http'}://{address}:{port}", "port": port,
              "ca_file": os.path.abspath(tls.ca_file) if tls else None,
              "warehouse_config": os.path.abspath(warehouse_config), "runtime": runtime,
              "docker_host": docker.host if docker else None}
    detached.write_state(os.path.join(state_dir, STATE_FILE), records, **fields)
    deadline = time.monotonic() + timeout

    def until(condition, what: str, interval: float) -> None:
        """Wait, up to the deadline, until ``condition()``; every process
        must keep running meanwhile."""
        def met() -> bool:
            for r in records:
                if not r.alive():
                    raise AirflowStackError(f"airflow {r.name} exited; the end of {r.log}:\n"
                                            + tail(r.log, 30))
            return condition()

        if not wait_until(met, max(0.0, deadline - time.monotonic()), interval):
            raise AirflowStackError(f"{what} in {timeout:.0f} s")

    try:
        until(lambda: _get(f"{fields['url']}/api/v2/monitor/health",
                           fields["ca_file"]) is not None,
              "the Airflow UI did not answer", 0.5)
        say(f"Airflow UI answering at {fields['url']} ({time.monotonic() - t0:.1f} s)")
        until(lambda: _dags_parsed(runner.cli(), runner.env),
              f"the DAGs were not parsed (see {state_dir}/logs/dag-processor.log)", 1.0)
    except BaseException:
        down(state_dir, say=lambda *_: None)
        raise
    say(f"DAGs {', '.join(PROJECT_DAGS)} parsed ({time.monotonic() - t0:.1f} s)")
    return dict(fields, processes=[r.to_json() for r in records])


def down(state_dir: str, timeout: float = 30.0, say=print) -> int:
    """Stop every process ``up`` started (and remove its containers); how
    many were running."""
    state_dir = os.path.abspath(state_dir)
    state = read(state_dir)
    if not state:
        say(f"no Airflow state in {state_dir}")
        return 0
    fields, records = state
    docker = Docker(fields["docker_host"]) if fields.get("docker_host") else None

    def send(record: DetachedProcess, sig: int) -> None:
        # to a container through the engine: its client cannot forward SIGKILL
        if docker is not None and record.container and docker.signal(record.container, sig):
            return
        record.signal(sig)

    running = [r for r in records if r.alive()]
    detached.stop(running, timeout, send=send)
    if docker is not None:
        try:
            left = docker.remove_labelled(state_dir)
        except ContainerError as exc:
            raise AirflowStackError(str(exc)) from None
        if left:
            say(f"removed containers whose docker client had gone: {', '.join(left)}")
        detached.wait_gone(running, 10.0)      # their clients exit with them
    say(f"stopped {len(running)} Airflow processes")
    return len(running)


def status(state_dir: str) -> dict:
    state = read(state_dir)
    if not state:
        return {"running": False}
    fields, records = state
    return {"running": any(r.alive() for r in records), "url": fields["url"],
            "runtime": fields.get("runtime", "processes"),
            "login": {"user": "admin", "password": password(state_dir)},
            "processes": {r.name: ("running" if r.alive() else "stopped") for r in records},
            "healthy": _get(f"{fields['url']}/api/v2/monitor/health",
                            fields.get("ca_file")) is not None}


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
    p.add_argument("--runtime", choices=RUNTIMES, default="processes",
                   help="processes (default): this checkout's Airflow; containers: the "
                        f"{IMAGES['analysis']} image's (its DAGs)")
    args = p.parse_args(argv)

    def run() -> None:
        if args.command == "up":
            state = up(args.dir, args.port, args.warehouse_config, args.db,
                       runtime=args.runtime)
            print(f"Airflow: {state['url']}  login: admin / {password(args.dir)}")
            print(f"logs: {os.path.abspath(args.dir)}/logs/; stop: make airflow-down")
        elif args.command == "down":
            down(args.dir)
        else:
            print(json.dumps(status(args.dir), indent=1))

    return exit_status(run, AirflowStackError)


if __name__ == "__main__":
    sys.exit(main())
