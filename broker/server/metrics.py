"""Broker metrics, exposed in Prometheus text format over HTTP (served by
broker/service_kit/metrics_http.py).

The hot path only bumps plain integers (a prometheus_client Counter takes a
lock per increment, too dear at a million messages a second); a custom
collector (``BrokerCollector``) turns them into metric families when
Prometheus scrapes.

Metrics (all prefixed ``samsa_``):
  messages_in_total{topic}, bytes_in_total{topic}     appended by produce
  bytes_out_total{topic}                              sent by fetch (sendfile)
  messages_out_total{topic}                           estimated: bytes out / the
                                                      topic's mean message size
  requests_total{api}, request_errors_total{api,error}
  flushes_total, flush_seconds (histogram)            fsyncs and their latency
  log_size_bytes{topic,partition}, log_segments{topic,partition},
  log_end_offset{topic,partition}, log_flushed_offset{topic,partition}
  log_quarantined_bytes{topic,partition}              corrupt or missing, never served
  validations_off_loop_total                          produces checked on the worker thread
  produce_short_cuts_total                            acks=none produces the batch-1 path
                                                      appended straight to their log
  connections, connections_throttled_total, connections_closed_idle_total
  request_memory_bytes, request_memory_waits_total    the request memory pool
  page_cache_budget_bytes, page_cache_dropped_bytes_total
                                                      drop-behind (-1: off)
  log_dir_free_bytes, log_dir_capacity_bytes          the file system of data_dir: bytes
                                                      an unprivileged writer may still use
                                                      (statvfs f_bavail) and its size; absent
                                                      when it cannot be read
Replication (docs/replication.md), on brokers that replicate:
  leader_partitions, under_replicated_partitions      partitions this broker leads, and
                                                      those of them with a replica out of sync
  under_min_isr_partitions                            led partitions refusing acks=all
  partition_in_sync_replicas{topic,partition}         size of a led partition's in-sync set
  log_high_watermark{topic,partition}                 the committed end (consumers read below
                                                      it and below the flushed end)
  follower_lag_bytes{topic,partition,follower}        a leader's view of each follower
  isr_shrinks_total, isr_expands_total, leader_changes_total, replica_truncations_total
  replication_bytes_in_total, replication_bytes_out_total
  controller_active, offline_partitions               1 on the controller; partitions with
                                                      no leader (the controller's count)
  controller_elections_total, unclean_elections_total
  reassignments_running                               partitions being moved (the controller's)
  reassignments_total, preferred_elections_total      moves finished, leads moved back
"""
from __future__ import annotations

import bisect
import os
from collections import defaultdict
from typing import Callable, Iterable

from prometheus_client.core import (CounterMetricFamily, GaugeMetricFamily,
                                    HistogramMetricFamily)


FLUSH_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class BrokerMetrics:
    """Plain counters, bumped on the event-loop thread, read by the scraper."""

    def __init__(self) -> None:
        self.messages_in: dict[str, int] = defaultdict(int)
        self.bytes_in: dict[str, int] = defaultdict(int)
        self.bytes_out: dict[str, int] = defaultdict(int)
        self.requests: dict[str, int] = defaultdict(int)
        self.errors: dict[tuple[str, str], int] = defaultdict(int)
        self.flushes = 0
        self.flush_seconds_sum = 0.0
        self.flush_buckets = [0] * (len(FLUSH_BUCKETS) + 1)
        self.connections = 0
        self.sendfile_bytes = 0
        self.tls_fetch_bytes = 0      # fetched bytes encrypted in user space (TLS listener)
        self.memory_trims = 0         # malloc_trim calls after validations off the loop
        # security (authentication.py, authorization.py)
        self.authentications: dict[tuple[str, str], int] = defaultdict(int)  # (mechanism, result)
        self.authorization_denials: dict[tuple[str, str], int] = defaultdict(int)  # (op, type)
        self.validations_off_loop = 0
        self.produce_short_cuts = 0        # batch-1 appends (ProducePath.append_no_ack_run)
        self.connections_throttled = 0     # reading paused: too many queued requests
        self.connections_closed_idle = 0
        self.memory_pool = None            # RequestMemoryPool, set by the server
        self.page_cache = None             # PageCacheBudget when drop-behind is on
        # replication (replica_manager.py, replica_fetcher.py)
        self.leader_changes = 0
        self.isr_shrinks = 0
        self.isr_expands = 0
        self.truncations = 0
        self.replication_bytes_in = 0
        self.replication_bytes_out = 0
        self.replicas = None               # () -> the broker's PartitionReplicas, when replicating
        self.controller = None             # ControllerStats, when replicating

    def observe_flush(self, seconds: float) -> None:
        self.flushes += 1
        self.flush_seconds_sum += seconds
        self.flush_buckets[bisect.bisect_left(FLUSH_BUCKETS, seconds)] += 1


