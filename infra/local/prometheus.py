"""Prometheus for the local lab and the demo: its configuration rendered from
the lab's topology, its command line, and reading its HTTP API.

The lab (infra/local/lab.py, ``start_monitoring``) runs Debian's
``prometheus`` (2.42) as one of its detached processes, on a free port
(broker/service_kit/ports.py), its configuration and its TSDB in the lab's
directory (``prometheus/prometheus.yml``, ``prometheus/data``), the rule file
the repository's ``infra/prometheus/alerts.yml`` as it is. This module
renders text, builds commands and reads HTTP; it never starts or stops a
process (the lab does).

Scrape jobs (the alert rules name them) and the labels of their targets
beside Prometheus's own ``job`` and ``instance`` (the target's host:port)::

    samsa-broker           each broker's /metrics            cluster, broker
    samsa-mirror           each mirror process's /metrics    mirror, process
    samsa-lag              the lag service's /metrics        -
    samsa-audit            the audit service's /metrics      -
    samsa-audit-counter    each audit counter's /metrics     cluster
    samsa-schema-registry  each schema registry's /metrics   cluster

Every scrape also carries ``lab`` (the topology's name) as an external label.
A job with ``access`` (a secured lab's) is scraped over HTTPS (``scheme:
https``, ``tls_config.ca_file`` the lab's authority) as the lab's
``prometheus`` user (``basic_auth`` with its password file).

Prometheus's own web server (UI and API) in a secured lab: ``web_config``
renders its ``--web.config.file`` (HTTPS with its host's certificate, HTTP
basic authentication with bcrypt hashes of the lab's HTTP users'
passwords, ``hash_password``); the API readers here then take an
``access``.
The YAML is written by hand, every string JSON-quoted (a JSON string is a
YAML double-quoted scalar), so nothing but the standard library is needed.
"""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from typing import Any, Iterable

from infra.local.metrics import HttpAccess, open_url
from infra.topology import Topology

#: The repository's alert rules (checked by `promtool check rules` in the tests).
ALERT_RULES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                           "prometheus", "alerts.yml")
DEBIAN_BINARIES = {"prometheus": "/usr/bin/prometheus", "promtool": "/usr/bin/promtool"}
#: Job names (infra/prometheus/alerts.yml names them too).
BROKER_JOB = "samsa-broker"
MIRROR_JOB = "samsa-mirror"
LAG_JOB = "samsa-lag"
AUDIT_JOB = "samsa-audit"
AUDIT_COUNTER_JOB = "samsa-audit-counter"
SCHEMA_REGISTRY_JOB = "samsa-schema-registry"
#: How long the lab's Prometheus keeps its samples (a lab lives for hours).
RETENTION = "2d"


class PrometheusError(RuntimeError):
    """Prometheus or promtool is missing, refuses a file, or its API failed;
    the message says which and what to do."""


@dataclass(frozen=True)
class ScrapeTarget:
    address: str
    """host:port of the target's /metrics (Prometheus's ``instance`` label)."""
    labels: tuple[tuple[str, str], ...] = ()
    """Labels added to every series of the target: (name, value)."""


@dataclass(frozen=True)
class ScrapeJob:
    name: str
    """The ``job`` label (one of the *_JOB names above for Samsa's services)."""
    targets: tuple[ScrapeTarget, ...]
    metrics_path: str = "/metrics"
    access: HttpAccess | None = None
    """Secured targets (a secured lab's): scraped over HTTPS checked against
    the access's authority, as its user (basic_auth with its password file)."""

    def secured(self, access: HttpAccess | None) -> "ScrapeJob":
        """This job scraped with ``access`` (None: as it is)."""
        return self if access is None else dataclasses.replace(self, access=access)


# ------------------------------------------------------------------ jobs

def broker_job(topology: Topology) -> ScrapeJob:
    """Every broker of every cluster whose metrics are on."""
    targets = [ScrapeTarget(f"{topology.address_of(f'{c.name}.broker-{i}')}:{port}",
                            (("cluster", c.name), ("broker", str(i))))
               for c in topology.clusters()
               for i, port in enumerate(topology.broker_metrics_ports(c.name)) if port != -1]
    return ScrapeJob(BROKER_JOB, tuple(targets))


def mirror_job(topology: Topology) -> ScrapeJob:
    """Every process of every mirror whose metrics are on."""
    targets = [ScrapeTarget(f"{topology.address_of(f'{m.name}.mirror-{i}')}:{port}",
                            (("mirror", m.name), ("process", str(i))))
               for m in topology.mirrors
               for i, port in enumerate(topology.mirror_metrics_ports(m.name)) if port != -1]
    return ScrapeJob(MIRROR_JOB, tuple(targets))


