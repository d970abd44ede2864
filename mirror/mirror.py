"""The mirror process: one pipe (thread) per source cluster into the shared
target writer, a lag probe, the metrics endpoint, and progress in the log.

A pipe that fails for good (MirrorFailure) stops the whole mirror: the
others drain and commit what the target acknowledged, and the process exits
non-zero, loudly, rather than skip data.
"""
from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid

from broker.lag.monitor import LagMonitor
from broker.coordination.zk import make_client, start_client
from broker.service_kit.metrics_http import serve_metrics

from .config import MirrorConfig
from .marks import exclusion_pattern, mirrored_topics
from .metrics import MirrorMetrics
from .pipe import MirrorFailure, SourcePipe
from .target import TargetCluster

log = logging.getLogger(__name__)

LAG_INTERVAL_S = 1.0
PROGRESS_INTERVAL_S = 10.0


class Mirror:
    def __init__(self, config: MirrorConfig, metrics_port: int | None = None) -> None:
        self.config = config
        self.consumer_id = config.consumer_id or \
            f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.metrics = MirrorMetrics()
        self.metrics_port: int | None = None
        self._metrics_server = None
        self._stopping = threading.Event()
        self.failure: BaseException | None = None
        self.target = TargetCluster(config.target, config)
        self.pipes: list[SourcePipe] = []
        self.publishers: list = []           # the audit's, one per source
        self._audit_registry = None
        try:
            counters = self._audit_counters() if config.audit else {}
            for source in config.sources:
                excluded = self._copies_in(source.zookeeper)
                if excluded:
                    log.info("leaving out %d topics of %s that are mirrored copies already: "
                             "%s", len(excluded), source.name, ", ".join(sorted(excluded)))
                self.pipes.append(SourcePipe(
                    source, config, self.target, self.metrics,
                    exclusion_pattern(config.blacklist, excluded), self.consumer_id,
                    *counters.get(source.name, (None, None))))
        except BaseException:
            self._close_all()
            raise
        port = config.metrics_port if metrics_port is None else metrics_port
        if port >= 0:
            self._metrics_server = serve_metrics(config.metrics_host, port, self.metrics,
                                                 name="mirror-metrics",
                                                 security=config.metrics_http)
            self.metrics_port = self._metrics_server.port
        self._threads: list[threading.Thread] = []

    def _audit_counters(self) -> dict:
        """The mirror tier of the audit: a counter and a publisher per source
        (each source's pipe publishes its counts, then commits what they cover)."""
        from audit.counting import (AUDIT_TOPIC, CounterConfig, MonitoringPublisher,
                                    TierCounter, monitoring_writer)
        config = self.config
        registry_url = config.audit_registry or f"zookeeper://{config.target.zookeeper}"
        self._audit_registry, writer = monitoring_writer(
            registry_url, self.config.credentials.zookeeper_tls_settings().kazoo_options())
        counters = {}
        for source in config.sources:
            counter = TierCounter(CounterConfig(
                tier="mirror", datacenter=config.audit_datacenter or config.target.name,
                cluster=source.name, window_ms=config.audit_window_ms,
                dedup_ids=config.audit_dedup_ids, dedup_windows=config.audit_dedup_windows,
                service=f"samsa-mirror-{config.group}"))

            def send(values, stamps, source=source.name):
                self.target.ensure_topic(AUDIT_TOPIC, source)
                for batch in self.target.send(AUDIT_TOPIC, values, stamps, None):
                    batch.result(30)

            publisher = MonitoringPublisher(counter, writer.encode, send)
            self.publishers.append(publisher)
            counters[source.name] = (counter, publisher)   # the pipe publishes, then commits
        return counters

    def _copies_in(self, zookeeper: str) -> dict[str, list[str]]:
        """Topics of a source cluster that are copies (no loops)."""
        client = make_client(zookeeper, self.config.session_timeout_ms,
                             tls=self.config.credentials.zookeeper_tls_settings())
        start_client(client, zookeeper, what="mirror")
        try:
            return mirrored_topics(client)
        finally:
            client.stop()
            client.close()

    # ------------------------------------------------------------ running

    def start(self) -> "Mirror":
        for pipe in self.pipes:
            t = threading.Thread(target=self._run_pipe, args=(pipe,),
                                 name=f"mirror-{pipe.source.name}", daemon=True)
            self._threads.append(t)
            t.start()
        bodies = [(self._probe_lag, "mirror-lag"), (self._report, "mirror-progress")]
        for body, name in bodies:
            t = threading.Thread(target=body, name=name, daemon=True)
            t.start()
        log.info("mirror %s (%s) copying %s into %s, topics %r%s", self.config.group,
                 self.consumer_id, ", ".join(s.name for s in self.config.sources),
                 self.config.target.name, self.config.whitelist,
                 f", not {self.config.blacklist!r}" if self.config.blacklist else "",
                 extra={"event": "started", "metrics_port": self.metrics_port})
        return self

    def _run_pipe(self, pipe: SourcePipe) -> None:
        try:
            pipe.run()
        except MirrorFailure as exc:
            self.failure = exc
            self.stop()
        except Exception as exc:   # noqa: BLE001 - a bug: stop loudly rather than lose data
            log.exception("mirror pipe for %s crashed", pipe.source.name)
            self.failure = exc
            self.stop()

    def stop(self) -> None:
        """Ask every pipe to drain and stop (returns at once)."""
        self._stopping.set()
        for pipe in self.pipes:
            pipe.stop()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until every pipe has ended; True if they have."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for t in self._threads:
            t.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return not any(t.is_alive() for t in self._threads)

    def close(self) -> None:
        self.stop()
        if not self.wait(60):
            log.warning("mirror %s: pipes still running 60 s after the stop (%s); closing "
                        "anyway: what they did not commit is copied again after a restart",
                        self.config.group,
                        ", ".join(t.name for t in self._threads if t.is_alive()))
        self._close_all()
        log.info("mirror %s stopped", self.config.group, extra={"event": "stopped"})

    def _close_all(self) -> None:
        for pipe in self.pipes:
            pipe.close()
        for publisher in self.publishers:     # what the pipes counted last, while the
            publisher.close(timeout=10)        # target's producer is still open
        self.target.close()
        if self._audit_registry is not None:
            self._audit_registry.close()
        if self._metrics_server is not None:
            self._metrics_server.stop()
            self._metrics_server = None

    def __enter__(self) -> "Mirror":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def copied(self) -> int:
        return sum(p.copied for p in self.pipes)

    # ------------------------------------------------------------ lag and progress

    def _probe_lag(self) -> None:
        """Every LAG_INTERVAL_S, per source: the mirror group's lag on every
        partition of its topics, owned by this process, by another, or by
        nobody (a dead member's until the group rebalances), evaluated as
        every group is (broker/lag/monitor.py): from the group's commits,
        except for the partitions this process owns, whose lag counts from
        what the target acknowledged (ahead of the last commit). A partition
        not owned here never drops out of the metric."""
        monitors = {}
        try:
            while not self._stopping.wait(LAG_INTERVAL_S):
                for pipe in self.pipes:
                    try:
                        monitor = monitors.get(pipe.source.name)
                        if monitor is None:
                            monitor = monitors[pipe.source.name] = LagMonitor(
                                pipe.consumer.client, client_id="samsa-mirror-lag",
                                **self.config.credentials.admin_options())
                        lags, statuses = self._lags(pipe, monitor)
                        self.metrics.set_lag(pipe.source.name, lags, statuses)
                    except Exception as exc:   # noqa: BLE001 - a probe must not stop the copy
                        log.debug("lag probe of %s failed: %s", pipe.source.name, exc)
        finally:
            for monitor in monitors.values():
                monitor.close()

    def _lags(self, pipe: SourcePipe, monitor: LagMonitor) -> tuple[dict, dict]:
        """({(topic, bp): bytes behind}, {(topic, bp): status}) of every
        partition of the group's topics in this source."""
        group = monitor.evaluate([self.config.group])[self.config.group]
        owned = pipe.consumer.owned()
        acknowledged = dict(pipe.acknowledged)
        lags, statuses = {}, {}
        for p in group.partitions:
            key = (p.topic, p.partition)
            if p.lag_bytes is None:
                continue
            lag = p.lag_bytes
            if key in owned and key in acknowledged and p.log_end is not None:
                lag = max(0, p.log_end - max(acknowledged[key], p.committed or 0))
            lags[key] = lag
            statuses[key] = int(p.status)
        return lags, statuses

    def _report(self) -> None:
        last_count, last_time = 0, time.monotonic()
        while not self._stopping.wait(PROGRESS_INTERVAL_S):
            count, now = self.copied, time.monotonic()
            rate = (count - last_count) / (now - last_time)
            unacked = sum(p.unacknowledged for p in self.pipes)
            log.info("copied %d messages (%.0f msg/s), %d unacknowledged, %d bytes behind",
                     count, rate, unacked, self.metrics.total_lag_bytes(),
                     extra={"event": "progress", "copied": count, "rate": round(rate),
                            "lag_bytes": self.metrics.total_lag_bytes()})
            last_count, last_time = count, now


__all__ = ["Mirror", "MirrorFailure"]