class BrokerCollector:
    """The metric families of a BrokerMetrics, of the partitions' logs
    (``partitions()``: (topic, partition, log) triples) and of the file
    system of ``log_dir`` (None: not reported), read at scrape."""

    def __init__(self, metrics: BrokerMetrics,
                 partitions: Callable[[], Iterable[tuple[str, int, object]]],
                 log_dir: str | None = None) -> None:
        self.metrics = metrics
        self.partitions = partitions
        self.log_dir = log_dir

    def collect(self):
        m = self.metrics
        for name, doc, data in (
                ("samsa_messages_in", "Messages appended, by topic", m.messages_in),
                ("samsa_bytes_in", "Bytes appended, by topic", m.bytes_in),
                ("samsa_bytes_out", "Bytes sent to consumers, by topic", m.bytes_out)):
            fam = CounterMetricFamily(name, doc, labels=["topic"])
            for topic, value in list(data.items()):
                fam.add_metric([topic], value)
            yield fam
        fam = CounterMetricFamily("samsa_messages_out",
                                  "Messages sent to consumers, by topic (estimated from bytes "
                                  "out and the topic's mean message size: zero-copy sends "
                                  "do not look at messages)", labels=["topic"])
        for topic, out in list(m.bytes_out.items()):
            n_in, b_in = m.messages_in.get(topic, 0), m.bytes_in.get(topic, 0)
            fam.add_metric([topic], round(out * n_in / b_in) if b_in else 0)
        yield fam
        fam = CounterMetricFamily("samsa_requests", "Requests handled, by API", labels=["api"])
        for api, value in list(m.requests.items()):
            fam.add_metric([api], value)
        yield fam
        fam = CounterMetricFamily("samsa_request_errors", "Error results, by API and error",
                                  labels=["api", "error"])
        for (api, error), value in list(m.errors.items()):
            fam.add_metric([api, error], value)
        yield fam
        fam = CounterMetricFamily("samsa_flushes", "fsyncs of partition logs")
        fam.add_metric([], m.flushes)
        yield fam
        cumulative, buckets = 0, []
        for bound, count in zip(list(FLUSH_BUCKETS) + [float("inf")], m.flush_buckets):
            cumulative += count
            buckets.append((str(bound) if bound != float("inf") else "+Inf", cumulative))
        yield HistogramMetricFamily("samsa_flush_seconds", "Latency of one log flush (fsync)",
                                    buckets=buckets, sum_value=m.flush_seconds_sum)
        pc = m.page_cache
        fam = GaugeMetricFamily("samsa_page_cache_budget_bytes",
                                "Drop-behind budget of recently flushed bytes left in the "
                                "page cache (-1: drop-behind off)")
        fam.add_metric([], pc.budget_bytes if pc is not None else -1)
        yield fam
        fam = CounterMetricFamily("samsa_page_cache_dropped_bytes",
                                  "Flushed log bytes advised out of the page cache")
        fam.add_metric([], pc.dropped_bytes if pc is not None else 0)
        yield fam
        fam = CounterMetricFamily("samsa_sendfile_bytes",
                                  "Message bytes sent zero-copy with sendfile(2)")
        fam.add_metric([], m.sendfile_bytes)
        yield fam
        fam = CounterMetricFamily("samsa_memory_trims",
                                  "Times the memory freed by the validation of compressed "
                                  "sets was given back to the system (malloc_trim)")
        fam.add_metric([], m.memory_trims)
        yield fam
        fam = CounterMetricFamily("samsa_tls_fetch_bytes",
                                  "Message bytes read and encrypted in user space for fetches "
                                  "on the TLS listener (no sendfile there)")
        fam.add_metric([], m.tls_fetch_bytes)
        yield fam
        fam = CounterMetricFamily("samsa_authentications",
                                  "SASL exchanges, by mechanism and result (ok, failed, "
                                  "timeout)", labels=["mechanism", "result"])
        for (mechanism, result), value in list(m.authentications.items()):
            fam.add_metric([mechanism, result], value)
        yield fam
        fam = CounterMetricFamily("samsa_authorization_denials",
                                  "Requests refused by the ACLs, by operation and resource "
                                  "type", labels=["operation", "resource_type"])
        for (operation, resource_type), value in list(m.authorization_denials.items()):
            fam.add_metric([operation, resource_type], value)
        yield fam
        fam = CounterMetricFamily("samsa_validations_off_loop",
                                  "Produce requests whose compressed wrappers were checked on "
                                  "the validation thread (they inflate beyond "
                                  "inline_decompress_bytes)")
        fam.add_metric([], m.validations_off_loop)
        yield fam
        fam = CounterMetricFamily("samsa_produce_short_cuts",
                                  "acks=none produce requests appended straight to their log "
                                  "by the batch-1 path (a partition already appended to in "
                                  "the same read)")
        fam.add_metric([], m.produce_short_cuts)
        yield fam
        gauge = GaugeMetricFamily("samsa_connections", "Open client connections")
        gauge.add_metric([], m.connections)
        yield gauge
        fam = CounterMetricFamily("samsa_connections_throttled",
                                  "Times a connection stopped being read: more than "
                                  "max_queued_requests_per_connection replies waited")
        fam.add_metric([], m.connections_throttled)
        yield fam
        fam = CounterMetricFamily("samsa_connections_closed_idle",
                                  "Connections closed after connections_max_idle_ms idle")
        fam.add_metric([], m.connections_closed_idle)
        yield fam
        if m.memory_pool is not None:
            gauge = GaugeMetricFamily("samsa_request_memory_bytes",
                                      "Bytes of the request memory pool reserved for frames "
                                      "being read (capacity: queued_max_request_bytes)")
            gauge.add_metric([], m.memory_pool.used)
            yield gauge
            fam = CounterMetricFamily("samsa_request_memory_waits",
                                      "Frames whose reading waited for the request memory pool")
            fam.add_metric([], m.memory_pool.denied)
            yield fam
        size = GaugeMetricFamily("samsa_log_size_bytes", "Bytes retained per partition",
                                 labels=["topic", "partition"])
        segs = GaugeMetricFamily("samsa_log_segments", "Segment files per partition",
                                 labels=["topic", "partition"])
        end = GaugeMetricFamily("samsa_log_end_offset", "Next offset to be written",
                                labels=["topic", "partition"])
        flushed = GaugeMetricFamily("samsa_log_flushed_offset",
                                    "Flushed end: consumers see messages below it",
                                    labels=["topic", "partition"])
        quarantined = GaugeMetricFamily("samsa_log_quarantined_bytes",
                                        "Bytes recovery found corrupt or missing and never "
                                        "serves (fetches there get CORRUPT_MESSAGE)",
                                        labels=["topic", "partition"])
        for topic, partition, lg in self.partitions():
            labels = [topic, str(partition)]
            size.add_metric(labels, lg.size_bytes)
            segs.add_metric(labels, len(lg.segments))
            end.add_metric(labels, lg.end_offset)
            flushed.add_metric(labels, lg.flushed_end)
            quarantined.add_metric(labels, lg.quarantined_bytes)
        yield from (size, segs, end, flushed, quarantined)
        yield from self._log_dir_space()
        if m.replicas is not None:
            yield from self._replication(m)

    def _replication(self, m: BrokerMetrics):
        for name, doc, value in (
                ("samsa_isr_shrinks", "Shrinks of the in-sync sets of partitions this broker "
                 "leads (its own, and the controller's for replicas gone or restarted)",
                 m.isr_shrinks),
                ("samsa_isr_expands", "In-sync sets this broker expanded as leader",
                 m.isr_expands),
                ("samsa_leader_changes", "Times this broker became a partition's leader",
                 m.leader_changes),
                ("samsa_replica_truncations", "Follower logs cut to agree with their leader",
                 m.truncations),
                ("samsa_replication_bytes_in", "Bytes appended as a follower",
                 m.replication_bytes_in),
                ("samsa_replication_bytes_out", "Bytes sent to followers",
                 m.replication_bytes_out)):
            fam = CounterMetricFamily(name, doc)
            fam.add_metric([], value)
            yield fam
        led = under = under_min = 0
        isr = GaugeMetricFamily("samsa_partition_in_sync_replicas",
                                "Replicas in a led partition's in-sync set",
                                labels=["topic", "partition"])
        hw = GaugeMetricFamily("samsa_log_high_watermark",
                               "Committed end of a replicated partition on this replica",
                               labels=["topic", "partition"])
        lag = GaugeMetricFamily("samsa_follower_lag_bytes",
                                "Bytes a follower lacks of its leader's log (the leader's view)",
                                labels=["topic", "partition", "follower"])
        for rep in list(m.replicas()):
            labels = [rep.topic, str(rep.partition)]
            if rep.log.high_watermark is not None:
                hw.add_metric(labels, rep.log.high_watermark)
            if rep.role.value != "leader":
                continue
            led += 1
            under += len(rep.isr) < len(rep.replicas)
            under_min += len(rep.isr) < rep.min_insync
            isr.add_metric(labels, len(rep.isr))
            for follower, progress in list(rep.followers.items()):
                behind = rep.log.written_end - progress.log_end if progress.log_end >= 0 else \
                    rep.log.written_end - rep.log.earliest_offset
                lag.add_metric(labels + [str(follower)], max(0, behind))
        for name, doc, value in (
                ("samsa_leader_partitions", "Partitions this broker leads", led),
                ("samsa_under_replicated_partitions",
                 "Led partitions with a replica out of the in-sync set", under),
                ("samsa_under_min_isr_partitions",
                 "Led partitions with fewer in-sync replicas than min.insync.replicas "
                 "(acks=all refused)", under_min)):
            gauge = GaugeMetricFamily(name, doc)
            gauge.add_metric([], value)
            yield gauge
        yield from (isr, hw, lag)
        c = m.controller
        if c is not None:
            gauge = GaugeMetricFamily("samsa_controller_active", "1 on the cluster's controller")
            gauge.add_metric([], int(c.active))
            yield gauge
            gauge = GaugeMetricFamily("samsa_offline_partitions",
                                      "Partitions with no leader (counted by the controller; 0 "
                                      "elsewhere)")
            gauge.add_metric([], c.offline_partitions if c.active else 0)
            yield gauge
            gauge = GaugeMetricFamily("samsa_reassignments_running",
                                      "Partitions whose replicas are being moved (counted by "
                                      "the controller; 0 elsewhere)")
            gauge.add_metric([], c.reassignments_running if c.active else 0)
            yield gauge
            for name, doc, value in (
                    ("samsa_reassignments", "Reassignments this broker finished as controller",
                     c.reassignments_done),
                    ("samsa_preferred_elections",
                     "Leads moved to the preferred replica by this broker as controller",
                     c.preferred_elections),
                    ("samsa_controller_elections", "Leaders this broker chose as controller",
                     c.elections),
                    ("samsa_unclean_elections",
                     "Out-of-sync replicas made leader (committed messages lost)",
                     c.unclean_elections)):
                fam = CounterMetricFamily(name, doc)
                fam.add_metric([], value)
                yield fam

    def _log_dir_space(self):
        """Free and total bytes of the log directory's file system (one
        statvfs per scrape). f_bavail, not f_bfree: the blocks reserved for
        root are no room for a broker that does not run as root."""
        if self.log_dir is None:
            return
        try:
            st = os.statvfs(self.log_dir)
        except OSError:
            return          # the directory is gone: the broker's own errors say so
        free = GaugeMetricFamily("samsa_log_dir_free_bytes",
                                 "Bytes still available to the broker on the file system of "
                                 "its log directory (statvfs f_bavail)")
        free.add_metric([], st.f_bavail * st.f_frsize)
        total = GaugeMetricFamily("samsa_log_dir_capacity_bytes",
                                  "Size of the file system of the log directory")
        total.add_metric([], st.f_blocks * st.f_frsize)
        yield free
        yield total
