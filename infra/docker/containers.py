"""Containers started with testcontainers (a test dependency: the tests and
the benchmark use this module, the services never do): every one with host
networking (no bridge: traffic to private-range addresses is forbidden on
the machines this project is built on), waited on until it really serves,
removed with its volumes at the end.

``Containers.run(name, image, ...)`` starts one and waits on its
``ready(service)``; infra/docker/pipeline.py says what the pipeline's
services are and how each shows it serves, and is given ``Containers.run``
to start them. Needs DOCKER_HOST set to an engine (infra/docker/engine.py)
and TESTCONTAINERS_RYUK_DISABLED=true (its reaper image cannot be pulled).
"""
from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from typing import Callable

from testcontainers.core.container import DockerContainer

from broker.service_kit.process import wait_until

POLL_S = 0.05


class NotReady(AssertionError):
    """A container exited, or did not serve within its time."""


@dataclass
class Service:
    """One started container."""
    name: str
    container: DockerContainer
    ready: Callable[["Service"], bool] | None = None

    @property
    def docker(self):
        """The docker SDK's Container."""
        return self.container.get_wrapped_container()

    def status(self) -> str:
        c = self.docker
        c.reload()
        return c.status

    def logs(self, tail: int = 40) -> str:
        return self.docker.logs(tail=tail).decode(errors="replace")

    def exec(self, command: list[str]) -> tuple[int, str]:
        code, out = self.docker.exec_run(command)
        return code, out.decode(errors="replace")

    def wait_ready(self, timeout: float = 60.0) -> "Service":
        """Until ``ready(self)``; NotReady with its last log lines if it exited
        or did not serve in time."""
        def ready() -> bool:
            if self.ready is None or self.ready(self):
                return True
            state = self.status()
            if state in ("exited", "dead"):
                raise NotReady(f"container {self.name} {state} before it was ready:\n"
                               f"{self.logs()}")
            return False

        if not wait_until(ready, timeout, POLL_S):
            raise NotReady(f"container {self.name} was not ready after {timeout:.0f} s:\n"
                           f"{self.logs()}")
        return self

    def kill(self) -> None:
        """``docker kill``: SIGKILL to the container's processes."""
        self.docker.kill()
        self.docker.wait()

    def stop(self, timeout: int = 10) -> None:
        """``docker stop``: SIGTERM, SIGKILL after ``timeout`` s."""
        self.docker.stop(timeout=timeout)

    def start(self, timeout: float = 60.0) -> "Service":
        """Start the stopped container again (same volumes, same settings)
        and wait until it serves."""
        self.docker.start()
        return self.wait_ready(timeout)


class Containers:
    """The containers of one test, removed (with their volumes) by
    ``remove_all``. Names get a random suffix: tests never collide."""

    def __init__(self) -> None:
        self.services: list[Service] = []
        self._suffix = uuid.uuid4().hex[:6]

    def run(self, name: str, image: str, command: list[str] | None = None,
            env: dict[str, str] | None = None, files: dict[str, str] | None = None,
            ready: Callable[[Service], bool] | None = None, timeout: float = 60.0,
            wait: bool = True, tmpfs: tuple[str, ...] = (), **docker_kwargs) -> Service:
        """Start ``image`` as ``name`` with host networking; ``files`` maps a
        path in the container to a host file or directory mounted there
        (read-only unless the path ends in ``:rw``); ``tmpfs``: paths in the
        container a tmpfs is mounted on; waits on ``ready`` unless
        ``wait`` is false. Other keywords go to the docker SDK's run
        (``user``, ``working_dir``...)."""
        container = DockerContainer(image).with_kwargs(network_mode="host", **docker_kwargs)
        container.with_name(f"samsa-test-{name}-{self._suffix}")
        for key, value in (env or {}).items():
            container.with_env(key, str(value))
        for inside, host in (files or {}).items():
            mode = "ro"
            if inside.endswith(":rw"):
                inside, mode = inside[:-3], "rw"
            container.with_volume_mapping(os.path.abspath(host), inside, mode)
        for path in tmpfs:
            container.with_tmpfs_mount(path)
        if command:
            container.with_command(command)
        service = Service(name, container, ready)
        container.start()
        self.services.append(service)
        return service.wait_ready(timeout) if wait else service

    def remove_all(self) -> None:
        for service in reversed(self.services):
            try:
                service.container.stop(force=True, delete_volume=True)
            except Exception:              # noqa: BLE001 - removed already, engine gone
                pass
        self.services.clear()

    def print_logs(self, tail: int = 60) -> None:
        for service in self.services:
            try:
                print(f"----- container {service.name}: last {tail} log lines -----")
                print(service.logs(tail))
            except Exception as exc:       # noqa: BLE001
                print(f"(no logs: {exc})")
