"""What every built image carries (issue 17): the OCI labels given at build
time (title, source, version, revision: this checkout's commit), a
HEALTHCHECK, and a user other than root — but for the tests' stand-in of a
cloud instance, whose first process is systemd, as root."""
from __future__ import annotations

import docker
import pytest

from infra.docker.images import IMAGES, SOURCE_URL, TEST_IMAGES, latest, version


@pytest.mark.parametrize("name", IMAGES)
def test_labels_health_check_and_user(docker_host, name):
    client = docker.from_env()
    try:
        config = client.images.get(latest(name)).attrs["Config"]
    finally:
        client.close()
    ver, rev = version()
    labels = config["Labels"]
    assert labels["org.opencontainers.image.title"] == ("samsa" if name == "samsa"
                                                         else f"samsa-{name}")
    assert labels["org.opencontainers.image.source"] == SOURCE_URL
    assert labels["org.opencontainers.image.version"] == ver
    assert labels["org.opencontainers.image.revision"] == rev
    assert config["Healthcheck"]["Test"]
    if name in TEST_IMAGES:
        assert config["Entrypoint"] == ["/lib/systemd/systemd"]
    else:
        assert config["User"] not in ("", "root", "0")
