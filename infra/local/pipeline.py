"""The whole pipeline on this machine (``make demo``): datacenters, mirror,
audit, Airflow's warehouse load, and a summary of what reached each tier.

    python -m infra.local.pipeline up [--dir .demo] [--base-port N] [--messages N] [--keep-up]
        [--sensor-timeout S] [--sensor-poke S] [--audit-grace S] [--insecure]
    python -m infra.local.pipeline down [--dir .demo]

``up``: the lab (ZooKeeper; dc-a and dc-b, two brokers each behind HAProxy;
the analysis cluster; the mirror), the analysis cluster's schema registry
served over Confluent's REST API (``python -m schemas serve``: the audit
service and the loader read schemas through it), an audit counter per
cluster and the audit service, a real Airflow with the project's DAGs; then audited traffic
through each datacenter's load balancer (page views, v1 then v2, searches,
logins; event times over the last three whole hours); then warehouse_load
run by Airflow's scheduler for each of those hours (each gated on the
audit), and a summary. Everything is stopped at the end unless --keep-up
(then ``down``, or ``make demo-down``). Ports come from one base port (the
lab's layout; the audit service at base+500, Airflow at base+501, the audit
counters' /metrics at base+510..512), so two demos with different base ports
do not collide. The lab serves each cluster's schema registry over
Confluent's REST API (on free ports); the audit service and the loader read
the analysis cluster's through it. The demo also runs the lab's monitoring
(Lab.start_monitoring: a lag service and Prometheus on free ports, scraping
the brokers, the mirror, the schema registries, the lag service, the audit
counters and the audit service, with the alert rules of
infra/prometheus/alerts.yml); the summary says where Prometheus is.

The lab runs secured unless ``--insecure`` (docs/security.md, "The secured
lab"): the traffic is produced as its ``producer`` user, the audit's
counters and service read as ``audit``, the loader (its ``[loader.credentials]``
in warehouse.toml) as ``loader``, the mirror as ``mirror``, all over TLS.
Every HTTP port the lab and the pipeline run serves HTTPS to the lab's HTTP
users (the audit service, its counters' /metrics, the registry, the lag
service); Airflow's and Prometheus's own web servers stay plain, on this
machine.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import sys
import time
import urllib.request

from broker.service_kit import cli
from infra.local import airflow_stack, daemon, prometheus
from infra.local.lab import DEFAULT_TOPOLOGY, Lab, LabError, free_topology
from infra.local.lab_security import AUDIT, HTTP_READER, ZK_AUDIT
from infra.local.metrics import scheme, scrape
from audit.times import iso
from infra.local.traffic import HOUR_MS, TrafficConfig, produce, progress_bar
from infra.topology import load_topology

CLUSTERS = ("dc-a", "dc-b", "analysis")
TIERS = ("producer", "cluster", "mirror", "hadoop")


def say(text: str) -> None:
    print(f"[demo] {text}", flush=True)


class Pipeline:
    def __init__(self, state_dir: str, base_port: int | None = None,
                 overrides: dict | None = None, sensor_timeout_s: float = 900.0,
                 sensor_poke_s: float = 5.0, audit_grace_s: float | None = None,
                 secure: bool = True) -> None:
        """``sensor_timeout_s``, ``sensor_poke_s``: warehouse_load's wait for
        the audit (the sensor never gives up before the audit's grace for
        the hour has passed: hadoop_loader/audit_wait.py); ``audit_grace_s``:
        the audit service's grace (None: its default, 30 minutes);
        ``secure``: the lab secured (see the module)."""
        self.state_dir = os.path.abspath(state_dir)
        self.sensor_timeout_s = sensor_timeout_s
        self.sensor_poke_s = sensor_poke_s
        self.audit_grace_s = audit_grace_s
        # the mirror publishes its tier's counts every 2 s (1 s by default)
        overrides = {"mirrors.to-analysis.settings": "audit_publish_interval_ms=2000",
                     "security.enabled": "true" if secure else "false", **(overrides or {})}
        self._overrides = dict(overrides)
        if base_port:
            overrides["base_port"] = str(base_port)
        topology = load_topology(DEFAULT_TOPOLOGY, overrides)
        if not base_port:
            topology = free_topology(topology)
        self.topology = topology
        self.audit_port = topology.base_port + 500
        self.airflow_port = topology.base_port + 501
        self.lab = Lab(topology, self.path("lab"))
        self.security = self.lab.security
        #: how the demo asks the HTTP services (None: plain HTTP, anyone)
        self.http_access = self.lab.http_access
        self.audit_url = f"{scheme(self.http_access)}://127.0.0.1:{self.audit_port}"
        #: Airflow's API server: HTTPS with a certificate of its own where secured
        self.airflow_tls = self.lab.airflow_tls
        self.airflow_url = (f"{'https' if self.airflow_tls else 'http'}://127.0.0.1:"
                            f"{self.airflow_port}")
        #: seconds ``start`` took: "lab" (its Lab.up), "whole" (everything)
        self.timings: dict[str, float] = {}

    def path(self, *parts: str) -> str:
        return os.path.join(self.state_dir, *parts)

    @property
    def registry_url(self) -> str:
        """The analysis cluster's schema registry (Confluent's REST API), once
        the lab is up."""
        url = self.lab.schema_registry_url("analysis")
        if url is None:
            raise RuntimeError("the lab serves no schema registry: start it first")
        return url

    @property
    def registry_client_url(self) -> str:
        """registry_url as the audit service and the loader name it: as the
        lab's HTTP admin where secured (the password and the authority in
        registry_env)."""
        if self.security is None:
            return self.registry_url
        return self.registry_url.replace("https://", f"https://{self.http_access.username}@", 1)

    @property
    def registry_env(self) -> dict[str, str]:
        """The environment a client of the secured registry reads its
        password file and authority from (schemas/stores.py); none when open."""
        if self.security is None:
            return {}
        return {"SAMSA_SCHEMA_REGISTRY_PASSWORD_FILE": self.http_access.password_file,
                "SAMSA_SCHEMA_REGISTRY_CA_FILE": self.http_access.ca_file}

    def verdicts(self, begin_ms: int, end_ms: int) -> list[dict]:
        """The audit's verdicts of the windows beginning in [begin_ms, end_ms)
        (asked as the lab's HTTP admin where secured)."""
        from audit.remote import fetch_verdicts
        return fetch_verdicts(self.audit_url, begin_ms, end_ms,
                              credentials=self.http_access)["verdicts"]

    # ------------------------------------------------------------ up

    def counter_metrics_port(self, cluster: str) -> int:
        """The /metrics port of the audit counter of ``cluster`` (monitoring on)."""
        return self.topology.base_port + 510 + CLUSTERS.index(cluster)

    def start(self, airflow: bool = True, mirror_blacklist: str | None = None,
              monitoring: bool = False) -> None:
        """Everything up; ``mirror_blacklist``: topics the mirror leaves out
        (until ``restart_mirror``); ``monitoring``: the lag service and
        Prometheus too (the audit counters then serve /metrics)."""
        os.makedirs(self.state_dir, exist_ok=True)
        with open(self.path("demo.json"), "w") as f:
            json.dump({"base_port": self.topology.base_port, "audit_url": self.audit_url,
                       "airflow_url": self.airflow_url}, f)
        t0 = time.monotonic()
        say(f"starting the lab (ZooKeeper, dc-a and dc-b behind HAProxy, analysis, the mirror) "
            f"on ports from {self.topology.base_port}")
        self.lab.up(timeout=60, mirrors=False)
        self.timings["lab"] = time.monotonic() - t0
        self.prepare_topics()
        # the mirror starts once the topics exist: a topic made under a running
        # consumer group moves its partitions, and at-least-once copies again
        # what was not committed yet
        self.start_mirror(mirror_blacklist)
        python = sys.executable
        credentials = [] if self.security is None else \
            self.security.credential_options(AUDIT, ZK_AUDIT)
        # the audit's HTTP ports: HTTPS, the lab's users
        count_http = [] if self.security is None else \
            self.security.http_options("audit", "metrics_http")
        serve_http = [] if self.security is None else self.security.http_options("audit")
        say(f"the analysis cluster's schema registry (Confluent's REST API) at "
            f"{self.registry_url}")
        for cluster in CLUSTERS:
            metrics = (["--metrics-port", str(self.counter_metrics_port(cluster))]
                       if monitoring else [])
            daemon.up(self.path(f"count-{cluster}"), f"audit-count-{cluster}",
                      [python, "-m", "audit", "count", "--cluster",
                       f"{cluster}={self.lab.zookeeper_connect(cluster)}",
                       "--set", "publish_interval_ms=2000", "--set", f"group=audit-{cluster}",
                       *metrics, *credentials, *count_http])
        daemon.up(self.path("audit"), "audit-service",
                  [python, "-m", "audit", "serve", "--zookeeper",
                   self.lab.zookeeper_connect("analysis"), "--http-port", str(self.audit_port),
                   "--set", f"data_dir={self.path('audit')}",
                   "--set", f"registry={self.registry_client_url}", *credentials,
                   *serve_http]
                  + ([] if self.audit_grace_s is None
                     else ["--set", f"grace_ms={int(self.audit_grace_s * 1000)}"]),
                  ready_url=f"{self.audit_url}/healthz", env=self.registry_env,
                  access=self.http_access)
        say(f"audit counters in every cluster; the audit service at {self.audit_url}")
        if monitoring:
            self.start_monitoring()
        config = self.path("warehouse.toml")
        with open(config, "w") as f:
            f.write(f"""[loader]
zookeeper = "{self.lab.zookeeper_connect('analysis')}"
registry = "{self.registry_client_url}"
output = "{self.path('warehouse')}"
master = "local[2]"
cluster_name = "analysis"
progress_interval_s = 5.0

[warehouse]
audit_url = "{self.audit_url}"
sensor_poke_s = {self.sensor_poke_s}
sensor_timeout_s = {self.sensor_timeout_s}
retries = 2
retry_delay_s = 5.0
max_retry_delay_s = 30.0
""")
            if self.security is not None:
                f.write(self.security.warehouse_toml())
        if airflow:
            airflow_stack.up(self.path("airflow"), self.airflow_port, config,
                             say=lambda text: say(f"airflow: {text}"),
                             extra_env=self.registry_env, tls=self.airflow_tls)
        if self.security is not None:
            say(f"secured: TLS listeners asking for SCRAM-SHA-512, ACLs, ZooKeeper over TLS with identities; "
                f"secrets in {self.security.directory}")
        self.timings["whole"] = time.monotonic() - t0
        say(f"everything is up in {self.timings['whole']:.0f} s")

    def start_monitoring(self) -> str:
        """The lab's lag service and Prometheus, which also scrapes what the
        lab does not run: the mirror, the audit counters, the audit service and
        the schema registry. Returns Prometheus's URL."""
        host = self.topology.host
        scraper = None if self.security is None else self.security.http_access(HTTP_READER)
        jobs = tuple(job.secured(scraper) for job in (
            prometheus.mirror_job(self.topology),
            prometheus.audit_counter_job((c, f"{host}:{self.counter_metrics_port(c)}")
                                         for c in CLUSTERS),
            prometheus.single_job(prometheus.AUDIT_JOB, f"{host}:{self.audit_port}")))
        url = self.lab.start_monitoring(extra_jobs=jobs, timeout=60)
        say(f"Prometheus at {url}/ scrapes every service (alerts: {url}/alerts); "
            f"the lag service at {scheme(self.http_access)}://{host}:"
            f"{self.lab.records['lag'].ports['http']}/")
        return url

    def start_mirror(self, blacklist: str | None = None) -> None:
        topology = self.topology
        if blacklist:
            topology = load_topology(DEFAULT_TOPOLOGY, {
                **self._overrides, "base_port": str(topology.base_port),
                "mirrors.to-analysis.blacklist": blacklist})
        Lab(topology, self.path("mirror"),
            security_dir=None if self.security is None else self.security.directory
            ).up(timeout=60, only="mirror:to-analysis")

    def restart_mirror(self) -> None:
        """Stop the mirror and start it with the topology's own filters."""
        Lab.open(self.path("mirror")).down()
        self.start_mirror()

    def prepare_topics(self) -> None:
        """The schemas in every cluster's registry (the loader decodes in
        analysis with them) and the topics in every cluster, audit topic
        included, before any consumer group starts."""
        from infra.local.traffic import prepare_clusters
        prepare_clusters({self.lab.zookeeper_connect(c):
                          self.lab.topology.cluster(c).topic_partitions() for c in CLUSTERS},
                         self.security)
        say("schemas registered and topics made in every cluster")

    def traffic(self, messages_per_dc: int, hours: int = 3):
        now = int(time.time() * 1000)
        first = now - now % HOUR_MS - hours * HOUR_MS
        say(f"producing {messages_per_dc:,} audited events into each datacenter through its "
            f"load balancer, event times {iso(first)} to {iso(first + hours * HOUR_MS)} UTC")
        result = produce({dc: (self.lab.lb_address(dc), self.lab.zookeeper_connect(dc))
                          for dc in ("dc-a", "dc-b")},
                         TrafficConfig(messages_per_dc=messages_per_dc, hours=hours),
                         progress=progress_bar(), first_hour_ms=first, security=self.security)
        say(f"{result.total():,} events acknowledged in {result.seconds:.1f} s")
        return result

    def load_hours(self, first_hour_ms: int, hours: int, timeout: float | None = None) -> dict:
        """warehouse_load for each hour, run by Airflow's scheduler; run id ->
        state. ``timeout``: how long to follow the runs (default: as long as
        a sensor may wait, its timeout or the audit's grace, and a load)."""
        if timeout is None:
            from audit.config import ServeConfig
            grace = ServeConfig.grace_ms / 1000 if self.audit_grace_s is None \
                else self.audit_grace_s
            timeout = max(self.sensor_timeout_s, grace) + 600.0
        token = self.airflow_token()
        runs = []
        for k in range(hours):
            start = first_hour_ms + k * HOUR_MS     # a run by hand loads the hour starting here
            run_id = f"demo-{iso(start).replace(' ', 'T').replace(':', '')}"
            self.airflow_api("/api/v2/dags/warehouse_load/dagRuns", token,
                             {"logical_date": dt.datetime.fromtimestamp(
                                 start / 1000, dt.timezone.utc).isoformat(),
                              "dag_run_id": run_id})
            runs.append(run_id)
        self.airflow_api("/api/v2/dags/warehouse_load", token, {"is_paused": False},
                         method="PATCH")
        say(f"warehouse_load triggered for {hours} hours; Airflow's scheduler runs them "
            f"(sensor on the audit, spark-submit of the loader, validation, _SUCCESS)")
        deadline = time.monotonic() + timeout
        states: dict[str, str] = {}
        while time.monotonic() < deadline:
            states = {r: self.airflow_api(f"/api/v2/dags/warehouse_load/dagRuns/{r}",
                                          token)["state"] for r in runs}
            if all(s in ("success", "failed") for s in states.values()):
                break
            time.sleep(3)
        for run, state in states.items():
            say(f"  {run}: {state}")
        return states

    def airflow_token(self) -> str:
        """A bearer token of the REST API (the demo's admin user)."""
        return self.airflow_api("/auth/token", body={
            "username": "admin", "password": airflow_stack.password(self.path("airflow"))})[
            "access_token"]

    def airflow_api(self, path: str, token: str | None = None, body: dict | None = None,
                    method: str | None = None) -> dict:
        """One call of the demo's Airflow's REST API (over HTTPS, checked
        against the lab's authority, where secured)."""
        return call_airflow(self.airflow_url + path, token, body, method,
                            ca_file=self.airflow_tls.ca_file if self.airflow_tls else None)

    # ------------------------------------------------------------ summary

    def summary(self, result, first_hour_ms: int, hours: int, states: dict) -> tuple[str, bool]:
        from hadoop_loader.dag_steps import rows_in_hour
        from hadoop_loader.outputfs import OutputFS
        lines = ["", "=" * 78, "Samsa demo: what happened", "=" * 78,
                 "produced (acknowledged by the brokers):"]
        for dc in sorted(result.acked):
            lines.append(f"  {dc}: " + ", ".join(f"{t} {result.total(dc, t):,}"
                                                  for t in sorted(result.acked[dc])))
        verdicts = self.verdicts(first_hour_ms, first_hour_ms + hours * HOUR_MS)
        lines.append("audit completeness per tier (every window of those hours):")
        ok = True
        for tier in TIERS:
            chosen = [v for v in verdicts if v["tier"] == tier]
            if not chosen:
                lines.append(f"  {tier:9s} no counts")
                ok = False
                continue
            produced = sum(v["produced"] for v in chosen)
            missing = sum(v["missing"] for v in chosen)
            duplicated = sum(v["duplicated"] for v in chosen)
            worst = min(v["completeness"] for v in chosen)
            lines.append(f"  {tier:9s} {100 * (produced - missing) / produced if produced else 100:8.3f} %"
                         f"  (worst window {worst:.3f} %, missing {missing:,}, duplicated "
                         f"{duplicated:,})")
            ok = ok and missing == 0
        out = OutputFS(self.path("warehouse"))
        lines.append("loaded rows per topic and hour (from the Parquet footers):")
        expected = result.per_topic_hour()
        for (topic, hour), n in sorted(expected.items()):
            loaded = rows_in_hour(out, topic, hour)
            marker = out.exists(f"{topic}/date={iso(hour)[:10]}/hour={iso(hour)[11:13]}",
                                "_SUCCESS")
            lines.append(f"  {topic:11s} {iso(hour)}  {loaded:7,} rows of {n:7,} produced"
                         f"{'  _SUCCESS' if marker else ''}")
            ok = ok and loaded >= n
        ok = ok and all(s == "success" for s in states.values())
        if self.security is not None:
            tls_bytes, sendfile_bytes = self.fetched_bytes()
            lines.append(f"secured: every fetch on the brokers' TLS listeners ({tls_bytes:,} "
                         f"bytes encrypted, {sendfile_bytes:,} sent in clear by sendfile); "
                         f"secrets in {self.security.directory}")
            ok = ok and tls_bytes > 0 and sendfile_bytes == 0
        warehouse = self.path("warehouse")
        lines += [
            f"the Parquet: {warehouse}/<topic>/date=YYYY-MM-DD/hour=HH/",
            "  query it: .venv/bin/python -c \"import pyarrow.dataset as ds; "
            f"print(ds.dataset('{warehouse}/page_views', partitioning='hive')"
            ".to_table().group_by('hour').aggregate([('member_id', 'count')]))\"",
            f"the audit report: {self.audit_url}/",
            f"the schema registry (Confluent's REST API): {self.registry_url}/subjects",
            *([f"their HTTPS: the lab's authority {self.http_access.ca_file}; user admin, "
               f"password in {self.http_access.password_file} (curl --cacert CA -u admin:...)"]
              if self.http_access is not None else []),
            *([f"Prometheus: {self.lab.prometheus_url()}/ (alerts: "
               f"{self.lab.prometheus_url()}/alerts; rules: infra/prometheus/alerts.yml)"]
              if self.lab.prometheus_url() else []),
            f"Airflow: {self.airflow_url}/ (login admin / "
            f"{airflow_stack.password(self.path('airflow'))})",
            f"stop it: make demo-down (or python -m infra.local.pipeline down --dir "
            f"{self.state_dir})",
            "=" * 78, "RESULT: " + ("nothing lost, every hour loaded" if ok else "SOMETHING IS "
                                    "MISSING: see above"),
        ]
        return "\n".join(lines), ok

    def fetched_bytes(self) -> tuple[int, int]:
        """Over every broker of the lab: the message bytes fetched on TLS
        listeners, and those sent by sendfile (on plaintext ones)."""
        t = self.topology
        tls = clear = 0.0
        for cluster in t.clusters():
            for i, port in enumerate(t.broker_metrics_ports(cluster.name)):
                if port == -1:
                    continue
                samples = scrape(t.address_of(f"{cluster.name}.broker-{i}"), port,
                                 access=self.http_access) or {}
                tls += samples.get(("samsa_tls_fetch_bytes_total", frozenset()), 0.0)
                clear += samples.get(("samsa_sendfile_bytes_total", frozenset()), 0.0)
        return int(tls), int(clear)

    # ------------------------------------------------------------ down

    def stop(self) -> None:
        stop(self.state_dir)


def stop(state_dir: str) -> int:
    """Stop every part of the pipeline of ``state_dir``; how many processes
    were still running (0: nothing was)."""
    state_dir = os.path.abspath(state_dir)
    running = airflow_stack.down(os.path.join(state_dir, "airflow"), say=lambda *_: None)
    for name in ["audit"] + [f"count-{c}" for c in CLUSTERS]:
        running += int(daemon.down(os.path.join(state_dir, name)))
    for part in ("mirror", "lab"):
        lab_dir = os.path.join(state_dir, part)
        if os.path.exists(os.path.join(lab_dir, "topology.toml")):
            try:
                running += len(Lab.open(lab_dir).down())
            except LabError as exc:
                say(f"{part}: {exc}")
    return running


def call_airflow(url: str, token: str | None = None, body: dict | None = None,
                 method: str | None = None, ca_file: str | None = None) -> dict:
    """One call of Airflow's REST API (JSON in and out; POST when there is a
    body); ``ca_file``: the authority of an API server on HTTPS."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method or ("POST" if data else "GET"),
                                     headers={"Content-Type": "application/json"})
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(request, timeout=30,
                                context=airflow_stack.url_context(ca_file)) as response:
        return json.load(response)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m infra.local.pipeline", description=__doc__,
        epilog=cli.exit_status(
            (0, "up: every hour loaded, nothing lost; down: stopped, or nothing was running "
                "(it says so)"),
            (1, "up: something is missing in the summary, or a part failed (its error "
                "above)"),
            (2, "bad usage")),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    cli.add_version_option(p)
    p.add_argument("command", choices=["up", "down"])
    p.add_argument("--dir", default=os.environ.get("SAMSA_DEMO_DIR", ".demo"),
                   help="state directory (default .demo)")
    p.add_argument("--base-port", type=int, default=int(os.environ.get("SAMSA_DEMO_BASE_PORT",
                                                                        "0")),
                   help="first port of the layout (default: a free one)")
    p.add_argument("--messages", type=int, default=20_000,
                   help="events produced into each datacenter (default 20000)")
    p.add_argument("--sensor-timeout", type=float, default=900.0, metavar="S",
                   help="how long warehouse_load waits for the audit to call an hour complete "
                        "(default 900; never less than until the audit's grace for the hour "
                        "has passed)")
    p.add_argument("--sensor-poke", type=float, default=5.0, metavar="S",
                   help="how often the wait asks the audit (default 5)")
    p.add_argument("--audit-grace", type=float, default=None, metavar="S",
                   help="the audit service's grace: a window is pending, not lost, this long "
                        "after it ended (default: the service's, 1800)")
    p.add_argument("--keep-up", action="store_true", help="leave everything running")
    p.add_argument("--insecure", action="store_true",
                   help="run the lab open: plaintext listeners, no users, ACLs or ZooKeeper "
                        "identities (default: secured; docs/security.md)")
    args = p.parse_args(argv)
    if args.command == "down":
        if not os.path.isdir(args.dir):
            say(f"nothing to stop: no pipeline in {os.path.abspath(args.dir)}")
            return 0
        stopped = stop(args.dir)
        say(f"stopped {stopped} processes" if stopped else
            f"nothing to stop: no process of the pipeline in {os.path.abspath(args.dir)} "
            "was running")
        return 0
    if os.path.exists(os.path.join(args.dir, "demo.json")):
        stop(args.dir)                       # a demo left up earlier: start afresh
        shutil.rmtree(args.dir, ignore_errors=True)
    pipeline = Pipeline(args.dir, args.base_port or None, sensor_timeout_s=args.sensor_timeout,
                        sensor_poke_s=args.sensor_poke, audit_grace_s=args.audit_grace,
                        secure=not args.insecure)
    ok = False
    try:
        pipeline.start(monitoring=True)
        result = pipeline.traffic(args.messages)
        states = pipeline.load_hours(result.first_hour_ms, 3)
        text, ok = pipeline.summary(result, result.first_hour_ms, 3, states)
        print(text)
    finally:
        if not args.keep_up:
            say("stopping everything (--keep-up leaves it running)")
            pipeline.stop()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
