"""The lag service: a loop that evaluates every group of every configured
cluster (broker/lag/monitor.py) each ``interval_s``, and one HTTP
server that serves the last evaluation (the service kit's, started by
``start()``: broker/service_kit/metrics_http.py).

HTTP: Burrow's v3 answers, keys, nesting and status codes
(broker/lag/burrow.py), with Samsa's fields beside Burrow's:

    GET /v3/kafka                                   the clusters
    GET /v3/kafka/<cluster>/consumer                the groups evaluated
    GET /v3/kafka/<cluster>/consumer/<group>/status the group's status, its
                                                    partitions that are not OK
    GET /v3/kafka/<cluster>/consumer/<group>/lag    ... and every partition
    GET /burrow/admin                               "GOOD" (Burrow's health check)
    GET /metrics                                    Prometheus text
    GET /healthz                                    200 once a cycle is done

An unknown group (or cluster) in .../status or .../lag: 404 with Burrow's
NOTFOUND status; an unknown cluster in .../consumer: 404 "cluster not
found"; any other path: 404 "invalid request type".

Prometheus gauges (labels cluster, group; per partition also topic and
partition = broker-partition):

    samsa_group_status            0 OK, 1 WARN, 2 STALL, 3 STOP, 4 REWIND
    samsa_group_lag_bytes         the group's total lag
    samsa_partition_status        as the group's, per partition
    samsa_partition_lag_bytes     log end - committed offset
    samsa_partition_lag_seconds   age of the next message to consume (0 caught up)
    samsa_partition_owner_alive   1 if a live member owns it, else 0
    samsa_lag_evaluation_seconds  how long the last cycle took, per cluster
    samsa_lag_evaluation_errors_total  cycles that failed, per cluster

A cluster whose ZooKeeper or brokers cannot be reached keeps its last
evaluation (and says so in ``errors``); the others go on.
"""
from __future__ import annotations

import logging
import re
import socket
import threading
import time
from http import HTTPStatus

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from broker.lag import burrow
from broker.lag.monitor import GroupStatus, LagMonitor
from broker.coordination.zk import make_client, start_client
from broker.service_kit.json_http import JSONHTTPServer, Request, Response, json_response
from broker.service_kit.metrics_http import serve_metrics

from .config import LagServiceConfig

log = logging.getLogger("broker.lag")


class LagService:
    def __init__(self, config: LagServiceConfig) -> None:
        self.config = config
        self._lock = threading.Lock()
        self._status: dict[str, dict[str, GroupStatus]] = {c.name: {} for c in config.clusters}
        self._cycle_seconds: dict[str, float] = {}
        self._errors: dict[str, int] = {c.name: 0 for c in config.clusters}
        self._last_error: dict[str, str] = {}
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._monitors: dict[str, LagMonitor] = {}
        self._clients = {}
        self._group_filter = re.compile(config.groups)
        self._http: JSONHTTPServer | None = None
        self._threads: list[threading.Thread] = []
        self._host = socket.gethostname()            # Burrow's request.host

    @property
    def port(self) -> int:
        """The HTTP port, once started."""
        return self._http.port

    @property
    def scheme(self) -> str:
        """http, or https when the port serves TLS."""
        return self._http.scheme

    def start(self) -> "LagService":
        """Bind the HTTP port (OSError when it is taken: nothing has started
        then), then start evaluating."""
        self._http = serve_metrics(self.config.http_host, self.config.http_port,
                                   _Collector(self), answer=self.answer, name="lag",
                                   security=self.config.http)
        thread = threading.Thread(target=self._loop, name="lag-evaluate", daemon=True)
        thread.start()
        self._threads.append(thread)
        log.info("lag service on %s://%s:%d/ evaluating %s every %.1f s", self._http.scheme,
                 self.config.http_host, self.port,
                 ", ".join(c.name for c in self.config.clusters), self.config.interval_s)
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._http is not None:
            self._http.stop()
        for thread in self._threads:
            thread.join(timeout=10)
        for monitor in self._monitors.values():
            monitor.close()
        for client in self._clients.values():
            client.stop()
            client.close()

    def wait_ready(self, timeout: float) -> bool:
        return self._ready.wait(timeout)

    # ------------------------------------------------------------ the loop

    def _monitor(self, cluster) -> LagMonitor:
        monitor = self._monitors.get(cluster.name)
        if monitor is None:
            client = make_client(cluster.zookeeper,
                                 tls=self.config.credentials.zookeeper_tls_settings())
            start_client(client, cluster.zookeeper, timeout=10.0, what="lag service")
            self._clients[cluster.name] = client
            monitor = self._monitors[cluster.name] = LagMonitor(
                client, self.config.thresholds(), client_id="samsa-lag-service",
                **self.config.credentials.admin_options())
        return monitor

    def evaluate_once(self) -> None:
        for cluster in self.config.clusters:
            started = time.monotonic()
            try:
                monitor = self._monitor(cluster)
                groups = [g for g in monitor.groups() if self._group_filter.fullmatch(g)]
                result = monitor.evaluate(groups)
            except Exception as exc:   # noqa: BLE001 - one cluster's failure stops no other
                with self._lock:
                    self._errors[cluster.name] += 1
                    # kazoo's ConnectionLoss() says nothing: name the exception
                    reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
                    self._last_error[cluster.name] = reason
                log.warning("evaluating %s failed: %s", cluster.name, reason)
                continue
            with self._lock:
                self._status[cluster.name] = result
                self._cycle_seconds[cluster.name] = time.monotonic() - started
                self._last_error.pop(cluster.name, None)
            bad = {g: s.status.name for g, s in result.items() if s.status.name != "OK"}
            if bad:
                log.info("%s: %s", cluster.name, ", ".join(f"{g} {s}" for g, s in bad.items()))
        self._ready.set()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.evaluate_once()
            self._stop.wait(self.config.interval_s)

    # ------------------------------------------------------------ reading

    def snapshot(self) -> tuple[dict[str, dict[str, GroupStatus]], dict, dict, dict]:
        with self._lock:
            return ({c: dict(g) for c, g in self._status.items()}, dict(self._cycle_seconds),
                    dict(self._errors), dict(self._last_error))

    def answer(self, request: Request) -> Response:
        """The JSON of a GET (every path but /metrics): Burrow's v3 answers
        (broker/lag/burrow.py), with Burrow's HTTP status codes."""
        path = request.segments
        status, _seconds, _errors, last_error = self.snapshot()
        if path == ["healthz"]:
            ready = self._ready.is_set()
            return json_response({"ready": ready},
                                 HTTPStatus.OK if ready else HTTPStatus.SERVICE_UNAVAILABLE)
        if path == ["burrow", "admin"]:                 # Burrow's health check
            return Response(HTTPStatus.OK, b"GOOD", "text/plain")
        where = burrow.request_info(request.path, self._host)
        if path == ["v3", "kafka"]:
            return json_response(burrow.answer("cluster list returned", where,
                                               clusters=sorted(status)))
        if path[:2] != ["v3", "kafka"] or len(path) not in (4, 6) or path[3] != "consumer" \
                or len(path) == 6 and path[5] not in ("status", "lag"):
            return json_response(burrow.error("invalid request type", where),
                                 HTTPStatus.NOT_FOUND)
        cluster = path[2]
        if len(path) == 4:
            if cluster not in status:
                return json_response(burrow.error("cluster not found", where),
                                     HTTPStatus.NOT_FOUND)
            return json_response(burrow.answer("consumer list returned", where,
                                               consumers=sorted(status[cluster]),
                                               last_error=last_error.get(cluster)))
        group = status.get(cluster, {}).get(path[4])
        if group is None:
            return json_response(burrow.answer(burrow.STATUS_MESSAGE, where,
                                               status=burrow.not_found_status(cluster, path[4])),
                                 HTTPStatus.NOT_FOUND)
        body = burrow.consumer_status(cluster, group, show_all=path[5] == "lag")
        return json_response(burrow.answer(burrow.STATUS_MESSAGE, where, status=body,
                                           last_error=last_error.get(cluster)))


