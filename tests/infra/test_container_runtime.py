"""infra/local/container_runtime.py without an engine: a lab, daemon or
Airflow started as containers must still come down when its recorded Docker
engine is gone (stopped, the machine rebooted) — its containers went with
it. Before, ``remove_labelled`` raised ContainerError ("Cannot connect") and
``down`` (so ``terraform destroy``) could never finish."""
from __future__ import annotations

import shutil

import pytest

from infra.local import daemon
from infra.local.container_runtime import Docker

DEAD = "unix:///nonexistent/docker.sock"

pytestmark = pytest.mark.skipif(shutil.which("docker") is None,
                                reason="the docker client is not installed (make images "
                                       "installs it)")


def test_nothing_to_remove_on_an_engine_that_is_gone(tmp_path):
    assert Docker(DEAD).remove_labelled(str(tmp_path)) == []


def test_a_daemon_comes_down_when_its_engine_is_gone(tmp_path):
    state = tmp_path / "audit"
    state.mkdir()
    (state / daemon.STATE_FILE).write_text(
        f'{{"ready_url": "", "docker_host": "{DEAD}", "processes": [{{"name": "audit", '
        f'"pid": 999999999, "start_ticks": -1, "command": [], '
        f'"log": "{state}/logs/audit.log", "container": "audit-x"}}]}}')
    assert daemon.down(str(state)) is False             # nothing ran any more
    assert not (state / daemon.STATE_FILE).exists()


def test_the_state_of_containers_on_an_engine_that_is_gone(tmp_path):
    # the lab's status then says so, rather than failing or calling them missing
    assert Docker(DEAD).states(["a", "b"]) == {"a": "engine unreachable",
                                               "b": "engine unreachable"}
    assert Docker(DEAD).states([]) == {}