def single_job(name: str, address: str, **labels: str) -> ScrapeJob:
    """A job of one target: the lag service (LAG_JOB), the audit service
    (AUDIT_JOB), the schema registry (SCHEMA_REGISTRY_JOB)..."""
    return ScrapeJob(name, (ScrapeTarget(address, tuple(sorted(labels.items()))),))


def schema_registry_job(registries: Iterable[tuple[str, str]]) -> ScrapeJob:
    """The schema registry services (``python -m schemas serve``, REST API
    and /metrics on one port): (cluster, host:port)."""
    return ScrapeJob(SCHEMA_REGISTRY_JOB, tuple(ScrapeTarget(address, (("cluster", cluster),))
                                                for cluster, address in registries))


def audit_counter_job(counters: Iterable[tuple[str, str]]) -> ScrapeJob:
    """Audit counters (``python -m audit count --metrics-port``): (cluster, host:port)."""
    return ScrapeJob(AUDIT_COUNTER_JOB, tuple(ScrapeTarget(address, (("cluster", cluster),))
                                              for cluster, address in counters))


# ------------------------------------------------------------------ the configuration

def duration(seconds: float) -> str:
    """``seconds`` as a Prometheus duration ("5s", "500ms")."""
    ms = round(seconds * 1000)
    if ms <= 0:
        raise ValueError(f"a duration must be positive, not {seconds} s")
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


def _q(text: str) -> str:
    return json.dumps(text)


def render(topology: Topology, jobs: Iterable[ScrapeJob],
           rule_files: Iterable[str] = (ALERT_RULES,)) -> str:
    """prometheus.yml for ``jobs``, the intervals of ``topology.monitoring``
    and ``rule_files``. Jobs without targets are left out (Prometheus would
    accept them, but they say nothing)."""
    spec = topology.monitoring
    interval = duration(spec.scrape_interval_s)
    lines = [
        f"# Prometheus of the Samsa lab {topology.name!r}: rendered by infra/local/prometheus.py",
        "# from the lab's topology when the lab starts its monitoring; edit the topology.",
        "global:",
        f"  scrape_interval: {interval}",
        # a scrape must end before the next one is due
        f"  scrape_timeout: {duration(min(spec.scrape_interval_s, 10.0))}",
        f"  evaluation_interval: {duration(spec.evaluation_interval_s)}",
        "  external_labels:",
        f"    lab: {_q(topology.name)}",
        "rule_files:",
        *(f"  - {_q(os.path.abspath(path))}" for path in rule_files),
        "scrape_configs:",
    ]
    for job in jobs:
        if not job.targets:
            continue
        lines += [f"  - job_name: {_q(job.name)}",
                  f"    metrics_path: {_q(job.metrics_path)}"]
        if job.access is not None:
            lines += ["    scheme: https",
                      "    tls_config:",
                      f"      ca_file: {_q(os.path.abspath(job.access.ca_file))}",
                      "    basic_auth:",
                      f"      username: {_q(job.access.username)}",
                      f"      password_file: {_q(os.path.abspath(job.access.password_file))}"]
        lines.append("    static_configs:")
        for target in job.targets:
            lines.append(f"      - targets: [{_q(target.address)}]")
            if target.labels:
                lines.append("        labels: {" + ", ".join(
                    f"{_q(k)}: {_q(v)}" for k, v in target.labels) + "}")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------ the programs

def find(program: str) -> str:
    """The path of ``prometheus`` or ``promtool``, or PrometheusError saying
    what to install."""
    path = shutil.which(program) or (DEBIAN_BINARIES[program]
                                     if os.access(DEBIAN_BINARIES[program], os.X_OK) else None)
    if path is None:
        raise PrometheusError(f"{program} was not found: install Debian's prometheus package "
                              f"(`apt-get install prometheus`, which `make setup` does as root)")
    return path


def promtool(*args: str) -> str:
    """``promtool ARGS``: its output; PrometheusError with it when it refuses."""
    command = [find("promtool"), *args]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise PrometheusError(f"cannot run {' '.join(command)}: {exc}") from None
    output = (done.stdout + done.stderr).strip()
    if done.returncode != 0:
        raise PrometheusError(f"promtool {' '.join(args)} refuses:\n{output}")
    return output


def check_config(path: str) -> str:
    """``promtool check config``: the configuration and the rule files it
    names; PrometheusError with promtool's complaints when it refuses."""
    return promtool("check", "config", path)


