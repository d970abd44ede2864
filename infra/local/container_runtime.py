"""The lab's processes as containers of the project's images (infra/docker/).

With ``runtime="containers"`` the lab (``infra.local.lab``), the local
daemon (``infra.local.daemon``) and the local Airflow
(``infra.local.airflow_stack``) start each component as an attached ``docker
run`` — the docker client itself is the supervised process: it streams the
container's output into the component's log, proxies signals and exits with
the container's status, so the lab's pid-based liveness, readiness and stop
work unchanged. This module only builds those commands and asks the engine
what the client cannot answer: it never starts a component itself.

Why not infra/docker/containers.py (testcontainers, the tests' and the
benchmark's way): those containers belong to the Python that started them;
the lab's must outlive ``python -m infra.local up`` and be found again by
``status`` and ``down`` from the state directory, as its processes are.

Every container

* uses host networking only (``--network host``): no bridge network exists
  on the machines this is built on (traffic to private-range addresses is
  forbidden), and the services bind the topology's ports as processes do;
* runs as the invoking user (``--user UID:GID``), with the state directory
  bind-mounted at the same path (``-v DIR:DIR``) and as its working
  directory, so every path in the rendered settings is valid inside it and
  what it writes there belongs to whoever runs the lab;
* is removed when it exits (``--rm``), named ``<lab>-<digest of the state
  directory>-<component>`` (two labs never collide) and labelled with its
  state directory (``org.samsa.lab.state-dir``), which is how leftovers are
  found.

Why ``docker kill`` and ``remove``: a signal to the docker client is
forwarded to the container, but SIGKILL cannot be forwarded — a killed client
leaves its container running. So signals go to the container through the
engine (``signal``), and whoever stops a component removes what is left
under its label afterwards (``remove_labelled``).

The engine is the user's (DOCKER_HOST or the default socket) or the
project's own dockerd (``infra.docker.engine.up``).
"""
from __future__ import annotations

import hashlib
import logging
import os
import shutil
import signal
import subprocess
from dataclasses import dataclass

from broker.service_kit.process import wait_until
from infra.docker import engine
from infra.docker.images import has_image, latest

log = logging.getLogger(__name__)

#: How a component may run: as processes of this checkout, or as containers.
RUNTIMES = ("processes", "containers")
#: The image each kind of component runs (``make images`` builds them).
IMAGES = {name: latest(name) for name in ("zookeeper", "haproxy", "samsa", "analysis")}
#: The label that ties a container to the state directory that started it.
STATE_LABEL = "org.samsa.lab.state-dir"
#: Where the haproxy image reads its configuration.
HAPROXY_CONFIG = "/etc/haproxy/haproxy.cfg"
CLI_TIMEOUT_S = 60.0


class ContainerError(RuntimeError):
    """The engine is missing, an image is missing, or the engine refused."""


@dataclass(frozen=True)
class Mount:
    """A host path bind-mounted into a container."""
    host: str
    inside: str
    read_only: bool = False

    def option(self) -> str:
        return f"{self.host}:{self.inside}" + (":ro" if self.read_only else "")


def container_name(lab: str, state_dir: str, component: str) -> str:
    """``<lab>-<8 hex digits of the state directory>-<component>``: Docker's
    name rules ([a-zA-Z0-9][a-zA-Z0-9_.-]*) hold for the topology's names."""
    digest = hashlib.sha1(os.path.abspath(state_dir).encode()).hexdigest()[:8]
    prefix = lab.lstrip("._-") or "samsa"
    return f"{prefix}-{digest}-{component}"


def engine_host() -> str:
    """The DOCKER_HOST of a running engine: the user's, or the project's own
    dockerd, started if needed (ContainerError when neither can be had)."""
    try:
        return engine.up()
    except SystemExit as exc:             # engine.up says why it cannot start one
        raise ContainerError(f"no Docker engine: {exc}") from None


