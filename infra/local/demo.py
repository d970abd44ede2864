"""The multi-datacenter part of `make demo`: the default lab topology (two
datacenters of two brokers behind HAProxy, an analysis cluster, a mirror of
two processes) brought up on free ports in a temporary directory; web
servers in each datacenter publish page views through their load balancer
(no ZooKeeper on their side); the mirror copies both datacenters into the
analysis cluster; the demo reads the copies back there, prints the lab's
status (with its lag service and its Prometheus: URL, targets up, alerts)
and takes everything down.

The lab runs secured (docs/security.md, "The secured lab"): the web
servers publish over TLS as the user ``producer``, the mirror reads and
writes as ``mirror``, the demo reads the copies as ``admin``; and it shows
that a client without credentials is refused, in plaintext and over TLS. ``--insecure`` runs it open.

    python -m infra.local.demo [--messages 20000] [--keep] [--insecure]
"""
from __future__ import annotations

import argparse
import dataclasses
import shutil
import sys
import tempfile
import time

from broker.client.admin import AdminClient
from broker.client.consumer import Consumer
from broker.client.producer import Producer
from broker.protocol.errors import ErrorCode, SamsaError
from infra.local.lab import DEFAULT_TOPOLOGY, Lab, free_topology
from infra.local.lab_security import ADMIN, PRODUCER, LabSecurity
from infra.local.status import render
from infra.topology import SecuritySpec, load_topology

TOPIC = "page-views"


def count_in(addresses: list[str], topic: str, security: LabSecurity | None = None) -> int:
    """Messages of ``topic`` readable on these brokers (read through, as a
    consumer; a replicated partition at its leader only); ``security``: a
    secured lab's (read as its admin)."""
    total = 0
    admin_options = {} if security is None else security.admin_options(ADMIN)
    client_settings = {} if security is None else security.client_settings(ADMIN)
    for address in addresses:
        ends = {}
        with AdminClient(address, **admin_options) as admin:
            for p in range(admin.partition_count(topic) or 0):
                try:
                    ends[p] = admin.latest_offset(topic, p)
                except SamsaError as exc:
                    if exc.code != ErrorCode.NOT_LEADER_FOR_PARTITION:
                        raise        # not led here: counted at its leader
        if not ends:
            continue
        consumer = Consumer(bootstrap=address, max_wait_ms=50, **client_settings)
        try:
            consumer.assign([(topic, p) for p in ends], start="earliest")
            while any(consumer.position((topic, p)) < end for p, end in ends.items()):
                total += len(consumer.poll(500))
        finally:
            consumer.close()
    return total


def stranger_refused(address: str, ca_file: str) -> bool:
    """Whether a producer with no credentials gets nothing in at ``address``:
    neither in plaintext nor over TLS (trusting the lab's authority) without
    a user."""
    refused = True
    for tls in ({}, {"tls": True, "tls_ca_file": ca_file}):
        with Producer(bootstrap=address, acks="flushed", client_id="stranger", retries=0,
                      partitioner="any", **tls) as p:
            p.send(TOPIC, b"a stranger's page view", key=None)
            p.flush(30)
            refused = refused and p.failed_batches == 1
    return refused


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infra.local.demo", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=20_000,
                        help="page views published in each datacenter (default 20000)")
    parser.add_argument("--keep", action="store_true",
                        help="keep the lab's directory (logs, data) afterwards")
    parser.add_argument("--insecure", action="store_true",
                        help="run the lab open (no TLS, users, ACLs or ZooKeeper identities)")
    args = parser.parse_args(argv)
    workdir = tempfile.mkdtemp(prefix="samsa-lab-demo-")
    topology = free_topology(load_topology(DEFAULT_TOPOLOGY))
    topology = dataclasses.replace(topology, security=SecuritySpec(enabled=not args.insecure))
    lab = Lab(topology, workdir)
    print(f"[lab demo] bringing up the multi-DC lab ({DEFAULT_TOPOLOGY}) in {workdir}, "
          f"{'open' if args.insecure else 'secured'} ...")
    started = time.monotonic()
    ok = False
    try:
        lab.up(monitoring=True)
        print(f"[lab demo] up in {time.monotonic() - started:.1f}s: ZooKeeper, "
              f"{sum(c.brokers for c in topology.clusters())} brokers, "
              f"{len(topology.datacenters)} HAProxy load balancers, the mirror, the lag "
              f"service, Prometheus at {lab.prometheus_url()}/")
        security = lab.security
        if security is not None:
            print(f"[lab demo] secured: TLS listeners asking for SCRAM-SHA-512, ACLs, "
                  f"ZooKeeper over TLS with identities; secrets in {security.directory}")
            refused = stranger_refused(lab.lb_address(topology.datacenters[0].name),
                                       security.ca_file)
            print(f"[lab demo] a producer without credentials: "
                  f"{'refused' if refused else 'NOT refused'}")
            if not refused:
                print("[lab demo] FAILED: the lab let a client without credentials in")
                return 1
        client = {} if security is None else security.client_settings(PRODUCER)
        for dc in topology.datacenters:
            address = lab.lb_address(dc.name)
            # through a load balancer the broker reached picks the partition
            # (on a replicated cluster, one it leads)
            with Producer(bootstrap=address, acks="flushed", client_id=f"web-{dc.name}",
                          partitioner="any", **client) as p:
                for i in range(args.messages):
                    p.send(TOPIC, f'{{"dc": "{dc.name}", "page": "/item/{i % 500}", '
                                  f'"seq": {i}}}'.encode(), key=None)
                p.flush(120)
            print(f"[lab demo] {dc.name}: {args.messages} page views published through its "
                  f"load balancer {address} (acks=flushed, any partition)")
        wanted = args.messages * len(topology.datacenters)
        analysis = lab.broker_addresses(topology.analysis.name)
        deadline = time.monotonic() + 120
        copied = 0
        while time.monotonic() < deadline:
            copied = count_in(analysis, TOPIC, security)
            if copied >= wanted:
                break
            time.sleep(0.2)
        print(f"[lab demo] the mirror copied {copied} of {wanted} page views into the "
              f"analysis cluster ({', '.join(analysis)})")
        # the status reads the lag from the offsets the mirror commits (every
        # second); a partition without a commit counts from its earliest
        # offset, so an empty one (no page view went there) lags 0 bytes;
        # the mirror's /metrics measures its lag every second too (a source
        # it has not measured yet is not 0; None: its metrics are off)
        status = lab.status()
        while time.monotonic() < deadline and not all(
                lag.get("lag_bytes") == 0 and not lag.get("errors")
                and (mirror["metrics_lag_bytes"] is None
                     or mirror["metrics_lag_bytes"].get(source) == 0)
                for mirror in status["mirrors"] for source, lag in mirror["lag"].items()):
            time.sleep(0.2)
            status = lab.status()
        print("[lab demo] lab status:")
        print(render(status))
        ok = copied >= wanted
    finally:
        lab.down()
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            print(f"[lab demo] logs and data kept in {workdir}")
    print("[lab demo] OK" if ok else "[lab demo] FAILED: not everything arrived")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