def command(config_path: str, data_dir: str, address: str,
            web_config_path: str | None = None) -> list[str]:
    """Prometheus in the foreground (SIGTERM stops it cleanly), listening on
    ``address`` (host:port), its TSDB in ``data_dir``; its web server as
    ``web_config_path`` says where given (web_config)."""
    return [find("prometheus"), f"--config.file={config_path}",
            f"--storage.tsdb.path={data_dir}", f"--storage.tsdb.retention.time={RETENTION}",
            f"--web.listen-address={address}", "--log.format=json",
            *([f"--web.config.file={web_config_path}"] if web_config_path else [])]


def hash_password(password: str) -> str:
    """The bcrypt hash of ``password``, as Prometheus's basic_auth_users takes it."""
    import bcrypt
    return bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=10)).decode()


def web_config(cert_file: str, key_file: str, users: Iterable[tuple[str, str]]) -> str:
    """Prometheus's web configuration: HTTPS alone with ``cert_file`` and
    ``key_file``, HTTP basic authentication for ``users`` ((name, bcrypt
    hash) pairs: hash_password)."""
    lines = ["# Prometheus's web server: rendered by infra/local/prometheus.py for a secured lab.",
             "tls_server_config:",
             f"  cert_file: {_q(os.path.abspath(cert_file))}",
             f"  key_file: {_q(os.path.abspath(key_file))}",
             "basic_auth_users:"]
    lines += [f"  {_q(name)}: {_q(hashed)}" for name, hashed in users]
    return "\n".join(lines) + "\n"


def check_web_config(path: str) -> str:
    """``promtool check web-config``; PrometheusError when it refuses."""
    return promtool("check", "web-config", path)


# ------------------------------------------------------------------ the HTTP API

def api(url: str, path: str, timeout: float = 5.0, access: HttpAccess | None = None) -> Any:
    """The ``data`` of a GET of Prometheus's API (``url`` its base, ``path``
    e.g. "/api/v1/alerts"), asked as ``access`` says where given (a secured
    lab's); PrometheusError when it does not answer or says it failed."""
    try:
        with open_url(url.rstrip("/") + path, access, timeout) as response:
            body = json.load(response)
    except (OSError, ValueError) as exc:
        raise PrometheusError(f"Prometheus at {url} did not answer {path}: {exc}") from None
    if body.get("status") != "success":
        raise PrometheusError(f"Prometheus at {url} answered {path} with {body}")
    return body["data"]


def alerts(url: str, access: HttpAccess | None = None) -> list[dict[str, Any]]:
    """The alerts pending or firing now: each with ``labels`` (alertname
    among them), ``annotations``, ``state`` ("pending", "firing") and
    ``activeAt``."""
    return api(url, "/api/v1/alerts", access=access)["alerts"]


def targets(url: str, access: HttpAccess | None = None) -> list[dict[str, Any]]:
    """The active scrape targets: each with ``labels`` (job, instance, ...),
    ``health`` ("up", "down", "unknown") and ``lastError``."""
    return api(url, "/api/v1/targets", access=access)["activeTargets"]


def summary(url: str, access: HttpAccess | None = None) -> dict[str, Any]:
    """What ``status`` shows of a Prometheus: its URL, its targets up of all,
    the targets down, and the alerts firing and pending (by name and labels);
    ``error`` instead when it does not answer."""
    out: dict[str, Any] = {"url": url}
    try:
        found = targets(url, access)
        active = alerts(url, access)
    except PrometheusError as exc:
        out["error"] = str(exc)
        return out
    out["targets"] = len(found)
    out["targets_up"] = sum(t["health"] == "up" for t in found)
    out["targets_down"] = sorted(f"{t['labels'].get('job')} {t['labels'].get('instance')}"
                                 for t in found if t["health"] != "up")
    out["alerts"] = [{"name": a["labels"].get("alertname"), "state": a["state"],
                      "labels": {k: v for k, v in a["labels"].items() if k != "alertname"}}
                     for a in active]
    return out


__all__ = ["ALERT_RULES", "AUDIT_COUNTER_JOB", "AUDIT_JOB", "BROKER_JOB", "LAG_JOB", "MIRROR_JOB",
           "PrometheusError", "SCHEMA_REGISTRY_JOB", "ScrapeJob", "ScrapeTarget", "alerts", "api",
           "audit_counter_job", "broker_job", "check_config", "check_web_config", "command",
           "duration", "find", "hash_password", "mirror_job", "promtool", "render",
           "schema_registry_job", "single_job", "summary", "targets", "web_config"]
