"""The container tests never skip silently (issue 17): without an engine
they fail and say why; ``SAMSA_CONTAINERS=0`` opts out, and pytest reports
them skipped with that reason. Each case runs pytest on tests/containers in
a child process."""
from __future__ import annotations

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_container_tests(**env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
         "tests/containers/test_pipeline.py"],
        cwd=ROOT, env={**os.environ, **env}, capture_output=True, text=True, timeout=240)


def test_no_engine_fails_with_the_reason():
    done = run_container_tests(DOCKER_HOST="unix:///nonexistent/docker.sock",
                               SAMSA_CONTAINERS="1")
    assert done.returncode != 0
    assert "no Docker engine for the container tests" in done.stdout
    assert "DOCKER_HOST=unix:///nonexistent/docker.sock does not answer" in done.stdout
    assert "SAMSA_CONTAINERS=0" in done.stdout             # how to opt out
    assert " passed" not in done.stdout.splitlines()[-1]


def test_samsa_containers_0_reports_them_skipped_as_opted_out():
    done = run_container_tests(SAMSA_CONTAINERS="0",
                               DOCKER_HOST="unix:///nonexistent/docker.sock")
    assert done.returncode == 0, done.stdout[-2000:]
    assert "SAMSA_CONTAINERS=0: the container tests were opted out" in done.stdout
    assert "4 skipped" in done.stdout.splitlines()[-1]
