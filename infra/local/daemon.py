"""python -m infra.local.daemon up|down: one service of the local environment
(e.g. the audit service) run detached, found again by its state directory.

    python -m infra.local.daemon up --dir D --name audit --ready-url http://127.0.0.1:8090/healthz \
        -- python -m audit serve --zookeeper 127.0.0.1:19000/analysis --http-port 8090
    python -m infra.local.daemon down --dir D

``up`` starts the command in a session of its own (its output in
``D/logs/NAME.log``), records it in ``D/daemon.json`` and waits until the
ready URL answers (or the process exits: the error shows its log's end);
``down`` stops its process group (SIGTERM, SIGKILL after a timeout). The
lab's brokers, load balancers and mirrors have ``python -m infra.local
up --only``; this is for the services the lab does not run.

With ``--runtime containers`` the command is the arguments of a container
of ``--image`` (default samsa/samsa: ``audit serve ...``, its entrypoint
picks the program), run as the lab runs its containers
(infra/local/container_runtime.py: host networking, the state directory
mounted at the same path and the working directory, as the invoking user),
the image's HEALTHCHECK pointed at the ready URL (SAMSA_HEALTH_PORT and
SAMSA_HEALTH_PATH: the image's default is a broker's metrics port);
``down`` also removes the container, which a SIGKILLed docker client would
leave.

    python -m infra.local.daemon up --runtime containers --dir D --name audit \
        --ready-url http://127.0.0.1:8090/healthz -- audit serve --zookeeper ... --http-port 8090
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
import urllib.parse
from typing import Callable

from broker.service_kit.detached import (DetachedProcess, StateFileError, read_state, stop,
                                         wait_gone, write_state)
from broker.service_kit.process import SupervisedProcess, tail, wait_until
from infra.local.command import exit_status
from infra.local.container_runtime import (IMAGES, RUNTIMES, ContainerError, Docker,
                                           container_name, engine_host)
from infra.local.metrics import HttpAccess, open_url

STATE_FILE = "daemon.json"


class DaemonError(RuntimeError):
    pass


def answers(url: str, access: HttpAccess | None = None) -> bool:
    """Whether a GET of ``url`` answers 200 now (asked as ``access`` where
    given: a secured lab's HTTPS)."""
    try:
        with open_url(url, access, timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def health_check_env(ready_url: str) -> dict[str, str]:
    """The environment that points the samsa image's HEALTHCHECK (a GET of
    127.0.0.1:$SAMSA_HEALTH_PORT/$SAMSA_HEALTH_PATH) at ``ready_url``; none
    without one."""
    if not ready_url:
        return {}
    url = urllib.parse.urlsplit(ready_url)
    try:
        port = url.port
    except ValueError:                   # "http://host:http/" and the like
        port = None
    if port is None:
        raise DaemonError(f"the ready URL {ready_url} names no port")
    path = url.path.lstrip("/") + (f"?{url.query}" if url.query else "")
    env = {"SAMSA_HEALTH_PORT": str(port), "SAMSA_HEALTH_PATH": path}
    if url.scheme == "https":
        env["SAMSA_HEALTH_SCHEME"] = "https"
    return env


def read(state_dir: str) -> tuple[dict, list[DetachedProcess]] | None:
    """The state file of ``state_dir``: its fields (ready_url, docker_host)
    and the records of its one process; None when there is none."""
    try:
        state = read_state(os.path.join(os.path.abspath(state_dir), STATE_FILE))
    except StateFileError as exc:
        raise DaemonError(str(exc)) from None
    if state is None:
        return None
    fields, records = state
    if not records and "pid" in fields:     # a state file of before the "processes" list
        records = [DetachedProcess.from_json(fields)]
    if len(records) != 1:
        raise DaemonError(f"not one process in {os.path.join(state_dir, STATE_FILE)}")
    return fields, records


def up(state_dir: str, name: str, command: list[str], ready_url: str = "",
       timeout: float = 60.0, runtime: str = "processes",
       image: str | None = None, env: dict[str, str] | None = None,
       access: HttpAccess | None = None) -> DetachedProcess:
    """Start ``command`` (in ``runtime``; see the module's docstring) and wait
    until ``ready_url`` answers (asked as ``access``
    for a secured service); the record kept
    in the state file. ``env``: variables added to the command's environment."""
    state_dir = os.path.abspath(state_dir)
    old = read(state_dir)
    if old is not None and old[1][0].alive():
        (record,) = old[1]
        raise DaemonError(f"{record.name} already runs from {state_dir} (pid {record.pid})")
    log_path = os.path.join(state_dir, "logs", f"{name}.log")
    extra_env = dict(env or {})
    env, container, docker_host = ({**os.environ, **extra_env} if extra_env else None), None, None
    if runtime == "containers":
        try:
            docker = Docker(engine_host())
            docker.require_images([image or IMAGES["samsa"]])
            docker.remove_labelled(state_dir)         # left by a killed docker client
        except ContainerError as exc:
            raise DaemonError(str(exc)) from None
        container, docker_host, env = container_name("samsa", state_dir, name), docker.host, \
            docker.env
        command = docker.run_command(container, image or IMAGES["samsa"], command,
                                     state_dir=state_dir,
                                     env={**health_check_env(ready_url), **extra_env})
    proc = SupervisedProcess(name, command, log_path, cwd=state_dir, env=env).start()
    record = DetachedProcess.of(proc, container=container)
    write_state(os.path.join(state_dir, STATE_FILE), [record], ready_url=ready_url,
                docker_host=docker_host)
    if ready_url:
        answered = wait_until(lambda: proc.poll() is not None or answers(ready_url, access),
                              timeout,
                              interval=0.2)
        if proc.poll() is not None:
            raise DaemonError(f"{name} {proc.exit_status()}; the end of {log_path}:\n"
                              + tail(log_path, 30))
        if not answered:
            down(state_dir)
            raise DaemonError(f"{name}: {ready_url} did not answer in {timeout:.0f} s; the end "
                              f"of {log_path}:\n" + tail(log_path, 30))
    return record


def down(state_dir: str, timeout: float = 15.0) -> bool:
    """Stop the service of ``state_dir`` (SIGTERM, SIGKILL after
    ``timeout``); whether it was running."""
    return _end(state_dir, lambda record: stop([record], timeout))


def kill(state_dir: str, timeout: float = 15.0) -> bool:
    """Crash the service of ``state_dir``: SIGKILL to its process group,
    waited for (up to ``timeout``); whether it was running. Like ``down``,
    the state file is removed: ``up`` starts it again."""
    def crash(record: DetachedProcess) -> None:
        record.signal(signal.SIGKILL)
        wait_gone([record], timeout)

    return _end(state_dir, crash)


def _end(state_dir: str, end: Callable[[DetachedProcess], object]) -> bool:
    """``end(record)`` of the running service of ``state_dir``, then its
    containers removed and its state file."""
    state_dir = os.path.abspath(state_dir)
    state = read(state_dir)
    if state is None:
        return False
    fields, (record,) = state
    running = record.alive()
    if running:
        end(record)
    if fields.get("docker_host"):
        # SIGTERM reached the container through its client; a SIGKILL did not
        try:
            Docker(fields["docker_host"]).remove_labelled(state_dir)
        except ContainerError as exc:
            raise DaemonError(str(exc)) from None
    os.remove(os.path.join(state_dir, STATE_FILE))
    return running


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m infra.local.daemon", description=__doc__,
                                usage="%(prog)s {up,down} --dir DIR [options] [-- COMMAND ...]",
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("action", choices=["up", "down"])
    p.add_argument("--dir", required=True, help="the service's state directory")
    p.add_argument("--name", default="service", help="its name (logs/NAME.log)")
    p.add_argument("--ready-url", default="", help="ready once this URL answers 200")
    p.add_argument("--timeout", type=float, default=60.0)
    p.add_argument("--runtime", choices=RUNTIMES, default="processes",
                   help="processes (default): run COMMAND; containers: run a container of "
                        "--image with COMMAND as its arguments")
    p.add_argument("--image", default=IMAGES["samsa"],
                   help=f"the image of --runtime containers (default {IMAGES['samsa']})")
    argv = list(sys.argv[1:] if argv is None else argv)
    split = argv.index("--") if "--" in argv else len(argv)
    args = p.parse_args(argv[:split])
    command = argv[split + 1:]

    def run() -> None:
        if args.action == "up":
            if not command:
                p.error("up needs a command after --")
            record = up(args.dir, args.name, command, args.ready_url, args.timeout,
                        runtime=args.runtime, image=args.image)
            print(f"{record.name} is up (pid {record.pid}), log {record.log}")
        else:
            was = down(args.dir, args.timeout)
            print("stopped" if was else f"nothing running from {args.dir}")

    return exit_status(run, DaemonError)


if __name__ == "__main__":
    sys.exit(main())
