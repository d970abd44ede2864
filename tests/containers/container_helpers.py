"""Helpers of the container tests: the testcontainers wrapper the benchmark
shares (infra/docker/containers.py), the free-port allocator, and what the
tests alone need."""
from __future__ import annotations

import contextlib
import threading

from infra.docker.containers import Containers, NotReady, Service  # noqa: F401
from infra.docker.pipeline import ContainerPipeline
from infra.docker.pipeline import free_ports  # noqa: F401 - the tests take ports here
from infra.local.lab import free_topology


@contextlib.contextmanager
def running_pipeline(topology, directory: str, request, **up):
    """A ContainerPipeline of ``topology`` (moved to free ports) brought up
    (``up``: its ``up`` arguments); its containers removed, with their
    volumes, at the end, their logs printed first if it failed or a test of
    the session did."""
    group = Containers()
    pipe = ContainerPipeline(group.run, free_topology(topology), directory)
    try:
        pipe.up(**up)
        yield pipe
    except BaseException:
        group.print_logs()
        raise
    finally:
        if request.session.testsfailed:
            group.print_logs()
        group.remove_all()


def healthy(service: Service) -> bool:
    """Does the image's own HEALTHCHECK report the container healthy?"""
    return health(service.docker) == "healthy"


def health(container) -> str | None:
    """What the image's own HEALTHCHECK says of a docker SDK ``container``
    now (starting, healthy, unhealthy; None without a check)."""
    container.reload()
    return container.attrs["State"].get("Health", {}).get("Status")


def run_to_end(group: Containers, name: str, image: str, command: list[str],
               timeout: float = 300.0, **kwargs) -> tuple[int, str]:
    """Run a command that ends (a load, a CLI call) in a container of
    ``group`` (``Containers.run``'s arguments): its exit status and its whole
    output, stdout and stderr interleaved. NotReady if it ran longer than
    ``timeout`` (the container stays in the group: removed at teardown)."""
    service = group.run(name, image, command=command, wait=False, **kwargs)
    try:
        status = service.docker.wait(timeout=timeout)["StatusCode"]
    except Exception as exc:               # noqa: BLE001 - the SDK's read timeout
        raise NotReady(f"container {name} did not end within {timeout:.0f} s ({exc}):\n"
                       f"{service.logs(60)}") from None
    return status, service.docker.logs().decode(errors="replace")


class Sender(threading.Thread):
    """Sends rounds of ``size`` numbered values ("<topic>-0000042") of
    ``topic`` through the producer ``open_producer()`` makes, until stopped;
    the values of every acknowledged round are in ``acknowledged``, in send
    order. ``keys``: each value keyed by its number modulo ``keys`` (0: no
    key). A round is acknowledged when every one of its sends is."""

    def __init__(self, open_producer, topic: str, size: int = 100, keys: int = 0) -> None:
        super().__init__(daemon=True)
        self.open_producer, self.topic, self.size, self.keys = open_producer, topic, size, keys
        self.acknowledged: list[bytes] = []
        self.error: BaseException | None = None
        self.halt = threading.Event()

    def run(self) -> None:
        i = 0
        try:
            with self.open_producer() as producer:
                while not self.halt.is_set():
                    values = [b"%s-%07d" % (self.topic.encode(), i + k) for k in range(self.size)]
                    batches = [producer.send(self.topic, v, key=(
                        b"k%d" % ((i + k) % self.keys) if self.keys else None))
                        for k, v in enumerate(values)]
                    for batch in batches:
                        batch.result(timeout=90)
                    self.acknowledged += values
                    i += self.size
        except BaseException as exc:      # noqa: BLE001 - reported by the test
            self.error = exc
