"""infra/local/daemon.py, the runner of the local environment's services
that the lab does not run (the audit service): ``up`` waits for the ready
URL and ``down`` stops the process; in containers, the samsa image's own
HEALTHCHECK probes that ready URL (it probed a broker's metrics port, 9093,
and the audit's container never became healthy; the containers themselves:
tests/containers/test_lab_containers.py)."""
from __future__ import annotations

import socket
import sys
import urllib.request

import pytest

from broker_helpers import unused_port
from infra.local import daemon


def test_the_image_health_check_probes_the_ready_url():
    assert daemon.health_check_env("http://127.0.0.1:8090/healthz") == {
        "SAMSA_HEALTH_PORT": "8090", "SAMSA_HEALTH_PATH": "healthz"}
    assert daemon.health_check_env("http://127.0.0.1:8091/api/ready?deep=1") == {
        "SAMSA_HEALTH_PORT": "8091", "SAMSA_HEALTH_PATH": "api/ready?deep=1"}
    assert daemon.health_check_env("") == {}          # no ready URL: the image's default
    for url in ("http://localhost/healthz", "http://localhost:http/healthz"):
        with pytest.raises(daemon.DaemonError, match="names no port"):
            daemon.health_check_env(url)


def test_up_waits_until_the_service_answers_and_down_stops_it(tmp_path):
    port = unused_port()
    url = f"http://127.0.0.1:{port}/"
    record = daemon.up(str(tmp_path), "web", [sys.executable, "-m", "http.server", str(port),
                                             "--bind", "127.0.0.1"], ready_url=url)
    with urllib.request.urlopen(url, timeout=5) as response:
        assert response.status == 200
    with pytest.raises(daemon.DaemonError, match="already runs"):
        daemon.up(str(tmp_path), "web", [sys.executable, "-c", "pass"])
    assert daemon.down(str(tmp_path)) is True
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", port)) != 0
    assert not (tmp_path / daemon.STATE_FILE).exists()
    assert daemon.down(str(tmp_path)) is False        # nothing left to stop
    assert record.log == str(tmp_path / "logs" / "web.log")


def test_kill_is_a_crash_and_up_starts_the_service_again(tmp_path):
    # the drill's counter kill -9 (infra/local/drill.py)
    port = unused_port()
    command = [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"]
    first = daemon.up(str(tmp_path), "web", command, ready_url=f"http://127.0.0.1:{port}/")
    assert daemon.kill(str(tmp_path)) is True
    assert not first.alive() and daemon.read(str(tmp_path)) is None
    again = daemon.up(str(tmp_path), "web", command, ready_url=f"http://127.0.0.1:{port}/")
    try:
        assert again.pid != first.pid and again.alive()
    finally:
        assert daemon.down(str(tmp_path)) is True
