"""Fixtures of the container tests (tests/containers, marker ``containers``):
the services as the images of infra/docker/, driven by testcontainers.

* ``docker_host``: a Docker engine for the session — the user's
  (DOCKER_HOST or the default socket) or the project's own dockerd, started
  here and stopped at the end of the session if this started it — with every
  image of ``make images`` present. Sets DOCKER_HOST (testcontainers reads
  it) and TESTCONTAINERS_RYUK_DISABLED (its reaper image cannot be pulled:
  the fixtures remove their containers themselves).
* ``containers``: containers of one test, removed at teardown, with the
  tail of each one's log printed when the test failed.

No engine, no images, or images built from another revision than the
checkout's (a failed build leaves the last good ones): the tests fail and
say why. A user without Docker
opts out explicitly with ``SAMSA_CONTAINERS=0``: the tests are then
reported as skipped with that reason, never skipped silently.
"""
from __future__ import annotations

import os

import pytest

from container_helpers import Containers

OPT_OUT = "SAMSA_CONTAINERS"


def pytest_collection_modifyitems(config, items):
    here = os.path.dirname(os.path.abspath(__file__))
    opted_out = os.environ.get(OPT_OUT) == "0"
    for item in items:
        if str(item.fspath).startswith(here + os.sep):
            item.add_marker(pytest.mark.containers)
            if opted_out:
                item.add_marker(pytest.mark.skip(
                    reason=f"{OPT_OUT}=0: the container tests were opted out"))


@pytest.fixture(scope="session")
def docker_host():
    from infra.docker import engine
    had_own = engine.own_pid() is not None
    try:
        host = engine.up()
    except SystemExit as exc:            # engine.up says why it cannot start one
        pytest.fail(f"no Docker engine for the container tests: {exc} "
                    f"(set {OPT_OUT}=0 to opt out of them)", pytrace=False)
    started_here = not had_own and engine.own_pid() is not None
    saved = {k: os.environ.get(k) for k in ("DOCKER_HOST", "TESTCONTAINERS_RYUK_DISABLED")}
    os.environ["DOCKER_HOST"] = host
    os.environ["TESTCONTAINERS_RYUK_DISABLED"] = "true"
    try:
        import docker
        client = docker.from_env()
        from infra.docker.images import IMAGES, latest, version
        revision = version()[1]
        missing, stale = [], []
        for image in map(latest, IMAGES):
            try:
                labels = client.images.get(image).labels or {}
            except docker.errors.ImageNotFound:
                missing.append(image)
                continue
            built_from = labels.get("org.opencontainers.image.revision")
            if built_from != revision:
                stale.append(f"{image} (built from {built_from})")
        client.close()
        if missing:
            pytest.fail(f"images missing in the engine at {host}: {', '.join(missing)}; "
                        f"build them with `make images`", pytrace=False)
        if stale:
            # a build that failed leaves the last good images: never test those
            pytest.fail(f"images not built from this checkout ({revision}): "
                        f"{', '.join(stale)}; build them with `make images`", pytrace=False)
        yield host
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        if started_here:
            engine.down()


def _failed(node) -> bool:
    return any(getattr(getattr(node, f"rep_{when}", None), "failed", False)
               for when in ("setup", "call"))


@pytest.fixture
def containers(docker_host, request):
    group = Containers()
    yield group
    if _failed(request.node):
        group.print_logs()
    group.remove_all()
