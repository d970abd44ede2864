"""Pushing the images the cloud runs (``make push-images``, infra/docker/push.py)
to a real registry: Debian's docker-registry (the distribution registry, the
one ECR's protocol is), run by the test on a free port of the loopback."""
from __future__ import annotations

import json
import re
import subprocess
import sys
import urllib.request

import pytest

from broker_helpers import wait_until
from container_helpers import free_ports
from infra.docker.images import version

REGISTRY_BIN = "/usr/bin/docker-registry"


@pytest.fixture
def registry(tmp_path):
    """A registry at 127.0.0.1:PORT, storing in tmp_path: its address."""
    (port,) = free_ports(1)
    config = tmp_path / "registry.yml"
    config.write_text(f"version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n"
                      f"    rootdirectory: {tmp_path / 'storage'}\n"
                      f"http:\n  addr: 127.0.0.1:{port}\n")
    process = subprocess.Popen([REGISTRY_BIN, "serve", str(config)], stdout=subprocess.DEVNULL,
                               stderr=open(tmp_path / "registry.log", "w"))
    address = f"127.0.0.1:{port}"

    def answers() -> bool:
        try:
            with urllib.request.urlopen(f"http://{address}/v2/", timeout=2) as answer:
                return answer.status == 200
        except OSError:
            return process.poll() is not None and pytest.fail(
                "the registry exited: " + (tmp_path / "registry.log").read_text()[-2000:])

    wait_until(answers, 30, interval=0.1, what="the registry to answer")
    yield address
    process.terminate()
    process.wait(timeout=30)


def push(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "infra.docker.push", *args],
                          capture_output=True, text=True, timeout=600)


def test_an_image_is_pushed_with_a_tag_of_its_build_and_its_digest_is_the_registrys(registry):
    done = push("--registry", registry, "--only", "zookeeper")
    assert done.returncode == 0, done.stderr
    ver, rev = version()
    tag = f"{ver}-{rev[:12]}"                    # the build's own tag: version and revision
    (line,) = done.stdout.splitlines()
    reference, digest = line.split()
    assert reference == f"{registry}/samsa/zookeeper:{tag}"
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", digest)
    with urllib.request.urlopen(f"http://{registry}/v2/samsa/zookeeper/tags/list",
                                timeout=10) as answer:
        assert tag in json.load(answer)["tags"]
    request = urllib.request.Request(
        f"http://{registry}/v2/samsa/zookeeper/manifests/{tag}", method="HEAD", headers={
            "Accept": "application/vnd.docker.distribution.manifest.v2+json, "
                      "application/vnd.oci.image.manifest.v1+json, "
                      "application/vnd.oci.image.index.v1+json"})
    with urllib.request.urlopen(request, timeout=10) as answer:
        assert answer.headers["Docker-Content-Digest"] == digest
    # a tag of one's own
    named = push("--registry", registry, "--only", "zookeeper", "--tag", "rc-1")
    assert named.returncode == 0, named.stderr
    assert named.stdout.startswith(f"{registry}/samsa/zookeeper:rc-1 sha256:")


@pytest.mark.parametrize("args, words", [
    (["--registry", "https://example.com"], "not a registry"),
    (["--registry", "example.com", "--only", "haproxy"], "unknown images: haproxy"),
    (["--registry", "example.com", "--tag", "no tag"], "not a tag"),
])
def test_bad_arguments_are_refused_in_one_line(args, words):
    done = push(*args)
    assert done.returncode == 2, done
    assert len(done.stderr.strip().splitlines()) == 1 and words in done.stderr, done.stderr


def test_the_dry_run_names_every_cloud_image():
    done = push("--registry", "123456789012.dkr.ecr.us-east-2.amazonaws.com", "--dry-run")
    assert done.returncode == 0, done.stderr
    ver, rev = version()
    assert done.stdout.split() == [
        f"123456789012.dkr.ecr.us-east-2.amazonaws.com/samsa/{name}:{ver}-{rev[:12]}"
        for name in ("zookeeper", "samsa", "analysis")]
