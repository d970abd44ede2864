"""Secured /metrics (issue 30, points 1 and 5: "metrics where asked"): a
broker whose metrics port serves HTTPS and asks for a user, scraped by
Debian's real Prometheus the way an operator configures it (``scheme:
https``, ``basic_auth`` with a password file, ``tls_config``): the job with
credentials is up and its samples are stored; a job without them is down with
401; a stranger's curl gets nothing but /healthz's "ok". Bad settings stop the broker's start
with the reason."""
from __future__ import annotations

import base64
import socket
import ssl
import urllib.error
import urllib.request

import pytest

from broker.harness.broker_process import BrokerProcess
from broker.security.ca import CertificateAuthority
from broker.service_kit import http_security as hs
from broker.service_kit.process import SupervisedProcess
from broker_helpers import run_module, unused_port, wait_until
from infra.local import prometheus


def test_prometheus_scrapes_a_secured_broker_with_its_credentials(broker_factory, tmp_path):
    ca = CertificateAuthority.create(str(tmp_path / "ca"))
    cert, key = ca.issue("broker-0", ["127.0.0.1", "localhost"], str(tmp_path / "certs"))
    users = tmp_path / "http-users"
    hs.write_users_file(str(users), [hs.HttpUser("prometheus", "read",
                                                 hs.hash_password("scrape-secret", 10_000))])
    broker = broker_factory({"metrics_http.tls_cert_file": cert,
                             "metrics_http.tls_key_file": key,
                             "metrics_http.users_file": str(users)}, metrics_port=0)
    url = f"https://127.0.0.1:{broker.metrics_port}/metrics"
    context = ssl.create_default_context(cafile=ca.cert_path)

    # a stranger: plain HTTP gets no answer, HTTPS without a user a 401
    with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
        urllib.request.urlopen(f"http://127.0.0.1:{broker.metrics_port}/metrics", timeout=10)
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(url, timeout=10, context=context)
    assert refused.value.code == 401
    # a probe's /healthz answers without a user, and says nothing else
    with urllib.request.urlopen(f"https://127.0.0.1:{broker.metrics_port}/healthz",
                                timeout=10, context=context) as answer:
        assert answer.read() == b"ok\n"
    token = base64.b64encode(b"prometheus:scrape-secret").decode()
    request = urllib.request.Request(url, headers={"Authorization": f"Basic {token}"})
    with urllib.request.urlopen(request, timeout=10, context=context) as answer:
        assert b"samsa_" in answer.read()

    password_file = tmp_path / "prometheus.pw"
    password_file.write_text("scrape-secret\n")
    config = tmp_path / "prometheus.yml"
    target = f"127.0.0.1:{broker.metrics_port}"
    config.write_text(f"""global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: secured
    scheme: https
    basic_auth:
      username: prometheus
      password_file: {password_file}
    tls_config:
      ca_file: {ca.cert_path}
    static_configs:
      - targets: ["{target}"]
  - job_name: stranger
    scheme: https
    tls_config:
      ca_file: {ca.cert_path}
    static_configs:
      - targets: ["{target}"]
""")
    address = f"127.0.0.1:{unused_port()}"
    process = SupervisedProcess("prometheus", prometheus.command(
        str(config), str(tmp_path / "tsdb"), address), str(tmp_path / "prometheus.log"))
    process.start()
    prometheus_url = f"http://{address}"
    try:
        def health() -> dict[str, dict]:
            try:
                found = prometheus.targets(prometheus_url)
            except prometheus.PrometheusError:
                return {}
            return {t["labels"]["job"]: t for t in found if t["health"] != "unknown"}
        wait_until(lambda: len(health()) == 2, 60, interval=0.5,
                   what=lambda: f"both jobs scraped: {health()}")
        jobs = health()
        assert jobs["secured"]["health"] == "up", jobs["secured"]
        assert jobs["stranger"]["health"] == "down"
        assert "401" in jobs["stranger"]["lastError"], jobs["stranger"]
        samples = prometheus.api(prometheus_url, "/api/v1/query?query="
                                 "samsa_http_authentications_total%7Bresult%3D%22missing%22%7D")
        assert samples["result"] and float(samples["result"][0]["value"][1]) >= 1
    finally:
        process.stop(10)


def test_bad_metrics_settings_stop_the_broker_with_the_reason(tmp_path):
    port = unused_port()
    out = run_module("broker", "--data-dir", str(tmp_path / "data"), "--port", str(port),
                     "--metrics-port", "0", "--set",
                     f"metrics_http.users_file={tmp_path / 'missing'}", timeout=60)
    assert out.returncode == 2, out.stderr.decode()
    assert f"metrics_http: users file {tmp_path / 'missing'}: No such file" in \
        out.stderr.decode()
    # and nothing listens on its port
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()


def test_a_mirror_with_bad_metrics_settings_does_not_start(tmp_path):
    out = run_module("mirror", "--source", "dc-a=127.0.0.1:1/dc-a",
                     "--target", "analysis=127.0.0.1:1/analysis", "--set",
                     "metrics_http.tls_cert_file=/nonexistent.crt", "--set",
                     "metrics_http.tls_key_file=/nonexistent.key", timeout=60)
    assert out.returncode == 2, out.stderr.decode()
    assert "metrics_http: cannot use the TLS files /nonexistent.crt" in out.stderr.decode()
