"""Helpers of the container tests: the testcontainers wrapper the benchmark
shares (infra/docker/containers.py), the free-port allocator, and what the
tests alone need."""
from __future__ import annotations

from infra.docker.containers import Containers, NotReady, Service  # noqa: F401
from infra.docker.pipeline import free_ports  # noqa: F401 - the tests take ports here


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
