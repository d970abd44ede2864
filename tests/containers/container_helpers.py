"""Helpers of the container tests: the testcontainers wrapper the benchmark
shares (infra/docker/containers.py), the free-port allocator, and what the
tests alone need."""
from __future__ import annotations

from infra.docker.containers import Containers, NotReady, Service  # noqa: F401
from infra.docker.pipeline import free_ports  # noqa: F401 - the tests take ports here