class _Collector:
    def __init__(self, service: LagService) -> None:
        self.service = service

    def collect(self):
        status, seconds, errors, _last = self.service.snapshot()
        group_status = GaugeMetricFamily("samsa_group_status", "worst partition status: 0 OK, "
                                         "1 WARN, 2 STALL, 3 STOP, 4 REWIND",
                                         labels=["cluster", "group"])
        group_lag = GaugeMetricFamily("samsa_group_lag_bytes", "total lag of the group",
                                      labels=["cluster", "group"])
        labels = ["cluster", "group", "topic", "partition"]
        part_status = GaugeMetricFamily("samsa_partition_status", "0 OK, 1 WARN, 2 STALL, "
                                        "3 STOP, 4 REWIND", labels=labels)
        part_lag = GaugeMetricFamily("samsa_partition_lag_bytes",
                                     "log end - committed offset", labels=labels)
        part_seconds = GaugeMetricFamily("samsa_partition_lag_seconds", "age of the next "
                                         "message to consume; 0 when caught up", labels=labels)
        part_alive = GaugeMetricFamily("samsa_partition_owner_alive",
                                       "1 if a live member owns the partition", labels=labels)
        cycle = GaugeMetricFamily("samsa_lag_evaluation_seconds",
                                  "duration of the last evaluation", labels=["cluster"])
        failed = CounterMetricFamily("samsa_lag_evaluation_errors",
                                     "evaluations that failed", labels=["cluster"])
        for cluster, groups in status.items():
            for g, s in groups.items():
                group_status.add_metric([cluster, g], int(s.status))
                group_lag.add_metric([cluster, g], s.total_lag_bytes)
                for p in s.partitions:
                    key = [cluster, g, p.topic, p.partition]
                    part_status.add_metric(key, int(p.status))
                    if p.lag_bytes is not None:
                        part_lag.add_metric(key, p.lag_bytes)
                    if p.lag_seconds is not None:
                        part_seconds.add_metric(key, p.lag_seconds)
                    part_alive.add_metric(key, 1 if p.owner_alive else 0)
        for cluster, value in seconds.items():
            cycle.add_metric([cluster], value)
        for cluster, n in errors.items():
            failed.add_metric([cluster], n)
        yield from (group_status, group_lag, part_status, part_lag, part_seconds, part_alive,
                    cycle, failed)