class Docker:
    """The docker CLI against one engine (``host``: unix://... or tcp://...)."""

    def __init__(self, host: str) -> None:
        self.host = host
        self.cli = shutil.which("docker")
        if self.cli is None:
            raise ContainerError("the docker client is missing: install Debian's docker.io "
                                 "(`apt-get install docker.io`)")

    @property
    def env(self) -> dict[str, str]:
        """The environment of a docker client talking to this engine."""
        return {**os.environ, "DOCKER_HOST": self.host}

    def _run(self, *args: str, check: bool = True,
             timeout: float = CLI_TIMEOUT_S) -> subprocess.CompletedProcess:
        try:
            done = subprocess.run([self.cli, *args], env=self.env, capture_output=True,
                                  text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise ContainerError(f"`docker {' '.join(args)}` did not answer in "
                                 f"{timeout:.0f} s (engine {self.host})") from None
        if check and done.returncode != 0:
            raise ContainerError(f"`docker {' '.join(args)}` failed (engine {self.host}): "
                                 f"{done.stderr.strip() or done.stdout.strip()}")
        return done

    # ---------------------------------------------------------------- commands

    def run_command(self, name: str, image: str, args: list[str], *, state_dir: str,
                    env: dict[str, str] | None = None, mounts: list[Mount] = (),
                    workdir: str | None = None, entrypoint: str | None = None) -> list[str]:
        """The attached ``docker run`` that runs ``image`` (its entrypoint, then
        ``args``) as container ``name``; see the module's docstring for the
        options every container gets."""
        state_dir = os.path.abspath(state_dir)
        command = [self.cli, "run", "--rm", "--name", name, "--network", "host",
                   "--user", f"{os.getuid()}:{os.getgid()}", "--label",
                   f"{STATE_LABEL}={state_dir}", "-v", f"{state_dir}:{state_dir}",
                   "-w", workdir or state_dir]
        for mount in mounts:
            command += ["-v", mount.option()]
        for key, value in (env or {}).items():
            command += ["-e", f"{key}={value}"]
        if entrypoint:
            command += ["--entrypoint", entrypoint]
        return command + [image, *args]

    # ---------------------------------------------------------------- queries

    def missing_images(self, images) -> list[str]:
        """Which of ``images`` the engine does not have."""
        return [image for image in images if not has_image(image, self.env)]

    def require_images(self, images) -> None:
        missing = self.missing_images(sorted(set(images)))
        if missing:
            raise ContainerError(f"images missing in the engine at {self.host}: "
                                 f"{', '.join(missing)}; build them with `make images`")

    def labelled(self, state_dir: str) -> list[str]:
        """Names of the containers (running or not) of ``state_dir``."""
        out = self._run("ps", "-a", "--filter", f"label={STATE_LABEL}={os.path.abspath(state_dir)}",
                        "--format", "{{.Names}}").stdout
        return sorted(line.strip() for line in out.splitlines() if line.strip())

    def states(self, names: list[str]) -> dict[str, str]:
        """Each of ``names``' state as the engine tells it: "running",
        "running (healthy)", "exited", ... and "missing" for one it does not
        have (or all of them when the engine does not answer: "engine
        unreachable")."""
        if not names:
            return {}
        try:
            done = self._run("container", "inspect", "--format",
                             "{{.Name}} {{.State.Status}}{{if .State.Health}} "
                             "({{.State.Health.Status}}){{end}}", *names, check=False)
        except ContainerError:
            return {name: "engine unreachable" for name in names}
        found = dict(line.lstrip("/").split(" ", 1) for line in done.stdout.splitlines()
                     if " " in line)
        if not found and done.returncode != 0 and "No such" not in done.stderr:
            return {name: "engine unreachable" for name in names}
        return {name: found.get(name, "missing") for name in names}

    def exists(self, name: str) -> bool:
        return self._run("container", "inspect", "--format", "{{.Id}}", name,
                         check=False).returncode == 0

    # ---------------------------------------------------------------- actions

    def signal(self, name: str, sig: int) -> bool:
        """``sig`` to container ``name``'s main process; False when it does not
        run (not yet created, or gone)."""
        return self._run("kill", "--signal", signal.Signals(sig).name, name,
                         check=False).returncode == 0

    def remove(self, names: list[str], timeout: float = 30.0) -> list[str]:
        """``docker rm -f`` each of ``names`` and wait until they are gone (one
        whose --rm removal is under way refuses the rm, but goes all the
        same); the names still there after ``timeout``."""
        if not names:
            return []
        self._run("rm", "-f", *names, check=False)
        pending = list(names)

        def gone() -> bool:
            pending[:] = [n for n in pending if self.exists(n)]
            return not pending

        wait_until(gone, timeout, interval=0.2)
        return pending

    def remove_labelled(self, state_dir: str, timeout: float = 30.0) -> list[str]:
        """Remove every container of ``state_dir``; the names of those removed.
        ContainerError when some are still there after ``timeout``. An engine
        that no longer answers (stopped, the machine rebooted) took its
        containers with it: nothing to remove, so a ``down`` can still finish."""
        if not engine.answers(self.host):
            log.warning("the Docker engine at %s does not answer: its containers of %s "
                        "are gone with it", self.host, state_dir)
            return []
        names = self.labelled(state_dir)
        left = self.remove(names, timeout)
        if left:
            raise ContainerError(f"containers still there after docker rm -f: {', '.join(left)}")
        return names

    def check_haproxy_config(self, path: str, state_dir: str | None = None) -> None:
        """``haproxy -c`` of the file ``path`` in the haproxy image; the files
        it names (a secured stats page's certificate) in ``state_dir``,
        mounted read-only where they are."""
        path = os.path.abspath(path)
        visible = ["-v", f"{os.path.abspath(state_dir)}:{os.path.abspath(state_dir)}:ro"] \
            if state_dir else []
        done = self._run("run", "--rm", "--network", "host", "--user",
                         f"{os.getuid()}:{os.getgid()}", *visible,
                         "-v", f"{path}:{HAPROXY_CONFIG}:ro",
                         "--entrypoint", "haproxy", IMAGES["haproxy"], "-c", "-f",
                         HAPROXY_CONFIG, check=False)
        if done.returncode != 0:
            raise ContainerError(f"haproxy (in {IMAGES['haproxy']}) refuses {path}:\n"
                                 f"{(done.stdout + done.stderr).strip()}")


__all__ = ["ContainerError", "Docker", "IMAGES", "Mount", "RUNTIMES", "STATE_LABEL",
           "container_name", "engine_host"]
